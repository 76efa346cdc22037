// The built-in "redis-sink" connector: weir::redis::Record values as SET (or
// HSET) commands with hiredis. Idempotent writes on an at-least-once sink
// (weir/redis.h says what readers can see).
//
// Commands are pipelined: up to `pipeline` are sent before the sink reads
// their replies, and every barrier, the end of input and every moment the
// task's input runs dry (OnIdle) wait for all of them. A command not yet confirmed stays in memory; when the connection
// breaks, the sink reconnects with jittered backoff (100 ms doubling to 2 s) for up
// to reconnect.timeout.ms and sends every unconfirmed command again, which
// is safe because writing a key again with the same value changes nothing.
// Past the timeout the task fails and the job restarts by its strategy.
//
// Error replies: WRONGTYPE (HSET on a key that holds a string, ...) fails
// the job at once (weir::UnrecoverableError: a restart would write the same
// record again); LOADING, READONLY, MISCONF, BUSY and TRYAGAIN are retried
// on a new connection like a broken one; NOAUTH and refused passwords, and
// any other error, fail the task.
//
// Properties (written by weir::redis::Sink): address, password, database,
// pipeline, reconnect.timeout.ms, guarantee (always at-least-once).
//
// Thread-safety: one task thread calls every method (weir/operator.h).
#ifndef WEIR_CONNECTORS_REDIS_REDIS_SINK_H_
#define WEIR_CONNECTORS_REDIS_REDIS_SINK_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "connectors/connector.h"
#include "connectors/sink_connector.h"
#include "spdlog/logger.h"
#include "weir/operator.h"
#include "weir/redis.h"

struct redisContext;

namespace weir::connectors {

inline constexpr char kRedisSinkConnector[] = "redis-sink";

struct RedisSinkConfig {
  std::string host;
  int port = 6379;
  std::string password;
  int database = 0;
  int pipeline = 1000;
  int64_t reconnect_timeout_ms = 10000;

  // kInvalidArgument naming the property that is missing or malformed.
  static absl::StatusOr<RedisSinkConfig> FromProperties(const Properties& properties);
};

class RedisSink : public weir::StreamOperator {
 public:
  explicit RedisSink(RedisSinkConfig config);
  ~RedisSink() override;

  RedisSink(const RedisSink&) = delete;
  RedisSink& operator=(const RedisSink&) = delete;

  void Open(OperatorContext& context, RecordOutput* output) override;
  // `record` is a weir::redis::Record*.
  void Process(void* record) override;
  void PrepareSnapshotPreBarrier(int64_t checkpoint_id) override;
  void EndInput() override;
  // Sends what is buffered and reads the replies.
  void OnIdle() override;
  void Close() override;

 private:
  // Connects, authenticates and selects the database; reconnecting with
  // backoff until reconnect.timeout.ms passes, then throws.
  void Connect();
  // One try: kUnavailable when the server cannot be reached,
  // kUnauthenticated when it refused the password.
  absl::Status TryConnect();
  void Append(const redis::Record& r);
  // Reads the replies of every command in flight; after a broken connection
  // reconnects and sends them again.
  void Drain();
  // Reads the replies; kUnavailable when the connection broke (the rest
  // stays in flight), other errors as the reply said.
  absl::Status ReadReplies();
  void Disconnect();

  const RedisSinkConfig config_;
  const std::shared_ptr<spdlog::logger> log_;
  std::string client_;  // "RedisSink 'name' subtask i/p", for messages
  redisContext* context_ = nullptr;
  // Sent (or buffered) and not confirmed, oldest first.
  std::deque<redis::Record> in_flight_;
  Counter* written_metric_ = nullptr;
  Counter* reconnects_metric_ = nullptr;
};

class RedisSinkConnector final : public ConfiguredSinkConnector<RedisSinkConfig, RedisSink> {};

}  // namespace weir::connectors

#endif  // WEIR_CONNECTORS_REDIS_REDIS_SINK_H_
