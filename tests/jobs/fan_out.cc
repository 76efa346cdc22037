// Test job: a bounded Kafka source whose stream goes to two sinks (the
// --output-topic twice over: once as read, once upper-cased). The source
// vertex fans out, so it is not chained with its consumers and its edges
// stay forward at equal parallelism. Exercises: such a job finishes (events
// reach only the subpartitions that are read) and checkpoints it.
#include <algorithm>
#include <cctype>

#include "weir/job.h"

namespace {

void BuildJob(weir::StreamEnvironment& env, const weir::JobArgs& args) {
  std::string brokers = args.Require("--brokers");
  const std::string out = args.Require("--output-topic");
  auto in = weir::kafka::Source(env, {.brokers = brokers, .topics = {args.Require("--input-topic")},
                                      .bounded = args.Flag("--bounded")});
  weir::kafka::Sink(in.Map([](weir::kafka::Record r) { return r; }).Name("AsRead"), {.brokers = brokers, .topic = out});
  weir::kafka::Sink(in.Map([](weir::kafka::Record r) {
                        std::transform(r.value.begin(), r.value.end(), r.value.begin(),
                                       [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
                        return r;
                      }).Name("Upper"),
                    {.brokers = brokers, .topic = out});
}

}  // namespace

WEIR_JOB(BuildJob)
