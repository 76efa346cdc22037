// The Redis sink for the DataStream API: idempotent writes by key. The job
// binary only describes it; the TaskManager runs it with hiredis.
//
//   redis::Sink(counts.Map(ToRedis), {.address = "cache:6379"});
//
// Every record sets one key (SET key value), or one field of a hash (HSET
// key field value) when it names a field. Writes are pipelined and flushed
// at every checkpoint barrier and at the end of a bounded input: the sink
// is at-least-once, and because writing a key again with the same value
// changes nothing, a job whose state is checkpointed (so that a replay
// computes the same values again) ends with every key exactly right.
//
// What a reader can see (docs/exactly-once.md): after a failure the job
// replays from its last completed checkpoint, so during the replay a key
// can step back to the value it had at that checkpoint and then move
// forward again to where it was. The final state is exact; intermediate
// reads are not. Records of one key are written in the order they reach
// the sink subtask (one key always reaches the same subtask after a KeyBy).
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "weir/datastream.h"
#include "weir/serializer.h"

namespace weir::redis {

// One write: SET key value, or HSET key field value when field is set.
struct Record {
  std::string key;
  std::optional<std::string> field;
  std::string value;

  bool operator==(const Record&) const = default;
};

struct SinkOptions {
  // "host:port" of the server.
  std::string address;
  // AUTH before anything else, when not empty. Sent to the TaskManagers in
  // the job's description: prefer a password meant for this job.
  std::string password;
  // SELECT this database first.
  int database = 0;
  // Commands in flight before the sink waits for their replies.
  int pipeline = 1000;
  // How long a lost connection is retried (with backoff) before the task
  // fails and the job restarts by its restart strategy.
  int64_t reconnect_timeout_ms = 10000;
};

inline SinkHandle Sink(const DataStream<Record>& stream, const SinkOptions& options, std::string name = "RedisSink");

}  // namespace weir::redis

namespace weir {

template <>
struct Serializer<redis::Record> {
  static void Write(const redis::Record& r, std::string& out) {
    internal::WriteField(r.key, out);
    out.push_back(r.field.has_value() ? 1 : 0);
    if (r.field.has_value()) internal::WriteField(*r.field, out);
    internal::WriteField(r.value, out);
  }
  static redis::Record Read(std::string_view in) {
    redis::Record r;
    size_t pos = 0;
    r.key = std::string(internal::ReadField(in, &pos));
    if (pos >= in.size()) throw std::runtime_error("corrupt Redis record: truncated");
    const bool has_field = in[pos++] == 1;
    if (has_field) r.field = std::string(internal::ReadField(in, &pos));
    r.value = std::string(internal::ReadField(in, &pos));
    return r;
  }
};

namespace redis {

inline SinkHandle Sink(const DataStream<Record>& stream, const SinkOptions& options, std::string name) {
  if (options.address.empty()) throw std::invalid_argument("redis::Sink: address is empty");
  VertexSpec spec;
  spec.name = std::move(name);
  spec.kind = VertexSpec::Kind::kSink;
  spec.connector = "redis-sink";
  spec.properties = {{"address", options.address},
                     {"database", std::to_string(options.database)},
                     {"pipeline", std::to_string(options.pipeline)},
                     {"reconnect.timeout.ms", std::to_string(options.reconnect_timeout_ms)},
                     // Idempotent writes over an at-least-once sink.
                     {"guarantee", "at-least-once"}};
  if (!options.password.empty()) spec.properties["password"] = options.password;
  return SinkHandle(stream.env(), stream.Attach(std::move(spec)));
}

}  // namespace redis
}  // namespace weir
