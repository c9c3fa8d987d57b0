#include "commkit/comm/work.h"

namespace commkit {

namespace {

class DoneWork final : public Work {
 public:
  DoneWork(Status s, std::uint64_t seq, std::chrono::nanoseconds duration)
      : status_(std::move(s)), seq_(seq), duration_(duration) {}
  bool Test() override { return true; }
  Status Wait(std::chrono::milliseconds) override { return status_; }
  Status status() const override { return status_; }
  std::chrono::nanoseconds Duration() const override { return duration_; }
  std::uint64_t Sequence() const override { return seq_; }

 private:
  Status status_;
  std::uint64_t seq_;
  std::chrono::nanoseconds duration_;
};

}  // namespace

std::unique_ptr<Work> CompletedWork(Status status, std::uint64_t sequence, std::chrono::nanoseconds duration) {
  return std::make_unique<DoneWork>(std::move(status), sequence, duration);
}

}  // namespace commkit
