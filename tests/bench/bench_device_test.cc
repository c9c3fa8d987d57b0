// The runner's device-memory path without a GPU: a Device whose "device memory" is host memory (copies
// are memcpy, the events are host clock stamps), driven through a raw collective that runs a host
// group's collective on those buffers. Checks that inputs are copied in and results copied back and
// verified there (a corrupted copy-back is caught), that the time comes from the events and issue_us
// is reported, and -z. Also: Device::Open on a machine without a GPU says why.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "commkit/bench/device.h"
#include "commkit/bench/runner.h"
#include "commkit/comm/hash_store.h"

namespace commkit::bench {
namespace {

using Clock = std::chrono::steady_clock;

class HostMemoryDevice final : public Device {
 public:
  int index() const override { return 0; }
  std::string Describe() const override { return "host memory standing in for a GPU"; }
  void* stream() const override { return const_cast<HostMemoryDevice*>(this); }
  Result<DeviceMemory> Allocate(std::size_t bytes) override {
    ++allocations;
    return DeviceMemory(std::malloc(bytes == 0 ? 1 : bytes), [](void* p) { std::free(p); });
  }
  Status CopyToDevice(void* device, const void* host, std::size_t bytes) override {
    ++copies_in;
    std::memcpy(device, host, bytes);
    return Status::Ok();
  }
  Status CopyToHost(void* host, const void* device, std::size_t bytes) override {
    ++copies_out;
    std::memcpy(host, device, bytes);
    if (corrupt_copy_out && bytes > 0) static_cast<unsigned char*>(host)[0] ^= 0x40;  // flips a float's exponent
    return Status::Ok();
  }
  Status Synchronize(std::chrono::milliseconds) override {
    ++syncs;
    return Status::Ok();
  }
  Status RecordStart() override {
    start_ = Clock::now();
    return Status::Ok();
  }
  Status RecordStop() override {
    stop_ = Clock::now();
    return Status::Ok();
  }
  Result<double> ElapsedSeconds(std::chrono::milliseconds) override {
    ++elapsed_reads;
    return std::chrono::duration<double>(stop_ - start_).count();
  }
  Status BeginCapture() override { return Status::NotSupported("no graphs in host memory"); }
  Status EndCapture() override { return Status::NotSupported("no graphs in host memory"); }
  Status LaunchGraph() override { return Status::NotSupported("no graphs in host memory"); }

  std::atomic<int> allocations{0}, copies_in{0}, copies_out{0}, syncs{0}, elapsed_reads{0};
  bool corrupt_copy_out = false;

 private:
  Clock::time_point start_{}, stop_{};
};

struct Outcome {
  Status status;
  std::vector<ResultRow> rows;
};

// Two ranks as threads; rank r's buffers come from devices[r].
std::vector<Outcome> RunOnDevices(const BenchOptions& o, std::vector<HostMemoryDevice>& devices) {
  const int nranks = static_cast<int>(devices.size());
  auto store = std::make_shared<HashStore>();
  std::vector<Outcome> out(devices.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) {
    threads.emplace_back([&, r] {
      Outcome& oc = out[static_cast<std::size_t>(r)];
      auto g = ProcessGroup::Create(store, r, nranks, {.backend = "auto", .timeout = std::chrono::seconds(30)});
      if (!g.ok()) {
        oc.status = g.status();
        return;
      }
      ProcessGroup* group = g->get();
      RawCollective raw;
      raw.label = "fake-device";
      raw.run = [group, &o](const void* send, void* recv, const BufferCounts& c) -> Status {
        auto work = o.collective == BenchCollective::kAllgather
                        ? group->Allgather(send, recv, c.count, o.dtype)
                        : group->Allreduce(send, recv, c.count, o.dtype, o.op);
        if (!work.ok()) return work.status();
        return (*work)->Wait(std::chrono::seconds(30));
      };
      SweepOptions sweep;
      sweep.raw = &raw;
      sweep.device = &devices[static_cast<std::size_t>(r)];
      auto rows = RunSweep(*group, o, sweep);
      if (rows.ok()) {
        oc.rows = *rows;
      } else {
        oc.status = rows.status();
      }
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

BenchOptions Small(BenchCollective c) {
  BenchOptions o;
  o.collective = c;
  o.min_bytes = 64;
  o.max_bytes = 4096;
  o.step_factor = 8;
  o.warmup = 1;
  o.iters = 3;
  o.timeout_s = 30;
  return o;
}

TEST(BenchDevice, BuffersAreCopiedInCheckedAfterCopyBackAndTimedByEvents) {
  for (BenchCollective c : {BenchCollective::kAllreduce, BenchCollective::kAllgather}) {
    SCOPED_TRACE(std::string(ToString(c)));
    std::vector<HostMemoryDevice> devices(2);
    auto out = RunOnDevices(Small(c), devices);
    for (const Outcome& oc : out) ASSERT_TRUE(oc.status.ok()) << oc.status.ToString();
    ASSERT_EQ(out[0].rows.size(), 3u);  // 64 B, 512 B, 4 KiB
    for (const ResultRow& row : out[0].rows) {
      for (const Measurement* m : {&row.out_of_place, &row.in_place}) {
        ASSERT_TRUE(m->valid);
        EXPECT_EQ(m->wrong, 0) << row.bytes;
        EXPECT_GT(m->time_us, 0) << row.bytes;
        EXPECT_GT(m->issue_us, 0) << "device rows report the enqueue time";
      }
    }
    for (const HostMemoryDevice& d : devices) {
      EXPECT_EQ(d.elapsed_reads.load(), 6) << "one event pair per size and placement";
      EXPECT_EQ(d.copies_out.load(), 6) << "every checked result was copied back";
      EXPECT_GE(d.copies_in.load(), 12) << "inputs written on the host were copied in";
      EXPECT_GE(d.allocations.load(), 6);
    }
  }
}

TEST(BenchDevice, CorruptedCopyBackIsCounted) {
  std::vector<HostMemoryDevice> devices(2);
  devices[1].corrupt_copy_out = true;
  auto out = RunOnDevices(Small(BenchCollective::kAllreduce), devices);
  for (const Outcome& oc : out) ASSERT_TRUE(oc.status.ok()) << oc.status.ToString();
  EXPECT_GT(TotalWrong(out[0].rows), 0) << "the check reads what came back from the device";
  EXPECT_EQ(TotalWrong(out[0].rows), TotalWrong(out[1].rows)) << "summed over ranks, same on every rank";
}

TEST(BenchDevice, BlockingWaitsForEveryCall) {
  BenchOptions o = Small(BenchCollective::kAllreduce);
  o.max_bytes = 64;
  o.blocking = 1;
  o.check = false;
  std::vector<HostMemoryDevice> devices(2);
  auto out = RunOnDevices(o, devices);
  for (const Outcome& oc : out) ASSERT_TRUE(oc.status.ok()) << oc.status.ToString();
  // Prime, 2 placements x (warmup drain + 3 timed calls each waited).
  for (const HostMemoryDevice& d : devices) EXPECT_GE(d.syncs.load(), 2 * (1 + o.iters));
  EXPECT_EQ(out[0].rows[0].out_of_place.wrong, -1) << "-c 0: not checked";
}

TEST(BenchDevice, OpenWithoutAGpuSaysWhy) {
  const Status probe = Device::Probe();
  if (probe.ok()) GTEST_SKIP() << "a GPU is visible here; Open() is exercised by commkit-bench -B nccl";
  EXPECT_EQ(probe.code(), StatusCode::kUnavailable) << probe.ToString();
  EXPECT_FALSE(probe.message().empty());
  auto device = Device::Open(0);
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(device.status().message().find("commkit-bench"), std::string::npos) << device.status().ToString();
}

}  // namespace
}  // namespace commkit::bench
