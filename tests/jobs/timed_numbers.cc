// Test job: numbers with an event time each (one second apart from a fixed
// start, emitted every millisecond, --count of them or without end), a
// watermark strategy, a keyBy to the next TaskManager's subtasks, and a sink
// that fails the job if a record arrives without its event time. Exercises
// event time across TaskManagers and in weir status.
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "weir/job.h"

namespace {

constexpr int64_t kStartMs = 1700000000000;  // 2023-11-14T22:13:20Z

class TimedNumbers final : public weir::SourceFunction<int64_t> {
 public:
  explicit TimedNumbers(int64_t count) : count_(count) {}
  weir::SourceStatus Poll(weir::Collector<int64_t>& out) override {
    if (count_ >= 0 && next_ >= count_) return weir::SourceStatus::kEndOfInput;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    out.CollectAt(next_, kStartMs + next_ * 1000);
    ++next_;
    return weir::SourceStatus::kMoreAvailable;
  }

 private:
  const int64_t count_;
  int64_t next_ = 0;
};

void BuildJob(weir::StreamEnvironment& env, const weir::JobArgs& args) {
  const int64_t count = std::stoll(args.Get("--count", "-1"));
  weir::WatermarkStrategy<int64_t> strategy;
  strategy.out_of_orderness = std::chrono::seconds(2);
  env.AddSource<int64_t>("TimedNumbers", [count] { return std::make_unique<TimedNumbers>(count); })
      .AssignTimestampsAndWatermarks(strategy)
      .KeyBy([](const int64_t& n) { return n % 7; })
      .Process<int64_t>([](const int64_t& n, weir::KeyedContext<int64_t>&, weir::Collector<int64_t>& out) {
        out.Collect(n);
      })
      .Sink("CheckTime", [](const int64_t& n, weir::RuntimeContext& context) {
        if (context.timestamp() != kStartMs + n * 1000) {
          throw weir::UnrecoverableError("record " + std::to_string(n) + " arrived with event time " +
                                         std::to_string(context.timestamp()));
        }
      });
}

}  // namespace

WEIR_JOB(BuildJob)
