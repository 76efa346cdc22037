// Benchmark job for fleet_bench: a source that never emits and never ends,
// chained to a sink that discards, so that a job of any parallelism needs no
// data exchange and its tasks cost the TaskManagers as little as a task can.
// Each poll that finds nothing sleeps --idle-ms (default 200) so that ten
// thousand idle task threads do not wake a hundred times a second each; a
// checkpoint trigger therefore waits up to that long in the task's mailbox,
// which the JobManager's coordinator time does not include.
#include <chrono>
#include <string>
#include <thread>

#include "weir/job.h"

namespace {

class Idle final : public weir::SourceFunction<int64_t> {
 public:
  explicit Idle(int idle_ms) : idle_ms_(idle_ms) {}

  weir::SourceStatus Poll(weir::Collector<int64_t>&) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(idle_ms_));
    return weir::SourceStatus::kNothingAvailable;
  }

 private:
  const int idle_ms_;
};

void BuildJob(weir::StreamEnvironment& env, const weir::JobArgs& args) {
  const int idle_ms = std::stoi(args.Get("--idle-ms", "200"));
  env.AddSource<int64_t>("Idle", [idle_ms] { return std::make_unique<Idle>(idle_ms); })
      .Sink("Discard", [](const int64_t&) {});
}

}  // namespace

WEIR_JOB(BuildJob)
