// commkit._C: the torch.distributed backend factory and commkit's small Python surface (version, the
// backends this build has, which backend a group runs on, topology advice, a glue benchmark).
#include <torch/csrc/utils/pybind.h>
#include <torch/python.h>

#include <chrono>

#include "commkit/comm/registry.h"
#include "commkit/common/config.h"
#include "commkit/common/system_view.h"
#include "commkit/topology/advisor.h"
#include "commkit/topology/probe.h"
#include "errors.h"
#include "store_adapter.h"
#include "torch_backend.h"
#include "work.h"

#if COMMKIT_TORCH_WITH_NCCL
#include "commkit/comm/nccl/nccl_backend.h"
#endif

namespace py = pybind11;
using commkit::torch_ext::CommkitBackend;
using commkit::torch_ext::CommkitWork;

namespace {

c10::intrusive_ptr<CommkitBackend> CreateBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                 double timeout_s, const std::string& host_backend,
                                                 const std::string& device_backend) {
  commkit::torch_ext::BackendConfig config;
  config.host_backend = host_backend;
  config.device_backend = device_backend;
  const auto timeout = std::chrono::milliseconds(static_cast<std::int64_t>(timeout_s * 1000));
  py::gil_scoped_release release;  // the rendezvous waits for the other ranks
  return c10::make_intrusive<CommkitBackend>(store, rank, size, timeout, config);
}

py::list Backends() {
  py::list out;
  for (const auto& b : commkit::Registry::Default().List()) {
    py::dict d;
    d["name"] = b.name;
    d["available"] = b.available;
    d["reason"] = b.reason;
    d["memory"] = std::string(commkit::ToString(b.memory));
    out.append(d);
  }
  return out;
}

std::string TopologyAdviceJson(const std::string& master_addr) {
  commkit::topology::ProbeOptions probe;
  auto report = commkit::topology::ProbeTopology(*commkit::SystemView::Live(), probe);
  if (!report.ok()) commkit::torch_ext::Throw(report.status());
  auto opts = commkit::topology::AdvisorOptions::FromEnvironment();
  if (!master_addr.empty()) opts.master_addr = master_addr;
  return commkit::topology::Advise(*report, opts).ToJson();
}

// Per-call cost of float32 SUM allreduces of `count` elements (8 bytes by default) over `iters` calls:
// through this backend (the c10d call, the Work, its wait) and straight on the commkit group underneath.
// The difference is the glue; at large counts it shows whether the backend adds copies.
py::dict GlueBench(CommkitBackend& backend, int iters, std::int64_t count) {
  using Clock = std::chrono::steady_clock;
  TORCH_CHECK_VALUE(iters > 0 && count > 0, "commkit: _glue_bench needs iters > 0 and count > 0");
  at::Tensor t = at::zeros({count}, at::kFloat);
  const auto n = static_cast<std::size_t>(count);
  std::vector<at::Tensor> ts{t};
  double via_backend = 0, direct = 0;
  {
    py::gil_scoped_release release;
    c10d::AllreduceOptions opts;
    for (int i = 0; i < iters / 10 + 1; ++i) backend.allreduce(ts, opts)->wait();  // warm up
    auto start = Clock::now();
    for (int i = 0; i < iters; ++i) backend.allreduce(ts, opts)->wait();
    via_backend = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / iters;
    commkit::ProcessGroup& pg = backend.host_group();
    float* p = t.data_ptr<float>();
    for (int i = 0; i < iters / 10 + 1; ++i) (void)(*pg.Allreduce(p, p, n, commkit::DataType::kFloat32, commkit::ReduceOp::Sum()))->Wait();
    start = Clock::now();
    for (int i = 0; i < iters; ++i) {
      auto w = pg.Allreduce(p, p, n, commkit::DataType::kFloat32, commkit::ReduceOp::Sum());
      if (!w.ok()) commkit::torch_ext::Throw(w.status());
      commkit::Status s = (*w)->Wait();
      if (!s.ok()) commkit::torch_ext::Throw(s);
    }
    direct = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / iters;
  }
  py::dict d;
  d["iters"] = iters;
  d["count"] = count;
  d["backend_us"] = via_backend;
  d["commkit_us"] = direct;
  d["glue_us"] = via_backend - direct;
  return d;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "commkit as a torch.distributed backend (see docs/pytorch.md)";
#if COMMKIT_TORCH_WITH_NCCL
  // Python loads extensions with RTLD_LOCAL, so the registry's dlsym lookup cannot see the NCCL
  // library this module links: register it explicitly.
  commkit::Registry::Default().Register(commkit::comm::nccl::NcclBackendInfo());
#endif
  py::module_::import("torch.distributed");  // c10d.Backend must be registered before our subclass

  py::class_<CommkitBackend, c10d::Backend, c10::intrusive_ptr<CommkitBackend>>(m, "CommkitBackend")
      .def_property_readonly("host_backend", &CommkitBackend::HostBackendName,
                             "The commkit backend that runs CPU tensors (host, gloo, mpi)")
      .def_property_readonly("device_backend", &CommkitBackend::DeviceBackendName,
                             "The commkit backend that runs CUDA tensors once the first one ran ('' before)");

  // Every Work this backend returns is a CommkitWork; registered as a subclass of torch's Work, Python
  // sees it as commkit._C.Work (an instance of torch.distributed.Work) with torch's methods. torch's own
  // Work.exception binding cannot convert a std::exception_ptr (in torch 2.11 it raises TypeError,
  // failed or not), so commkit/__init__.py defines Work.exception over _raise_exception.
  py::class_<CommkitWork, c10d::Work, c10::intrusive_ptr<CommkitWork>>(m, "Work")
      .def(
          "_raise_exception",
          [](const CommkitWork& w) {
            if (std::exception_ptr e = w.exception()) std::rethrow_exception(e);
          },
          "Raises the exception the operation failed with; returns None when it did not fail (or is running)");

  m.def("_create_backend", &CreateBackend, py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout_s"),
        py::arg("host_backend") = "host", py::arg("device_backend") = "nccl");
  m.def("version", [] { return std::string(COMMKIT_VERSION_STRING); });
  m.def("backends", &Backends, "The commkit backends this build has: name, available, reason, memory");
  m.def("_topology_advice_json", &TopologyAdviceJson, py::arg("master_addr") = "");
  m.def("_glue_bench", &GlueBench, py::arg("backend"), py::arg("iters") = 10000, py::arg("count") = 2);
}
