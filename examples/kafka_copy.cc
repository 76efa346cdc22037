// kafka_copy: copies every record of one Kafka topic to another.
//
//   weir submit kafka_copy.so -p 2 -- --brokers HOST:PORT --input-topic in
//       --output-topic out [--guarantee exactly-once|at-least-once|at-most-once] [--bounded]
//       [--transaction-timeout-ms MS]   (exactly-once: the producers' transaction.timeout.ms)
//       [--checkpointing-mode exactly-once|at-least-once]   (barriers aligned or not; see
//        StreamEnvironment::SetCheckpointingMode — a copy has no state to lose either way)
//       [--source-properties k=v,k=v] [--sink-properties k=v,k=v]   (extra librdkafka settings)
#include <map>
#include <stdexcept>
#include <string>

#include "weir/job.h"

namespace {

// "k=v,k=v" into a map (an '=' missing is an error).
std::map<std::string, std::string> Properties(const std::string& text) {
  std::map<std::string, std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(pos, end - pos);
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) throw std::invalid_argument("expected k=v in '" + item + "'");
    out[item.substr(0, eq)] = item.substr(eq + 1);
    pos = end + 1;
  }
  return out;
}

void BuildJob(weir::StreamEnvironment& env, const weir::JobArgs& args) {
  std::string brokers = args.Require("--brokers");
  env.SetJobName("kafka_copy");
  if (std::string mode = args.Get("--checkpointing-mode", ""); !mode.empty()) {
    if (mode != "exactly-once" && mode != "at-least-once") {
      throw std::invalid_argument("--checkpointing-mode is '" + mode + "'; expected exactly-once or at-least-once");
    }
    env.SetCheckpointingMode(mode == "exactly-once" ? weir::StreamEnvironment::CheckpointingMode::kExactlyOnce
                                                    : weir::StreamEnvironment::CheckpointingMode::kAtLeastOnce);
  }
  auto input = weir::kafka::Source(env, {.brokers = brokers,
                                         .topics = {args.Require("--input-topic")},
                                         .bounded = args.Flag("--bounded"),
                                         .properties = Properties(args.Get("--source-properties", ""))});
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
  sink.properties = Properties(args.Get("--sink-properties", ""));
  if (std::string timeout = args.Get("--transaction-timeout-ms", ""); !timeout.empty()) {
    sink.properties["transaction.timeout.ms"] = timeout;
  }
  weir::kafka::Sink(copied, sink);
}

}  // namespace

WEIR_JOB(BuildJob)
