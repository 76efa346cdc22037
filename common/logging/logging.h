// Logging: one named spdlog logger per component ("jobmanager",
// "resourcemanager", "taskmanager", ...), all writing to stderr in one of two
// formats: text for people, json (one object per line) for log shippers.
//
// Lifecycle lines (started, listening, registered, lost, ...) go at info and
// carry their ids; nothing per record is logged above debug.
//
// Thread-safety: Init must run once, before other threads log; Get is safe
// from any thread.
#pragma once

#include "absl/strings/string_view.h"
#include <memory>
#include <string_view>

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

}  // namespace weir::logging
