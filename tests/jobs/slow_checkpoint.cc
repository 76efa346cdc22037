// Test job: a source of numbers whose snapshot of checkpoint --slow-checkpoint
// takes --sleep-ms (a deliberately slow task), feeding a sink that discards.
// Checkpoint expiry tests use it: that checkpoint must expire and the next
// ones complete.
#include <chrono>
#include <thread>

#include "weir/job.h"

namespace {

class Numbers final : public weir::SourceFunction<int64_t> {
 public:
  Numbers(int64_t slow_checkpoint, int sleep_ms) : slow_checkpoint_(slow_checkpoint), sleep_ms_(sleep_ms) {}

  weir::SourceStatus Poll(weir::Collector<int64_t>& out) override {
    out.Collect(next_++);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return weir::SourceStatus::kMoreAvailable;
  }

  void SnapshotState(const weir::CheckpointInfo& checkpoint) override {
    if (checkpoint.checkpoint_id == slow_checkpoint_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));
    }
  }

 private:
  const int64_t slow_checkpoint_;
  const int sleep_ms_;
  int64_t next_ = 0;
};

void BuildJob(weir::StreamEnvironment& env, const weir::JobArgs& args) {
  const int64_t slow = std::stoll(args.Get("--slow-checkpoint", "2"));
  const int sleep_ms = std::stoi(args.Get("--sleep-ms", "3000"));
  env.AddSource<int64_t>("Numbers", [slow, sleep_ms] { return std::make_unique<Numbers>(slow, sleep_ms); })
      .Sink("Discard", [](const int64_t&) {});
}

}  // namespace

WEIR_JOB(BuildJob)
