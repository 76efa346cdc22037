// Test job: kafka_copy with an exactly-once sink whose map throws once a
// task has seen records for --fail-after-ms: every attempt fails, and the
// restart strategy starts the next, on the same TaskManagers. Exercises:
// no producer, thread or file descriptor outlives its attempt.
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>

#include "weir/job.h"

namespace {

void BuildJob(weir::StreamEnvironment& env, const weir::JobArgs& args) {
  const std::string brokers = args.Require("--brokers");
  const auto fail_after = std::chrono::milliseconds(std::stoll(args.Get("--fail-after-ms", "1000")));
  auto in = weir::kafka::Source(env, {.brokers = brokers, .topics = {args.Require("--input-topic")}});
  // Each task instance gets its own copy of the lambda (and of `first`).
  auto flaky = in.Map([fail_after, first = std::optional<std::chrono::steady_clock::time_point>()](
                          weir::kafka::Record r) mutable {
    const auto now = std::chrono::steady_clock::now();
    if (!first.has_value()) first = now;
    if (now - *first > fail_after) throw std::runtime_error("flaky_copy: failing this attempt on purpose");
    r.partition = -1;
    return r;
  });
  weir::kafka::Sink(flaky.Name("Flaky"), {.brokers = brokers,
                                          .topic = args.Require("--output-topic"),
                                          .guarantee = weir::kafka::Guarantee::kExactlyOnce});
}

}  // namespace

WEIR_JOB(BuildJob)
