// Logging: one named spdlog logger per component ("jobmanager",
// "resourcemanager", "taskmanager", ...), all writing to stderr in one of two
// formats: text for people, json (one object per line) for log shippers.
//
// Lifecycle lines (started, listening, registered, lost, ...) go at info and
// carry their ids; nothing per record is logged above debug. Lines a
// machine will want to read (checkpoints) also carry their values as fields:
// in the json format, keys of the line's object beside "msg".
//
// Thread-safety: Init must run once, before other threads log; Get is safe
// from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <variant>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "spdlog/spdlog.h"

// Lets log lines take absl::string_view and absl::Status arguments (Debian's
// Abseil has its own string_view type, distinct from std::string_view).
template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<fmt::string_view> {
  template <typename Context>
  auto format(absl::string_view s, Context& ctx) const {
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(s.data(), s.size()), ctx);
  }
};

template <>
struct fmt::formatter<absl::Status> : fmt::formatter<fmt::string_view> {
  template <typename Context>
  auto format(const absl::Status& status, Context& ctx) const {
    std::string text = status.ToString();
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(text), ctx);
  }
};

namespace weir::logging {

// Sets the level (trace|debug|info|warn|error|off) and format (text|json) of
// every logger, existing and future.
absl::Status Init(absl::string_view level, absl::string_view format);

// The logger of `component`, created on first use.
std::shared_ptr<spdlog::logger> Get(absl::string_view component);

// Fields for the lines this thread logs while it lives (the json format
// writes them as keys, in order; the text format ignores them: its message
// says the same). Nests: an inner one adds to the outer's.
//
//   logging::ScopedFields fields({{"job", job_id}, {"checkpoint_id", id}});
//   log_->info("job {} checkpoint {} completed ...", job_id, id, ...);
class ScopedFields {
 public:
  using Value = std::variant<std::string, int64_t, double>;
  struct Field {
    Field(std::string_view k, std::string_view v) : key(k), value(std::string(v)) {}
    Field(std::string_view k, const std::string& v) : key(k), value(v) {}
    Field(std::string_view k, const char* v) : key(k), value(std::string(v)) {}
    Field(std::string_view k, absl::string_view v) : key(k), value(std::string(v)) {}
    Field(std::string_view k, int64_t v) : key(k), value(v) {}
    Field(std::string_view k, int v) : key(k), value(static_cast<int64_t>(v)) {}
    Field(std::string_view k, double v) : key(k), value(v) {}
    std::string_view key;
    Value value;
  };
  explicit ScopedFields(std::initializer_list<Field> fields);
  ~ScopedFields();
  ScopedFields(const ScopedFields&) = delete;
  ScopedFields& operator=(const ScopedFields&) = delete;

 private:
  size_t previous_size_;
};

// Admits one log line per interval and counts the ones it held back, so
// that a failure repeating per record or per connection logs a few lines,
// not one each time.
//
// Thread-safety: thread-safe.
class RateLimiter {
 public:
  explicit RateLimiter(std::chrono::steady_clock::duration interval) : interval_(interval) {}

  // Whether to log now; `*suppressed` gets how many were held back since the
  // last line that was logged.
  bool ShouldLog(int64_t* suppressed);

 private:
  const std::chrono::steady_clock::duration interval_;
  std::mutex mu_;
  std::chrono::steady_clock::time_point last_{};  // guarded by mu_
  bool logged_once_ = false;                      // guarded by mu_
  int64_t suppressed_ = 0;                        // guarded by mu_
};

// Sends gRPC's own log lines (handshake failures, transport errors) to the
// "grpc" logger, at most one line per 10 s per place in gRPC's code, with
// the count of those held back. Init calls it.
void RouteGrpcLogs();

// Drops gRPC's own log lines (the `weir` client: its errors, JSON with
// --json, already carry gRPC's status message).
void DropGrpcLogs();

}  // namespace weir::logging
