#include "absl/strings/string_view.h"
#include "common/logging/logging.h"

#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "spdlog/pattern_formatter.h"
#include "spdlog/sinks/stdout_sinks.h"

namespace weir::logging {
namespace {

// Writes the message JSON-escaped, for the json format's "msg" field.
class JsonEscapedMessage : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    for (char c : msg.payload) {
      switch (c) {
        case '"': Append(dest, "\\\""); break;
        case '\\': Append(dest, "\\\\"); break;
        case '\n': Append(dest, "\\n"); break;
        case '\r': Append(dest, "\\r"); break;
        case '\t': Append(dest, "\\t"); break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned char>(c));
            Append(dest, buf);
          } else {
            dest.push_back(c);
          }
      }
    }
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonEscapedMessage>();
  }

 private:
  static void Append(spdlog::memory_buf_t& dest, absl::string_view s) { dest.append(s.data(), s.data() + s.size()); }
};

std::mutex g_mu;
spdlog::level::level_enum g_level = spdlog::level::info;
bool g_json = false;
spdlog::sink_ptr g_sink;

std::unique_ptr<spdlog::formatter> MakeFormatter() {
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  if (g_json) {
    formatter->add_flag<JsonEscapedMessage>('*').set_pattern(
        R"({"time":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l","logger":"%n","pid":%P,"thread":%t,"msg":"%*"})");
  } else {
    formatter->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%-5l%$ [%n] %v");
  }
  return formatter;
}

spdlog::sink_ptr Sink() {
  if (!g_sink) g_sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  return g_sink;
}

}  // namespace

absl::Status Init(absl::string_view level, absl::string_view format) {
  spdlog::level::level_enum parsed = spdlog::level::from_str(std::string(level));
  if (parsed == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError(absl::StrCat("unknown log level '", level, "'"));
  }
  if (format != "text" && format != "json") {
    return absl::InvalidArgumentError(absl::StrCat("unknown log format '", format, "'; expected text or json"));
  }
  std::lock_guard<std::mutex> lock(g_mu);
  g_level = parsed;
  g_json = format == "json";
  Sink()->set_formatter(MakeFormatter());
  spdlog::apply_all([](const std::shared_ptr<spdlog::logger>& logger) { logger->set_level(g_level); });
  return absl::OkStatus();
}

std::shared_ptr<spdlog::logger> Get(absl::string_view component) {
  std::string name(component);
  if (auto existing = spdlog::get(name)) return existing;
  std::lock_guard<std::mutex> lock(g_mu);
  if (auto existing = spdlog::get(name)) return existing;
  if (!g_sink) Sink()->set_formatter(MakeFormatter());
  auto logger = std::make_shared<spdlog::logger>(name, Sink());
  logger->set_level(g_level);
  logger->flush_on(spdlog::level::trace);
  spdlog::register_logger(logger);
  return logger;
}

}  // namespace weir::logging
