// Kafka connectors for the DataStream API. The job binary only describes
// them; the TaskManager runs them with librdkafka.
//
//   auto in = kafka::Source(env, {.brokers = "k1:9092", .topics = {"events"}, .bounded = true});
//   kafka::Sink(in.Map(Upper), {.brokers = "k1:9092", .topic = "out",
//                               .guarantee = kafka::Guarantee::kAtLeastOnce});
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "weir/datastream.h"
#include "weir/serializer.h"

namespace weir::kafka {

// A Kafka record as the source reads it and the sink writes it. The sink
// uses key, value and timestamp_ms (-1: the producer's clock); topic,
// partition and offset say where a source record came from.
struct Record {
  std::optional<std::string> key;
  std::string value;
  int64_t timestamp_ms = -1;
  std::string topic;
  int32_t partition = -1;
  int64_t offset = -1;

  bool operator==(const Record&) const = default;
};

enum class Guarantee { kAtMostOnce, kAtLeastOnce, kExactlyOnce };

inline const char* GuaranteeName(Guarantee g) {
  switch (g) {
    case Guarantee::kAtMostOnce: return "at-most-once";
    case Guarantee::kAtLeastOnce: return "at-least-once";
    case Guarantee::kExactlyOnce: return "exactly-once";
  }
  return "?";
}

// "exactly-once" | "at-least-once" | "at-most-once"; throws otherwise.
inline Guarantee ParseGuarantee(std::string_view text) {
  for (Guarantee g : {Guarantee::kAtMostOnce, Guarantee::kAtLeastOnce, Guarantee::kExactlyOnce}) {
    if (text == GuaranteeName(g)) return g;
  }
  throw std::invalid_argument("unknown guarantee '" + std::string(text) +
                              "'; expected exactly-once, at-least-once or at-most-once");
}

struct SourceOptions {
  std::string brokers;              // bootstrap.servers
  std::vector<std::string> topics;  // partitions are spread over the subtasks
  // Where to start: "earliest", "latest", "committed" (the offsets committed
  // by group_id; earliest where none), or "timestamp:<unix ms>".
  std::string start = "earliest";
  std::string group_id;
  std::string isolation_level = "read_committed";  // or read_uncommitted
  // Read up to the end offsets seen at start, then finish.
  bool bounded = false;
  // Extra librdkafka consumer properties.
  std::map<std::string, std::string> properties;
  // Event time: each record's is its Kafka timestamp (or the strategy's
  // extractor), and each partition has its own watermark; a subtask emits
  // the minimum over its partitions that are not idle
  // (docs/job-authoring.md, "Event time"). Unset: records still carry their
  // Kafka timestamps, but the source emits no watermarks.
  std::optional<WatermarkStrategy<Record>> watermarks;
};

struct SinkOptions {
  std::string brokers;
  std::string topic;
  // exactly-once needs checkpoints in EXACTLY_ONCE mode
  // (execution.checkpointing.interval); readers see the output once its
  // checkpoint completes, with isolation.level=read_committed.
  Guarantee guarantee = Guarantee::kAtLeastOnce;
  // exactly-once: the sink's transactional ids are
  // "<prefix>-<subtask>-<n>". Keep it stable across restarts and
  // resubmissions of the job (a resubmitted job cleans up after its
  // predecessor through it) and unique among the sinks writing to the
  // cluster. Default: "weir-<sink name>-<topic>", with characters Kafka
  // does not allow replaced by '_'.
  std::string transactional_id_prefix;
  // Extra librdkafka producer properties (e.g. "partitioner").
  std::map<std::string, std::string> properties;
};

namespace internal {
inline std::string Join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) {
    if (!out.empty()) out += ",";
    out += p;
  }
  return out;
}
}  // namespace internal

inline DataStream<Record> Source(StreamEnvironment& env, const SourceOptions& options,
                                 std::string name = "KafkaSource");

inline SinkHandle Sink(const DataStream<Record>& stream, const SinkOptions& options, std::string name = "KafkaSink");

}  // namespace weir::kafka

namespace weir {

template <>
struct Serializer<kafka::Record> {
  static void Write(const kafka::Record& r, std::string& out) {
    out.push_back(r.key.has_value() ? 1 : 0);
    if (r.key.has_value()) internal::WriteField(*r.key, out);
    internal::WriteField(r.value, out);
    internal::WriteField(r.timestamp_ms, out);
    internal::WriteField(r.topic, out);
    internal::WriteField(r.partition, out);
    internal::WriteField(r.offset, out);
  }
  static kafka::Record Read(std::string_view in) {
    if (in.empty()) throw std::runtime_error("corrupt Kafka record: empty");
    kafka::Record r;
    size_t pos = 1;
    if (in[0] == 1) r.key = std::string(internal::ReadField(in, &pos));
    r.value = std::string(internal::ReadField(in, &pos));
    r.timestamp_ms = Serializer<int64_t>::Read(internal::ReadField(in, &pos));
    r.topic = std::string(internal::ReadField(in, &pos));
    r.partition = Serializer<int32_t>::Read(internal::ReadField(in, &pos));
    r.offset = Serializer<int64_t>::Read(internal::ReadField(in, &pos));
    return r;
  }
};

namespace kafka {

inline DataStream<Record> Source(StreamEnvironment& env, const SourceOptions& options, std::string name) {
  if (options.brokers.empty()) throw std::invalid_argument("kafka::Source: brokers is empty");
  if (options.topics.empty()) throw std::invalid_argument("kafka::Source: no topics");
  VertexSpec spec;
  spec.name = std::move(name);
  spec.kind = VertexSpec::Kind::kSource;
  spec.connector = "kafka-source";
  spec.output_type = TypeOpsOf<Record>();
  spec.properties = {{"brokers", options.brokers},
                     {"topics", internal::Join(options.topics)},
                     {"start", options.start},
                     {"group.id", options.group_id},
                     {"isolation.level", options.isolation_level},
                     {"bounded", options.bounded ? "true" : "false"}};
  for (const auto& [k, v] : options.properties) spec.properties["kafka." + k] = v;
  if (const auto& strategy = options.watermarks) {
    if (strategy->out_of_orderness.count() < 0 || strategy->idleness.count() < 0 || strategy->max_future.count() < 0 ||
        strategy->max_drift.count() < 0) {
      throw std::invalid_argument("kafka::Source: a watermark strategy's durations must not be negative");
    }
    spec.properties[std::string(kEventTimeProperty)] = "source";
    spec.properties["watermark.out-of-orderness-ms"] = std::to_string(strategy->out_of_orderness.count());
    spec.properties["watermark.idleness-ms"] = std::to_string(strategy->idleness.count());
    spec.properties["watermark.max-future-ms"] = std::to_string(strategy->max_future.count());
    if (strategy->max_drift.count() > 0) {
      spec.properties["watermark.max-drift-ms"] = std::to_string(strategy->max_drift.count());
    }
    spec.properties["watermark.invalid-timestamps"] =
        strategy->invalid_timestamps == InvalidTimestamps::kDrop ? "drop" : "fail";
    spec.properties["watermark.timestamps"] = strategy->timestamp ? "extractor" : "record";
    if (strategy->timestamp) {
      spec.timestamp_extractor = [fn = strategy->timestamp](const void* record) {
        return fn(*static_cast<const Record*>(record));
      };
    }
  }
  return DataStream<Record>(&env, env.AddVertex(std::move(spec)));
}

inline SinkHandle Sink(const DataStream<Record>& stream, const SinkOptions& options, std::string name) {
  if (options.brokers.empty()) throw std::invalid_argument("kafka::Sink: brokers is empty");
  if (options.topic.empty()) throw std::invalid_argument("kafka::Sink: no topic");
  VertexSpec spec;
  spec.name = std::move(name);
  spec.kind = VertexSpec::Kind::kSink;
  spec.connector = "kafka-sink";
  spec.properties = {{"brokers", options.brokers},
                     {"topic", options.topic},
                     {"guarantee", GuaranteeName(options.guarantee)}};
  if (options.guarantee == Guarantee::kExactlyOnce) {
    std::string prefix = options.transactional_id_prefix;
    if (prefix.empty()) {
      prefix = weir::internal::LegalName("weir-" + spec.name + "-" + options.topic);
    }
    spec.properties["transactional.id.prefix"] = prefix;
  }
  for (const auto& [k, v] : options.properties) spec.properties["kafka." + k] = v;
  return SinkHandle(stream.env(), stream.Attach(std::move(spec)));
}

}  // namespace kafka
}  // namespace weir
