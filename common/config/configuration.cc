#include "absl/strings/string_view.h"
#include "common/config/configuration.h"

#include <algorithm>

#include <cctype>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/check.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "yaml-cpp/yaml.h"

namespace weir::config {
namespace {

// Splits "123 ms" / "123ms" into its number and its (lower-cased) unit.
bool SplitNumberAndUnit(absl::string_view text, int64_t* number, std::string* unit) {
  text = absl::StripAsciiWhitespace(text);
  size_t i = 0;
  while (i < text.size() && absl::ascii_isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i == 0) return false;
  if (!absl::SimpleAtoi(text.substr(0, i), number)) return false;
  *unit = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text.substr(i)));
  return true;
}

absl::string_view TypeName(OptionType type) {
  switch (type) {
    case OptionType::kString: return "string";
    case OptionType::kInt: return "integer";
    case OptionType::kBool: return "boolean";
    case OptionType::kDuration: return "duration";
    case OptionType::kMemorySize: return "memory size";
    case OptionType::kEnum: return "enum";
  }
  return "?";
}

absl::string_view SourceName(ValueSource source) {
  switch (source) {
    case ValueSource::kDefault: return "default";
    case ValueSource::kFile: return "file";
    case ValueSource::kCommandLine: return "command line";
  }
  return "?";
}

absl::Status UnknownKey(absl::string_view key) {
  const std::optional<absl::string_view> nearest = NearestKey(key);
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown configuration key '", key, "'",
      nearest.has_value() ? absl::StrCat("; did you mean '", *nearest, "'?") : std::string(),
      " See docs/configuration.md for the keys Weir understands"));
}

// One value of the file, flattened: "a.b.c" for a: {b: {c: ...}}.
struct FileEntry {
  std::string key;
  std::string value;
  int line = 0;  // 1-based
};

int LineOf(const YAML::Node& node) { return node.Mark().line + 1; }

// Flattens the map `node` under `prefix` into `out`. Scalars are taken as
// written (quotes removed); a list of scalars becomes one comma-separated
// value (path lists); a key without a value (null) is left out.
absl::Status Flatten(const YAML::Node& node, const std::string& prefix, std::vector<FileEntry>* out) {
  for (auto it = node.begin(); it != node.end(); ++it) {
    // Copies (cheap handles): it->first lives in a proxy that dies with
    // the expression, so a reference to it dangles.
    const YAML::Node key_node = it->first;
    const YAML::Node value = it->second;
    const int line = LineOf(key_node);
    if (!key_node.IsScalar() || key_node.Scalar().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(line, ": expected 'key: value' (the key is empty)"));
    }
    const std::string key = prefix.empty() ? key_node.Scalar() : absl::StrCat(prefix, ".", key_node.Scalar());
    switch (value.Type()) {
      case YAML::NodeType::Map:
        RETURN_IF_ERROR(Flatten(value, key, out));
        break;
      case YAML::NodeType::Sequence: {
        std::vector<std::string> items;
        for (const YAML::Node& item : value) {
          if (!item.IsScalar()) {
            return absl::InvalidArgumentError(
                absl::StrCat(LineOf(item), ": the list of '", key, "' may only hold plain values"));
          }
          items.push_back(item.Scalar());
        }
        out->push_back({key, absl::StrJoin(items, ","), line});
        break;
      }
      case YAML::NodeType::Scalar:
        out->push_back({key, value.Scalar(), line});
        break;
      default:  // null: the key without a value keeps its default
        break;
    }
  }
  return absl::OkStatus();
}

// Reads the YAML file `path` into flat entries; errors start with "LINE: ".
absl::StatusOr<std::vector<FileEntry>> ReadYaml(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    return absl::NotFoundError(std::strerror(errno));
  } catch (const YAML::ParserException& e) {
    return absl::InvalidArgumentError(absl::StrCat(e.mark.line + 1, ": not valid YAML: ", e.msg));
  }
  std::vector<FileEntry> entries;
  if (root.IsNull()) return entries;  // empty, or only comments
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(absl::StrCat(
        LineOf(root), ": expected 'key: value' lines (or nested maps, as in 'taskmanager: {numberOfTaskSlots: 4}')"));
  }
  RETURN_IF_ERROR(Flatten(root, "", &entries));
  // YAML forbids a key twice; nested and flat spellings of one key count
  // too.
  std::map<std::string, int> first_line;
  for (const FileEntry& entry : entries) {
    auto [it, inserted] = first_line.emplace(entry.key, entry.line);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat(entry.line, ": '", entry.key,
                                                     "' is set twice (first on line ", it->second, ")"));
    }
  }
  return entries;
}

}  // namespace

absl::StatusOr<absl::Duration> ParseDuration(absl::string_view text) {
  int64_t n = 0;
  std::string unit;
  if (!SplitNumberAndUnit(text, &n, &unit)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "' is not a duration; expected a number with an optional unit, e.g. 500ms, 5 s, 1 min"));
  }
  absl::Duration d;
  if (unit.empty() || unit == "ms" || unit == "milli" || unit == "millis" || unit == "millisecond" ||
      unit == "milliseconds") {
    d = absl::Milliseconds(n);
  } else if (unit == "us" || unit == "micro" || unit == "micros" || unit == "microsecond" || unit == "microseconds") {
    d = absl::Microseconds(n);
  } else if (unit == "ns" || unit == "nano" || unit == "nanos" || unit == "nanosecond" || unit == "nanoseconds") {
    d = absl::Nanoseconds(n);
  } else if (unit == "s" || unit == "sec" || unit == "secs" || unit == "second" || unit == "seconds") {
    d = absl::Seconds(n);
  } else if (unit == "m" || unit == "min" || unit == "mins" || unit == "minute" || unit == "minutes") {
    d = absl::Minutes(n);
  } else if (unit == "h" || unit == "hour" || unit == "hours") {
    d = absl::Hours(n);
  } else if (unit == "d" || unit == "day" || unit == "days") {
    // absl::Hours(24 * n) would overflow the multiplication first.
    d = n > std::numeric_limits<int64_t>::max() / 24 ? absl::InfiniteDuration() : absl::Hours(24 * n);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' has an unknown time unit '", unit,
                                                   "'; use ms, s, min, h or d"));
  }
  // absl saturates instead of overflowing; no setting wants ~292 years.
  if (d == absl::InfiniteDuration() || absl::ToInt64Milliseconds(d) == std::numeric_limits<int64_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is too long a duration"));
  }
  return d;
}

absl::StatusOr<int64_t> ParseMemorySize(absl::string_view text) {
  int64_t n = 0;
  std::string unit;
  if (!SplitNumberAndUnit(text, &n, &unit)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "' is not a memory size; expected a number with an optional unit, e.g. 64mb, 1 gb"));
  }
  int64_t factor = 0;
  if (unit.empty() || unit == "b" || unit == "bytes") factor = 1;
  else if (unit == "k" || unit == "kb" || unit == "kibibytes") factor = 1LL << 10;
  else if (unit == "m" || unit == "mb" || unit == "mebibytes") factor = 1LL << 20;
  else if (unit == "g" || unit == "gb" || unit == "gibibytes") factor = 1LL << 30;
  else if (unit == "t" || unit == "tb" || unit == "tebibytes") factor = 1LL << 40;
  else {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' has an unknown size unit '", unit,
                                                   "'; use b, kb, mb, gb or tb"));
  }
  if (n > std::numeric_limits<int64_t>::max() / factor) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is too large"));
  }
  return n * factor;
}

std::vector<std::string> SplitPathList(absl::string_view text) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(text, absl::ByAnyChar(":,"))) {
    part = absl::StripAsciiWhitespace(part);
    if (!part.empty()) out.emplace_back(part);
  }
  return out;
}

std::string FormatDuration(absl::Duration d) {
  int64_t ms = absl::ToInt64Milliseconds(d);
  if (ms != 0 && ms % 3600000 == 0) return absl::StrCat(ms / 3600000, " h");
  if (ms != 0 && ms % 60000 == 0) return absl::StrCat(ms / 60000, " min");
  if (ms != 0 && ms % 1000 == 0) return absl::StrCat(ms / 1000, " s");
  return absl::StrCat(ms, " ms");
}

absl::Status ValidateValue(const OptionSpec& spec, absl::string_view value) {
  auto bad = [&](absl::string_view expected) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad value '", value, "' for '", spec.key, "': expected ", expected));
  };
  auto bounds = [&](int64_t v, absl::string_view what, auto fmt) -> absl::Status {
    if (v < spec.min_value || v > spec.max_value) {
      std::string range =
          spec.max_value == std::numeric_limits<int64_t>::max()
              ? absl::StrCat("at least ", fmt(spec.min_value))
              : absl::StrCat("between ", fmt(spec.min_value), " and ", fmt(spec.max_value));
      return bad(absl::StrCat(what, " ", range));
    }
    return absl::OkStatus();
  };
  switch (spec.type) {
    case OptionType::kString: {
      if (!spec.is_name || value.empty()) return absl::OkStatus();
      const bool legal = value.size() <= 128 && value != "." && value != ".." &&
                         std::all_of(value.begin(), value.end(), [](char c) {
                           return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' ||
                                  c == '-';
                         });
      return legal ? absl::OkStatus()
                   : bad("1 to 128 characters from A-Z a-z 0-9 . _ - (it names directories), not '.' or '..'");
    }
    case OptionType::kInt: {
      int64_t v = 0;
      if (!absl::SimpleAtoi(value, &v)) return bad("an integer");
      return bounds(v, "an integer", [](int64_t x) { return absl::StrCat(x); });
    }
    case OptionType::kBool: {
      std::string lower = absl::AsciiStrToLower(value);
      if (lower != "true" && lower != "false") return bad("true or false");
      return absl::OkStatus();
    }
    case OptionType::kDuration: {
      auto d = ParseDuration(value);
      if (!d.ok()) return bad(absl::StrCat("a duration such as 500ms, 5 s or 1 min (", d.status().message(), ")"));
      return bounds(absl::ToInt64Milliseconds(*d), "a duration",
                    [](int64_t ms) { return config::FormatDuration(absl::Milliseconds(ms)); });
    }
    case OptionType::kMemorySize: {
      auto s = ParseMemorySize(value);
      if (!s.ok()) return bad(absl::StrCat("a memory size such as 64mb or 1 gb (", s.status().message(), ")"));
      return bounds(*s, "a size", [](int64_t b) { return absl::StrCat(b, " bytes"); });
    }
    case OptionType::kEnum: {
      for (absl::string_view allowed : absl::StrSplit(spec.allowed_values, ',')) {
        if (allowed == value) return absl::OkStatus();
      }
      return bad(absl::StrCat("one of: ", absl::StrJoin(absl::StrSplit(spec.allowed_values, ','), ", ")));
    }
  }
  return absl::OkStatus();
}

Configuration::Configuration() {
  for (const OptionSpec& spec : AllOptions()) {
    values_[spec.key] = {std::string(spec.default_value), ValueSource::kDefault};
  }
}

absl::Status Configuration::Set(absl::string_view key, absl::string_view value, ValueSource source) {
  const OptionSpec* spec = FindOption(CanonicalKey(key));
  if (spec == nullptr) return UnknownKey(key);
  RETURN_IF_ERROR(ValidateValue(*spec, value));
  values_[spec->key] = {std::string(value), source};
  return absl::OkStatus();
}

absl::Status Configuration::SetOrIgnoreFlinkKey(absl::string_view key, absl::string_view value,
                                                ValueSource source) {
  if (IsFlinkKeyWeirIgnores(key)) {
    ignored_flink_keys_.emplace_back(key);
    return absl::OkStatus();
  }
  return Set(key, value, source);
}

absl::StatusOr<Configuration> Configuration::Load(const std::optional<std::string>& file,
                                                  const std::vector<std::string>& overrides) {
  Configuration config;
  if (file.has_value()) {
    config.file_ = *file;
    absl::StatusOr<std::vector<FileEntry>> entries = ReadYaml(*file);
    if (absl::IsNotFound(entries.status())) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot read configuration file '", *file, "': ", entries.status().message()));
    }
    if (!entries.ok()) return absl::InvalidArgumentError(absl::StrCat(*file, ":", entries.status().message()));
    for (const FileEntry& entry : *entries) {
      if (absl::Status status = config.SetOrIgnoreFlinkKey(entry.key, entry.value, ValueSource::kFile);
          !status.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(*file, ":", entry.line, ": ", status.message()));
      }
    }
  }
  for (const std::string& o : overrides) {
    size_t eq = o.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad override '-D", o, "': expected -Dkey=value"));
    }
    RETURN_IF_ERROR(config.SetOrIgnoreFlinkKey(o.substr(0, eq), o.substr(eq + 1), ValueSource::kCommandLine));
  }
  RETURN_IF_ERROR(config.CheckCombinations());
  return config;
}

absl::Status Configuration::CheckCombinations() const {
  const absl::Duration interval = GetDuration(keys::kHeartbeatInterval);
  const absl::Duration timeout = GetDuration(keys::kHeartbeatTimeout);
  if (interval >= timeout) {
    return absl::InvalidArgumentError(absl::StrCat(
        keys::kHeartbeatInterval, " (", config::FormatDuration(interval), ") must be shorter than ", keys::kHeartbeatTimeout,
        " (", config::FormatDuration(timeout), "), or every TaskManager is declared lost between two heartbeats; "
        "e.g. a timeout of five intervals or more"));
  }
  return absl::OkStatus();
}

std::optional<std::string> DefaultConfigFile() {
  if (const char* env = std::getenv("WEIR_CONFIG_FILE"); env != nullptr && env[0] != '\0') return std::string(env);
  if (std::ifstream(std::string(kDefaultConfigFile)).good()) return std::string(kDefaultConfigFile);
  return std::nullopt;
}

absl::StatusOr<Configuration> Configuration::FromCommandLine(int argc, const char* const* argv) {
  std::optional<std::string> file;
  std::vector<std::string> overrides;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--config" || arg == "-c") {
      if (i + 1 >= argc) return absl::InvalidArgumentError("--config needs a file name");
      file = argv[++i];
    } else if (absl::ConsumePrefix(&arg, "--config=")) {
      file = std::string(arg);
    } else if (arg == "-D") {
      if (i + 1 >= argc) return absl::InvalidArgumentError("-D needs key=value");
      overrides.emplace_back(argv[++i]);
    } else if (absl::ConsumePrefix(&arg, "-D")) {
      overrides.emplace_back(arg);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown argument '", arg, "'; expected --config FILE and -Dkey=value options"));
    }
  }
  if (!file.has_value()) file = DefaultConfigFile();
  return Load(file, overrides);
}

const std::string& Configuration::Raw(absl::string_view key) const {
  auto it = values_.find(key);
  WEIR_CHECK(it != values_.end(), absl::StrCat("configuration key not in the schema: ", key));
  return it->second.first;
}

std::string Configuration::GetString(absl::string_view key) const { return Raw(key); }

int64_t Configuration::GetInt(absl::string_view key) const {
  int64_t v = 0;
  WEIR_CHECK(absl::SimpleAtoi(Raw(key), &v), key);
  return v;
}

bool Configuration::GetBool(absl::string_view key) const {
  return absl::AsciiStrToLower(Raw(key)) == "true";
}

absl::Duration Configuration::GetDuration(absl::string_view key) const {
  auto d = ParseDuration(Raw(key));
  WEIR_CHECK(d.ok(), key);
  return *d;
}

bool Configuration::IsSet(absl::string_view key) const {
  auto it = values_.find(key);
  return it != values_.end() && it->second.second != ValueSource::kDefault;
}

int64_t Configuration::GetMemorySize(absl::string_view key) const {
  auto s = ParseMemorySize(Raw(key));
  WEIR_CHECK(s.ok(), key);
  return *s;
}

std::vector<EffectiveValue> Configuration::Effective() const {
  std::vector<EffectiveValue> out;
  for (const OptionSpec& spec : AllOptions()) {
    const auto& [value, source] = values_.at(spec.key);
    out.push_back({std::string(spec.key), value, source});
  }
  return out;
}

std::vector<std::string> Configuration::StartupLines(unsigned scope) const {
  std::vector<std::string> set;
  int used = 0;
  for (const OptionSpec& spec : AllOptions()) {
    if ((spec.scope & scope) == 0) continue;
    ++used;
    const auto& [value, source] = values_.at(spec.key);
    if (source == ValueSource::kDefault) continue;
    std::string shown = value.empty() ? "(unset)" : spec.is_secret ? "******" : value;
    if (spec.type == OptionType::kDuration && !value.empty()) {
      if (absl::StatusOr<absl::Duration> d = ParseDuration(value); d.ok()) shown = config::FormatDuration(*d);
    }
    set.push_back(absl::StrCat("  ", spec.key, " = ", shown, " [", SourceName(source), "]"));
  }
  std::vector<std::string> lines = {absl::StrCat(
      "configuration", file_.empty() ? std::string(" (no file)") : absl::StrCat(" from ", file_), ": ", used,
      " keys apply to this daemon, ", set.size(),
      set.empty() ? " set (all at their defaults, docs/configuration.md)"
                  : " set as below (the rest at their defaults, docs/configuration.md)")};
  lines.insert(lines.end(), set.begin(), set.end());
  return lines;
}

namespace {

// "64 mb" for 64 MiB: the largest unit that divides the size.
std::string FormatMemorySize(int64_t bytes) {
  constexpr std::pair<int64_t, const char*> kUnits[] = {
      {1LL << 40, "tb"}, {1LL << 30, "gb"}, {1LL << 20, "mb"}, {1LL << 10, "kb"}};
  for (const auto& [size, unit] : kUnits) {
    if (bytes != 0 && bytes % size == 0) return absl::StrCat(bytes / size, " ", unit);
  }
  return absl::StrCat(bytes, " b");
}

}  // namespace

std::string ConfigurationReferenceMarkdown() {
  std::ostringstream out;
  out << "| key | type | default | used by | description |\n|---|---|---|---|---|\n";
  for (const OptionSpec& spec : AllOptions()) {
    std::vector<std::string> users;
    if (spec.scope & kJobManager) users.push_back("jobmanager");
    if (spec.scope & kTaskManager) users.push_back("taskmanager");
    if (spec.scope & kClient) users.push_back("client");
    std::string type(TypeName(spec.type));
    if (spec.type == OptionType::kEnum) {
      type = absl::StrJoin(absl::StrSplit(spec.allowed_values, ','), " \\| ");
    }
    // The bounds ValidateValue enforces, in the value's own units.
    constexpr int64_t kNoMin = std::numeric_limits<int64_t>::min();
    constexpr int64_t kNoMax = std::numeric_limits<int64_t>::max();
    if (spec.min_value != kNoMin || spec.max_value != kNoMax) {
      auto fmt = [&](int64_t v) -> std::string {
        if (spec.type == OptionType::kDuration) return config::FormatDuration(absl::Milliseconds(v));
        if (spec.type == OptionType::kMemorySize) return FormatMemorySize(v);
        return absl::StrCat(v);
      };
      if (spec.max_value == kNoMax) {
        absl::StrAppend(&type, ", at least ", fmt(spec.min_value));
      } else {
        absl::StrAppend(&type, ", ", fmt(spec.min_value), " to ", fmt(spec.max_value));
      }
    }
    out << "| `" << spec.key << "` | " << type << " | "
        << (spec.default_value.empty() ? "(unset)" : absl::StrCat("`", spec.default_value, "`")) << " | "
        << absl::StrJoin(users, ", ") << " | " << spec.description << " |\n";
  }
  return out.str();
}

}  // namespace weir::config
