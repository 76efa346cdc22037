// kafka_copy: copies every record of one Kafka topic to another.
//
//   weir submit kafka_copy.so -p 2 -- --brokers HOST:PORT --input-topic in
//       --output-topic out [--guarantee exactly-once|at-least-once|at-most-once] [--bounded]
//       [--transaction-timeout-ms MS]   (exactly-once: the producers' transaction.timeout.ms)
#include "weir/job.h"

namespace {

void BuildJob(weir::StreamEnvironment& env, const weir::JobArgs& args) {
  std::string brokers = args.Require("--brokers");
  env.SetJobName("kafka_copy");
  auto input = weir::kafka::Source(env, {.brokers = brokers,
                                         .topics = {args.Require("--input-topic")},
                                         .bounded = args.Flag("--bounded")});
  auto copied = input
                    .Map([](weir::kafka::Record r) {
                      // Keep key, value and timestamp; the sink picks the partition.
                      r.partition = -1;
                      return r;
                    })
                    .Name("Copy");
  weir::kafka::SinkOptions sink{.brokers = brokers,
                                .topic = args.Require("--output-topic"),
                                .guarantee = weir::kafka::ParseGuarantee(args.Get("--guarantee", "at-least-once"))};
  if (std::string timeout = args.Get("--transaction-timeout-ms", ""); !timeout.empty()) {
    sink.properties["transaction.timeout.ms"] = timeout;
  }
  weir::kafka::Sink(copied, sink);
}

}  // namespace

WEIR_JOB(BuildJob)
