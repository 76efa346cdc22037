#include "connectors/redis/redis_sink.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/logging/logging.h"
#include "connectors/reconnect.h"
#include "connectors/system_library.h"

namespace weir::connectors {
namespace {

absl::Status BadProperty(absl::string_view key, absl::string_view value, absl::string_view expected) {
  return absl::InvalidArgumentError(
      absl::StrCat(kRedisSinkConnector, ": property '", key, "' is '", value, "'; expected ", expected));
}

// hiredis, loaded at the first connection (connectors/system_library.h).
#define WEIR_HIREDIS_FUNCTIONS(X) \
  X(freeReplyObject) X(redisAppendCommand) X(redisCommand) X(redisConnectWithTimeout) X(redisFree) \
  X(redisGetReply) X(redisSetTimeout)
WEIR_SYSTEM_LIBRARY_TABLE(LibHiredis, WEIR_HIREDIS_FUNCTIONS);

LazyLibrary<LibHiredis> hiredis(WEIR_HIREDIS_SONAME, WEIR_HIREDIS_PACKAGE, "the Redis sink", LibHiredis::Bind);

// After a connection exists, hiredis is loaded.
const LibHiredis& Hiredis() { return hiredis.Get(); }

struct ReplyDeleter {
  void operator()(redisReply* r) const { Hiredis().freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

}  // namespace

absl::StatusOr<RedisSinkConfig> RedisSinkConfig::FromProperties(const Properties& properties) {
  RedisSinkConfig config;
  const std::string address = PropertyOr(properties, "address");
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || !absl::SimpleAtoi(address.substr(colon + 1), &config.port) ||
      config.port < 1 || config.port > 65535) {
    return BadProperty("address", address, "HOST:PORT of the Redis server");
  }
  config.host = address.substr(0, colon);
  if (config.host.size() > 2 && config.host.front() == '[' && config.host.back() == ']') {
    config.host = config.host.substr(1, config.host.size() - 2);  // [::1]:6379
  }
  config.password = PropertyOr(properties, "password");
  const std::string database = PropertyOr(properties, "database");
  if (!database.empty() && (!absl::SimpleAtoi(database, &config.database) || config.database < 0)) {
    return BadProperty("database", database, "a database number >= 0");
  }
  const std::string pipeline = PropertyOr(properties, "pipeline");
  if (!pipeline.empty() &&
      (!absl::SimpleAtoi(pipeline, &config.pipeline) || config.pipeline < 1 || config.pipeline > 1000000)) {
    return BadProperty("pipeline", pipeline, "commands in flight, 1 to 1000000");
  }
  const std::string timeout = PropertyOr(properties, "reconnect.timeout.ms");
  if (!timeout.empty() && (!absl::SimpleAtoi(timeout, &config.reconnect_timeout_ms) ||
                           config.reconnect_timeout_ms < 0)) {
    return BadProperty("reconnect.timeout.ms", timeout, "milliseconds >= 0");
  }
  const std::string guarantee = PropertyOr(properties, kGuaranteeProperty);
  if (guarantee != kAtLeastOnce) {
    return BadProperty(kGuaranteeProperty, guarantee,
                       "'at-least-once' (the sink's writes are idempotent; exactness comes from the job's state)");
  }
  return config;
}

RedisSink::RedisSink(RedisSinkConfig config) : config_(std::move(config)), log_(logging::Get("redis")) {}

RedisSink::~RedisSink() { Disconnect(); }

void RedisSink::Open(OperatorContext& context, RecordOutput* output) {
  client_ = absl::StrCat("RedisSink '", context.operator_name(), "' subtask ", context.subtask_index(), "/",
                         context.parallelism());
  const MetricLabels server = {{"server", absl::StrCat(config_.host, ":", config_.port)}};
  written_metric_ = &context.metrics().counter("weir_redis_commands_written_total",
                                               "Commands the Redis sink wrote and the server confirmed.", server);
  reconnects_metric_ = &context.metrics().counter("weir_redis_reconnects_total",
                                                  "Connections to Redis the sink made again after one broke.", server);
  Connect();
}

void RedisSink::Disconnect() {
  if (context_ != nullptr) Hiredis().redisFree(context_);
  context_ = nullptr;
}

absl::Status RedisSink::TryConnect() {
  Disconnect();
  const timeval connect_timeout{5, 0};
  context_ = Hiredis().redisConnectWithTimeout(config_.host.c_str(), config_.port, connect_timeout);
  const std::string where = absl::StrCat("Redis at ", config_.host, ":", config_.port);
  if (context_ == nullptr) return absl::ResourceExhaustedError("hiredis could not allocate a connection");
  if (context_->err != 0) {
    return absl::UnavailableError(absl::StrCat("cannot connect to ", where, ": ", context_->errstr,
                                               "; check that the server runs and the sink's address"));
  }
  const timeval command_timeout{30, 0};
  Hiredis().redisSetTimeout(context_, command_timeout);
  auto command = [&](absl::string_view what, const char* format, auto... args) -> absl::Status {
    Reply reply(static_cast<redisReply*>(Hiredis().redisCommand(context_, format, args...)));
    if (reply == nullptr) return absl::UnavailableError(absl::StrCat(where, ": ", what, ": ", context_->errstr));
    if (reply->type == REDIS_REPLY_ERROR) {
      const std::string text(reply->str, reply->len);
      if (absl::StartsWith(text, "WRONGPASS") || absl::StrContains(text, "invalid password") ||
          absl::StartsWith(text, "NOAUTH")) {
        return absl::UnauthenticatedError(absl::StrCat(where, " refused the password: ", text,
                                                       "; check the sink's password (SinkOptions::password)"));
      }
      return absl::FailedPreconditionError(absl::StrCat(where, ": ", what, ": ", text));
    }
    return absl::OkStatus();
  };
  if (!config_.password.empty()) {
    absl::Status s = command("AUTH", "AUTH %b", config_.password.data(), config_.password.size());
    if (!s.ok()) return s;
  }
  if (config_.database != 0) {
    absl::Status s = command("SELECT", "SELECT %d", config_.database);
    if (!s.ok()) return s;
  }
  // A server that wants a password says so here, not at the first write.
  return command("PING", "PING");
}

void RedisSink::Connect() {
  ThrowUnlessLoaded(hiredis.Load().status(), client_);
  const retry::RetryOutcome outcome = retry::Retry(
      ReconnectPolicy(absl::Milliseconds(config_.reconnect_timeout_ms)),
      [&] {
        absl::Status s = TryConnect();
        if (!s.ok()) Disconnect();
        return s;
      },
      [](const absl::Status& s) { return absl::IsUnavailable(s); },
      [&](const absl::Status& s, absl::Duration wait) {
        log_->warn("{}: {}; trying again in {}", client_, s.message(), absl::FormatDuration(wait));
      });
  if (outcome.status.ok()) return;
  throw std::runtime_error(absl::StrCat(client_, ": ", outcome.status.message(),
                                        absl::IsUnavailable(outcome.status)
                                            ? absl::StrCat(" (tried for ", config_.reconnect_timeout_ms, " ms: ",
                                                           outcome.Summary(), ")")
                                            : ""));
}

void RedisSink::Append(const redis::Record& r) {
  if (r.field.has_value()) {
    Hiredis().redisAppendCommand(context_, "HSET %b %b %b", r.key.data(), r.key.size(), r.field->data(),
                                 r.field->size(), r.value.data(), r.value.size());
  } else {
    Hiredis().redisAppendCommand(context_, "SET %b %b", r.key.data(), r.key.size(), r.value.data(), r.value.size());
  }
}

void RedisSink::Process(void* record) {
  auto* r = static_cast<redis::Record*>(record);
  Append(*r);
  in_flight_.push_back(std::move(*r));
  if (in_flight_.size() >= static_cast<size_t>(config_.pipeline)) Drain();
}

absl::Status RedisSink::ReadReplies() {
  while (!in_flight_.empty()) {
    void* raw = nullptr;
    if (Hiredis().redisGetReply(context_, &raw) != REDIS_OK || raw == nullptr) {
      return absl::UnavailableError(absl::StrCat("the connection to Redis at ", config_.host, ":", config_.port,
                                                 " broke: ", context_->errstr));
    }
    Reply reply(static_cast<redisReply*>(raw));
    if (reply->type == REDIS_REPLY_ERROR) {
      const std::string text(reply->str, reply->len);
      const redis::Record& r = in_flight_.front();
      const std::string what = absl::StrCat(r.field.has_value() ? "HSET of key '" : "SET of key '", r.key, "'");
      if (absl::StartsWith(text, "WRONGTYPE")) {
        throw UnrecoverableError(absl::StrCat(client_, ": Redis refused the ", what, ": ", text,
                                              "; the key holds another type of value than the sink writes"));
      }
      if (absl::StartsWith(text, "NOAUTH") || absl::StartsWith(text, "WRONGPASS")) {
        return absl::UnauthenticatedError(absl::StrCat("Redis refused the ", what, ": ", text,
                                                       "; set the sink's password (SinkOptions::password)"));
      }
      // A server loading its data, a replica, one that cannot persist: may
      // pass; sent again on a new connection.
      if (absl::StartsWith(text, "LOADING") || absl::StartsWith(text, "READONLY") ||
          absl::StartsWith(text, "MISCONF") || absl::StartsWith(text, "BUSY") || absl::StartsWith(text, "TRYAGAIN")) {
        return absl::UnavailableError(absl::StrCat("Redis refused the ", what, " for now: ", text));
      }
      return absl::FailedPreconditionError(absl::StrCat("Redis refused the ", what, ": ", text));
    }
    in_flight_.pop_front();
    written_metric_->Inc();
  }
  return absl::OkStatus();
}

void RedisSink::Drain() {
  for (;;) {
    absl::Status status = ReadReplies();
    if (status.ok()) return;
    if (!absl::IsUnavailable(status)) throw std::runtime_error(absl::StrCat(client_, ": ", status.message()));
    log_->warn("{}: {}; reconnecting to send {} unconfirmed commands again", client_, status.message(),
               in_flight_.size());
    Connect();
    reconnects_metric_->Inc();
    for (const redis::Record& r : in_flight_) Append(r);
  }
}

void RedisSink::PrepareSnapshotPreBarrier(int64_t) { Drain(); }

void RedisSink::EndInput() { Drain(); }

void RedisSink::OnIdle() {
  if (!in_flight_.empty()) Drain();
}

void RedisSink::Close() { Disconnect(); }

}  // namespace weir::connectors
