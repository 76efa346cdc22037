// Configuration: the validated key/value settings of one process.
//
// Sources, later ones winning: the defaults in options.cc, a file given with
// --config (flat YAML, one "key: value" per line, as Flink's config file), and
// -Dkey=value arguments. Every value is checked against its OptionSpec when
// loaded, so the typed getters cannot fail on a loaded Configuration.
//
// Thread-safety: immutable after Load; safe to read from any thread.
#pragma once

#include "absl/strings/string_view.h"
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/config/options.h"

namespace weir::config {

// Parses a duration: "500ms", "5 s", "1 min", "2h", "1d", "250 us"; a bare
// number is milliseconds. Negative values are rejected.
absl::StatusOr<absl::Duration> ParseDuration(absl::string_view text);

// Parses a memory size: "64mb", "1 gb", "512k", "100 bytes"; a bare number is
// bytes. Units are powers of 1024.
absl::StatusOr<int64_t> ParseMemorySize(absl::string_view text);

// Formats a duration the way the config accepts it back ("1500 ms", "5 s").
std::string FormatDuration(absl::Duration d);

// A list of directories, as Flink writes them: "/a:/b" or "/a,/b"
// (surrounding spaces and empty entries dropped).
std::vector<std::string> SplitPathList(absl::string_view text);

enum class ValueSource { kDefault, kFile, kCommandLine };

// Where an effective value came from; used to log the effective config.
struct EffectiveValue {
  std::string key;
  std::string value;
  ValueSource source;
};

class Configuration {
 public:
  // Defaults only.
  Configuration();

  // Loads `file` (when set) and then applies `overrides` ("key=value").
  // Errors name the key (or file and line) and what was expected.
  // Keys whose values only make sense together (heartbeat.interval below
  // heartbeat.timeout); Load runs it. kInvalidArgument naming both keys.
  absl::Status CheckCombinations() const;

  static absl::StatusOr<Configuration> Load(const std::optional<std::string>& file,
                                            const std::vector<std::string>& overrides);

  // Parses a daemon's command line: --config FILE (or --config=FILE) and any
  // number of -Dkey=value (or -D key=value). Any other argument is an error.
  // Without --config the file is $WEIR_CONFIG_FILE, else kDefaultConfigFile
  // if it exists, else none.
  static absl::StatusOr<Configuration> FromCommandLine(int argc, const char* const* argv);

  // Sets one value after validating it against the schema.
  absl::Status Set(absl::string_view key, absl::string_view value, ValueSource source);
  // Set, except that a Flink key Weir has no use for
  // (IsFlinkKeyWeirIgnores) is only remembered, in ignored_flink_keys().
  absl::Status SetOrIgnoreFlinkKey(absl::string_view key, absl::string_view value, ValueSource source);

  // The Flink keys that Load met and ignored, in the order met: daemons
  // name them in one warning at start.
  const std::vector<std::string>& ignored_flink_keys() const { return ignored_flink_keys_; }

  std::string GetString(absl::string_view key) const;
  int64_t GetInt(absl::string_view key) const;
  bool GetBool(absl::string_view key) const;
  absl::Duration GetDuration(absl::string_view key) const;
  int64_t GetMemorySize(absl::string_view key) const;
  // Whether `key` was set in the file or on the command line (not its
  // default).
  bool IsSet(absl::string_view key) const;

  // Every key with its effective value, in schema order.
  std::vector<EffectiveValue> Effective() const;

  // The start-up log's account of the keys a daemon of `scope` (OptionScope
  // bits) uses: a line with how many there are and how many were set, then
  // one line per key set in the file or on the command line,
  // "key = value [file]", durations in the form the config accepts back
  // ("5 s", not "5000").
  std::vector<std::string> StartupLines(unsigned scope) const;

 private:
  const std::string& Raw(absl::string_view key) const;

  // The file the values came from ("" = none).
  std::string file_;
  absl::flat_hash_map<std::string, std::pair<std::string, ValueSource>> values_;
  std::vector<std::string> ignored_flink_keys_;
};

// Where installed daemons look for their configuration without --config.
inline constexpr absl::string_view kDefaultConfigFile = "/etc/weir/weir.yaml";

// The file a daemon or the client reads without --config: $WEIR_CONFIG_FILE,
// else kDefaultConfigFile when it exists, else none.
std::optional<std::string> DefaultConfigFile();

// Checks `value` against `spec`; the error names the key and what it expects.
absl::Status ValidateValue(const OptionSpec& spec, absl::string_view value);

// The configuration reference (Markdown), generated from AllOptions().
std::string ConfigurationReferenceMarkdown();

}  // namespace weir::config
