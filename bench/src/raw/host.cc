// Raw host-engine baseline: commkit's own `host` backend driven through Backend::Run directly, without
// ProcessGroup (no argument validation, sequence numbers, fingerprints, Work objects or worker thread),
// so `--compare host --raw host` shows what the process-group layer costs on top of the engine.
// The backend is a separate instance with its own shared-memory segments, set up through the job's
// store under the "bench/raw/" prefix.
#include "commkit/comm/registry.h"
#include "commkit/common/strings.h"
#include "raw/raw.h"

namespace commkit::bench::raw {

Result<std::unique_ptr<RawCollective>> MakeHost(const BenchOptions& o, int rank, int nranks,
                                                std::shared_ptr<commkit::Store> store) {
  if (store == nullptr) return Status::Unavailable("commkit-bench: --raw host needs the job's store");
  if (o.collective == BenchCollective::kSendRecv)
    return Status::NotSupported(
        "commkit-bench: --raw host has no sendrecv: a send and a receive posted together need two threads "
        "(ProcessGroup's per-direction executors); compare sendrecv on the wrapped backends only");
  BackendContext context;
  context.rank = rank;
  context.size = nranks;
  context.store = std::move(store);
  context.group_name = "raw-host";
  context.timeout = std::chrono::seconds(o.timeout_s);
  COMMKIT_ASSIGN_OR_RETURN(std::shared_ptr<Backend> backend,
                           Registry::Default().Create("host", MemoryKind::kHost, context));
  const CollectiveDescriptor& d = Describe(o.collective);
  if (!backend->Supports(d.kind, o.dtype, MemoryKind::kHost, o.op.kind))
    return Status::NotSupported(StrCat("commkit-bench: --raw host: the host backend has no ", d.name, " of ",
                                       ToString(o.dtype), d.reduces ? StrCat(" with ", o.op.ToString()) : ""));
  auto raw = std::make_unique<RawCollective>();
  raw->label = "raw-host";
  CollectiveArgs proto;
  proto.kind = d.kind;
  proto.dtype = o.dtype;
  proto.op = o.op;
  proto.root = o.root;
  proto.timeout = std::chrono::seconds(o.timeout_s);
  std::uint64_t sequence = 0;
  raw->run = [backend, proto, sequence](const void* send, void* recv, const BufferCounts& c) mutable -> Status {
    CollectiveArgs a = proto;
    a.send = send;
    a.recv = recv;
    a.count = c.count;
    a.sequence = ++sequence;
    if (a.kind == CollectiveKind::kBroadcast) a.send = recv;
    auto work = backend->Run(a);
    if (!work.ok()) return work.status();
    return (*work)->Wait(a.timeout + std::chrono::seconds(5));
  };
  return raw;
}

}  // namespace commkit::bench::raw
