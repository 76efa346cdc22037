#include "common/logging/logging.h"

#include <grpc/support/log.h>

#include <map>
#include <utility>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "spdlog/pattern_formatter.h"
#include "spdlog/sinks/stdout_sinks.h"

namespace weir::logging {
namespace {

// `text` JSON-escaped (without quotes) onto `out`.
template <typename Out>
void AppendEscaped(Out& out, absl::string_view text) {
  auto append = [&out](absl::string_view s) { out.append(s.data(), s.data() + s.size()); };
  for (char c : text) {
    switch (c) {
      case '"': append("\\\""); break;
      case '\\': append("\\\\"); break;
      case '\n': append("\\n"); break;
      case '\r': append("\\r"); break;
      case '\t': append("\\t"); break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned char>(c));
          append(buf);
        } else {
          out.push_back(c);
        }
    }
  }
}

// Writes the message JSON-escaped, for the json format's "msg" field.
class JsonEscapedMessage : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    AppendEscaped(dest, absl::string_view(msg.payload.data(), msg.payload.size()));
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonEscapedMessage>();
  }
};

// The fields of this thread's ScopedFields, rendered: `,"key":value...`.
thread_local std::string t_fields;

// Writes this thread's fields (the json format's keys beside "msg").
class JsonFields : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg&, const std::tm&, spdlog::memory_buf_t& dest) override {
    dest.append(t_fields.data(), t_fields.data() + t_fields.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<JsonFields>(); }
};

// The level as log.level spells it ("warn", not spdlog's "warning").
class LevelName : public spdlog::custom_flag_formatter {
 public:
  // `width`: padded with spaces to this many characters (the text format).
  explicit LevelName(size_t width = 0) : width_(width) {}
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    const char* name = "info";
    switch (msg.level) {
      case spdlog::level::trace: name = "trace"; break;
      case spdlog::level::debug: name = "debug"; break;
      case spdlog::level::info: name = "info"; break;
      case spdlog::level::warn: name = "warn"; break;
      case spdlog::level::err: name = "error"; break;
      case spdlog::level::critical: name = "critical"; break;
      default: break;
    }
    const size_t length = std::strlen(name);
    dest.append(name, name + length);
    for (size_t i = length; i < width_; ++i) dest.push_back(' ');
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<LevelName>(width_); }

 private:
  size_t width_;
};

std::mutex g_mu;
spdlog::level::level_enum g_level = spdlog::level::info;
bool g_json = false;
spdlog::sink_ptr g_sink;

std::unique_ptr<spdlog::formatter> MakeFormatter() {
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  if (g_json) {
    formatter->add_flag<JsonEscapedMessage>('*');
    formatter->add_flag<LevelName>('#');
    formatter->add_flag<JsonFields>('&').set_pattern(
        R"({"time":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%#","logger":"%n","pid":%P,"thread":%t%&,"msg":"%*"})");
  } else {
    formatter->add_flag<LevelName>('#', 5).set_pattern("%Y-%m-%d %H:%M:%S.%e %^%#%$ [%n] %v");
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
  RouteGrpcLogs();
  return absl::OkStatus();
}

bool RateLimiter::ShouldLog(int64_t* suppressed) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  if (logged_once_ && now - last_ < interval_) {
    ++suppressed_;
    return false;
  }
  logged_once_ = true;
  last_ = now;
  *suppressed = suppressed_;
  suppressed_ = 0;
  return true;
}

namespace {

void LogGrpcLine(gpr_log_func_args* args) {
  // One limiter per place in gRPC's code: a TaskManager retrying a refused
  // handshake every second must not fill the log, and must not hide other
  // kinds of errors either.
  static std::mutex mu;
  static auto* limiters = new std::map<std::pair<std::string, int>, std::unique_ptr<RateLimiter>>();
  RateLimiter* limiter = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto& slot = (*limiters)[{args->file != nullptr ? args->file : "", args->line}];
    if (slot == nullptr) slot = std::make_unique<RateLimiter>(std::chrono::seconds(10));
    limiter = slot.get();
  }
  int64_t suppressed = 0;
  if (!limiter->ShouldLog(&suppressed)) return;
  auto log = Get("grpc");
  const spdlog::level::level_enum level = args->severity == GPR_LOG_SEVERITY_ERROR  ? spdlog::level::warn
                                          : args->severity == GPR_LOG_SEVERITY_INFO ? spdlog::level::info
                                                                                    : spdlog::level::debug;
  if (suppressed > 0) {
    log->log(level, "{} ({} similar lines suppressed)", args->message, suppressed);
  } else {
    log->log(level, "{}", args->message);
  }
}

}  // namespace

void RouteGrpcLogs() { gpr_set_log_function(LogGrpcLine); }

void DropGrpcLogs() {
  gpr_set_log_function([](gpr_log_func_args*) {});
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

ScopedFields::ScopedFields(std::initializer_list<Field> fields) : previous_size_(t_fields.size()) {
  for (const Field& field : fields) {
    t_fields += ",\"";
    AppendEscaped(t_fields, absl::string_view(field.key.data(), field.key.size()));
    t_fields += "\":";
    if (const std::string* text = std::get_if<std::string>(&field.value)) {
      t_fields += '"';
      AppendEscaped(t_fields, *text);
      t_fields += '"';
    } else if (const int64_t* number = std::get_if<int64_t>(&field.value)) {
      t_fields += std::to_string(*number);
    } else {
      const double d = std::get<double>(field.value);
      // JSON has no NaN or infinity.
      t_fields += std::isfinite(d) ? absl::StrCat(d) : std::string("null");
    }
  }
}

ScopedFields::~ScopedFields() { t_fields.resize(previous_size_); }

}  // namespace weir::logging
