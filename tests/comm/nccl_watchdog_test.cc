// Watchdog policy with fake communicators: failures are detected, aborts are bounded, every pending
// work gets a typed error, communicators fail together. No GPU, no timing thresholds: every wait
// is bounded by a generous deadline and only ordering/outcomes are asserted.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "commkit/comm/nccl/watchdog.h"

namespace commkit::comm::nccl {
namespace {

using namespace std::chrono_literals;

class FakeComm : public Watched {
 public:
  explicit FakeComm(std::string name) : name_(std::move(name)) {}
  std::string Describe() const override { return name_; }
  Status Check(std::chrono::steady_clock::time_point) override {
    ++checks;
    std::lock_guard<std::mutex> lock(mutex_);
    return health_;
  }
  void Abort() override {
    ++aborts;
    std::unique_lock<std::mutex> lock(mutex_);
    // A "hanging" abort waits until the test releases it (bounded by 60 s so nothing hangs forever).
    cv_.wait_for(lock, 60s, [&] { return !hang_abort_; });
  }
  void FailPending(const Status& error) override {
    std::lock_guard<std::mutex> lock(mutex_);
    failed_with_ = error;
    cv_.notify_all();
  }

  void SetHealth(Status s) {
    std::lock_guard<std::mutex> lock(mutex_);
    health_ = std::move(s);
  }
  void SetHangAbort(bool hang) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      hang_abort_ = hang;
    }
    cv_.notify_all();
  }
  // Waits (bounded) until FailPending was called; returns its error or OK on timeout.
  Status WaitFailed(std::chrono::seconds limit = 30s) {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait_for(lock, limit, [&] { return !failed_with_.ok(); });
    return failed_with_;
  }
  Status failed_with() {
    std::lock_guard<std::mutex> lock(mutex_);
    return failed_with_;
  }

  std::atomic<int> checks{0};
  std::atomic<int> aborts{0};

 private:
  std::string name_;
  std::mutex mutex_;
  std::condition_variable cv_;
  Status health_;
  bool hang_abort_ = false;
  Status failed_with_;
};

WatchdogOptions FastOptions() {
  WatchdogOptions o;
  o.poll_interval = 1ms;
  o.abort_deadline = 30s;
  return o;
}

TEST(NcclWatchdogTest, AsyncErrorAbortsAndFailsPendingWithTypedError) {
  auto comm = std::make_shared<FakeComm>("group 'world' rank 0/2");
  Watchdog dog(FastOptions());
  dog.Watch(comm);
  comm->SetHealth(Status::RemoteError("NCCL ncclRemoteError during asynchronous operation"));
  Status s = comm->WaitFailed();
  EXPECT_EQ(s.code(), StatusCode::kRemoteError) << s.ToString();
  EXPECT_NE(s.message().find("group 'world' rank 0/2"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("communicator aborted"), std::string::npos) << s.message();
  EXPECT_EQ(comm->aborts.load(), 1);
  EXPECT_EQ(dog.failures(), 1u);
  EXPECT_EQ(dog.first_failure().code(), StatusCode::kRemoteError);
}

TEST(NcclWatchdogTest, HealthyCommunicatorIsPolledAndNeverAborted) {
  auto comm = std::make_shared<FakeComm>("healthy");
  {
    Watchdog dog(FastOptions());
    dog.Watch(comm);
    auto deadline = std::chrono::steady_clock::now() + 30s;
    while (comm->checks.load() < 3 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(1ms);
    }
    EXPECT_GE(comm->checks.load(), 3);
    EXPECT_TRUE(dog.first_failure().ok());
  }
  EXPECT_EQ(comm->aborts.load(), 0);
  EXPECT_TRUE(comm->failed_with().ok());
}

TEST(NcclWatchdogTest, HangingAbortIsBoundedAndReported) {
  auto comm = std::make_shared<FakeComm>("stuck");
  comm->SetHangAbort(true);
  WatchdogOptions o = FastOptions();
  o.abort_deadline = 20ms;
  std::atomic<int> callbacks{0};
  o.on_failure = [&](const Status&) { ++callbacks; };
  {
    Watchdog dog(o);
    dog.Watch(comm);
    comm->SetHealth(Status::Timeout("work #7 ALLREDUCE ran past its 1 s timeout"));
    Status s = comm->WaitFailed();
    EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.ToString();
    EXPECT_NE(s.message().find("abort did not finish"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("should exit"), std::string::npos) << s.message();
  }  // destroying the watchdog must not wait for the hung abort
  EXPECT_EQ(callbacks.load(), 1);
  comm->SetHangAbort(false);  // let the detached abort thread finish
  for (int i = 0; i < 30000 && comm->aborts.load() == 0; ++i) std::this_thread::sleep_for(1ms);
}

TEST(NcclWatchdogTest, AllCommunicatorsAbortTogetherInOneGroupCall) {
  auto a = std::make_shared<FakeComm>("a");
  auto b = std::make_shared<FakeComm>("b");
  WatchdogOptions o = FastOptions();
  std::atomic<int> group_calls{0};
  std::atomic<int> group_size{0};
  o.group_abort = [&](const std::vector<std::shared_ptr<Watched>>& victims) {
    ++group_calls;
    group_size = static_cast<int>(victims.size());
    for (const auto& v : victims) v->Abort();
  };
  Watchdog dog(o);
  dog.Watch(a);
  dog.Watch(b);
  b->SetHealth(Status::BackendError("NCCL ncclSystemError"));
  EXPECT_EQ(a->WaitFailed().code(), StatusCode::kBackendError);
  EXPECT_EQ(b->WaitFailed().code(), StatusCode::kBackendError);
  EXPECT_EQ(group_calls.load(), 1);
  EXPECT_EQ(group_size.load(), 2);
  // The error names the communicator that failed, not the bystander.
  EXPECT_NE(a->failed_with().message().find("b:"), std::string::npos) << a->failed_with().message();
}

TEST(NcclWatchdogTest, OnlyFailedCommunicatorWhenNotAbortingAll) {
  auto a = std::make_shared<FakeComm>("a");
  auto b = std::make_shared<FakeComm>("b");
  WatchdogOptions o = FastOptions();
  o.abort_all_on_failure = false;
  Watchdog dog(o);
  dog.Watch(a);
  dog.Watch(b);
  b->SetHealth(Status::RemoteError("peer gone"));
  EXPECT_EQ(b->WaitFailed().code(), StatusCode::kRemoteError);
  EXPECT_TRUE(dog.Unwatch(a.get()));
  EXPECT_FALSE(dog.Unwatch(b.get()));  // failed ones leave the list
  EXPECT_EQ(a->aborts.load(), 0);
  EXPECT_TRUE(a->failed_with().ok());
}

TEST(NcclWatchdogTest, UnwatchStopsChecks) {
  auto comm = std::make_shared<FakeComm>("c");
  Watchdog dog(FastOptions());
  dog.Watch(comm);
  EXPECT_TRUE(dog.Unwatch(comm.get()));
  int checks = comm->checks.load();
  comm->SetHealth(Status::RemoteError("would fail"));
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(comm->checks.load(), checks);
  EXPECT_EQ(comm->aborts.load(), 0);
}

}  // namespace
}  // namespace commkit::comm::nccl
