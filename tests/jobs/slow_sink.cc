// Test job: an unbounded Kafka source feeding, across a task boundary, a sink
// that takes --sleep-us per record. Exercises backpressure: the source may
// run ahead of the sink only by what the network buffers hold.
#include <chrono>
#include <thread>

#include "weir/job.h"

namespace {

void BuildJob(weir::StreamEnvironment& env, const weir::JobArgs& args) {
  int sleep_us = std::stoi(args.Get("--sleep-us", "1000"));
  auto in = weir::kafka::Source(env, {.brokers = args.Require("--brokers"), .topics = {args.Require("--input-topic")}});
  in.Rebalance().Sink("SlowSink", [sleep_us](const weir::kafka::Record&) {
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
  });
}

}  // namespace

WEIR_JOB(BuildJob)
