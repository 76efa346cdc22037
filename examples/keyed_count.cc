// keyed_count: counts the records of each distinct value. For every input
// record it writes one output record: key = the input value, value = how many
// times that value has been seen so far (in decimal).
//
//   weir submit keyed_count.so -p 2 -- --brokers HOST:PORT --input-topic in
//       --output-topic out [--guarantee exactly-once|at-least-once|at-most-once] [--bounded]
#include <cstdint>
#include <string>

#include "weir/job.h"

namespace {

void CountPerKey(const weir::kafka::Record& in, weir::KeyedContext<std::string>& ctx,
                 weir::Collector<weir::kafka::Record>& out) {
  auto count = ctx.State<int64_t>("count");
  int64_t n = count.Get().value_or(0) + 1;
  count.Set(n);
  weir::kafka::Record result;
  result.key = in.value;
  result.value = std::to_string(n);
  out.Collect(std::move(result));
}

void BuildJob(weir::StreamEnvironment& env, const weir::JobArgs& args) {
  std::string brokers = args.Require("--brokers");
  env.SetJobName("keyed_count");
  auto input = weir::kafka::Source(env, {.brokers = brokers,
                                         .topics = {args.Require("--input-topic")},
                                         .bounded = args.Flag("--bounded")});
  auto counts = input.KeyBy([](const weir::kafka::Record& r) { return r.value; })
                    .Process<weir::kafka::Record>(CountPerKey)
                    .Name("CountPerKey");
  weir::kafka::Sink(counts, {.brokers = brokers,
                             .topic = args.Require("--output-topic"),
                             .guarantee = weir::kafka::ParseGuarantee(args.Get("--guarantee", "at-least-once"))});
}

}  // namespace

WEIR_JOB(BuildJob)
