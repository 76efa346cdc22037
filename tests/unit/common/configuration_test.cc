#include "common/config/configuration.h"

#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/process.h"

namespace weir::config {
namespace {

namespace k = keys;

std::string WriteFile(const std::string& text) {
  std::string path = weir::testing::MakeTempDir("weir-config-test") + "/weir.yaml";
  std::ofstream(path) << text;
  return path;
}

// Asserts that `status` failed with kInvalidArgument and mentions `needle`.
void ExpectError(const absl::Status& status, const std::string& needle) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), needle)) << "message: " << status.message()
                                                           << "\nexpected to contain: " << needle;
}

TEST(ParseDurationTest, AcceptsUnitsAndBareMilliseconds) {
  EXPECT_EQ(*ParseDuration("500ms"), absl::Milliseconds(500));
  EXPECT_EQ(*ParseDuration("5 s"), absl::Seconds(5));
  EXPECT_EQ(*ParseDuration("1 min"), absl::Minutes(1));
  EXPECT_EQ(*ParseDuration("250"), absl::Milliseconds(250));
  EXPECT_EQ(*ParseDuration(" 2h "), absl::Hours(2));
  EXPECT_EQ(*ParseDuration("3 seconds"), absl::Seconds(3));
  EXPECT_EQ(*ParseDuration("1d"), absl::Hours(24));
  EXPECT_EQ(*ParseDuration("10 MS"), absl::Milliseconds(10));
}

TEST(ParseDurationTest, RejectsWhatIsNotADuration) {
  ExpectError(ParseDuration("").status(), "not a duration");
  ExpectError(ParseDuration("fast").status(), "not a duration");
  ExpectError(ParseDuration("-5 s").status(), "not a duration");
  ExpectError(ParseDuration("5 fortnights").status(), "unknown time unit 'fortnights'");
  ExpectError(ParseDuration("1.5 s").status(), "unknown time unit");
  // Too large for any setting, instead of wrapping around (this one once
  // became 8 h).
  ExpectError(ParseDuration("768614336404564651 d").status(), "too long a duration");
  ExpectError(ParseDuration("9223372036854775807 h").status(), "too long a duration");
  EXPECT_EQ(*ParseDuration("36500 d"), absl::Hours(24 * 36500));
}

TEST(SplitPathListTest, TakesFlinksListSpellings) {
  EXPECT_THAT(SplitPathList("/a:/b"), ::testing::ElementsAre("/a", "/b"));
  EXPECT_THAT(SplitPathList("/a, /b,"), ::testing::ElementsAre("/a", "/b"));
  EXPECT_THAT(SplitPathList("/tmp"), ::testing::ElementsAre("/tmp"));
  EXPECT_TRUE(SplitPathList("").empty());
}

TEST(ParseMemorySizeTest, AcceptsUnits) {
  EXPECT_EQ(*ParseMemorySize("64mb"), 64LL << 20);
  EXPECT_EQ(*ParseMemorySize("1 gb"), 1LL << 30);
  EXPECT_EQ(*ParseMemorySize("4096"), 4096);
  ExpectError(ParseMemorySize("lots").status(), "not a memory size");
  ExpectError(ParseMemorySize("1 parsec").status(), "unknown size unit");
  ExpectError(ParseMemorySize("99999999999 tb").status(), "too large");
}

TEST(ConfigurationTest, DefaultsFollowTheSchema) {
  Configuration config;
  EXPECT_EQ(config.GetString(k::kJobManagerRpcAddress), "127.0.0.1");
  EXPECT_EQ(config.GetInt(k::kJobManagerRpcPort), 6123);
  EXPECT_EQ(config.GetInt(k::kTaskManagerRpcPort), 0);
  EXPECT_EQ(config.GetDuration(k::kHeartbeatInterval), absl::Seconds(1));
  EXPECT_EQ(config.GetDuration(k::kHeartbeatTimeout), absl::Seconds(5));
  EXPECT_EQ(config.GetString(k::kLogFormat), "text");
}

TEST(ConfigurationTest, EveryDefaultIsValidForItsOwnSpec) {
  for (const OptionSpec& spec : AllOptions()) {
    if (spec.default_value.empty() && spec.type == OptionType::kString) continue;
    EXPECT_TRUE(ValidateValue(spec, spec.default_value).ok()) << spec.key;
  }
}

TEST(ConfigurationTest, FileValuesAndCommandLineOverrides) {
  std::string path = WriteFile(
      "# cluster settings\n"
      "\n"
      "jobmanager.rpc.port: 7000\n"
      "heartbeat.timeout: \"10 s\"\n"
      "taskmanager.numberOfTaskSlots: 4   # per machine\n"
      "log.level: debug\n");
  auto config = Configuration::Load(path, {"jobmanager.rpc.port=7001", "heartbeat.interval=250"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->GetInt(k::kJobManagerRpcPort), 7001);  // the command line wins
  EXPECT_EQ(config->GetDuration(k::kHeartbeatTimeout), absl::Seconds(10));
  EXPECT_EQ(config->GetDuration(k::kHeartbeatInterval), absl::Milliseconds(250));
  EXPECT_EQ(config->GetInt(k::kTaskManagerSlots), 4);
  EXPECT_EQ(config->GetString(k::kLogLevel), "debug");

  const std::vector<std::string> jm = config->StartupLines(kJobManager);
  const std::string summary = absl::StrJoin(jm, "\n");
  EXPECT_TRUE(absl::StrContains(jm[0], "keys apply to this daemon, 4 set as below")) << summary;
  EXPECT_TRUE(absl::StrContains(summary, "  jobmanager.rpc.port = 7001 [command line]")) << summary;
  EXPECT_TRUE(absl::StrContains(summary, "  heartbeat.timeout = 10 s [file]")) << summary;
  // Durations read back in the config's own form, not as raw milliseconds.
  EXPECT_TRUE(absl::StrContains(summary, "  heartbeat.interval = 250 ms [command line]")) << summary;
  // Defaults are not listed; keys of the other daemon only in its own lines.
  EXPECT_FALSE(absl::StrContains(summary, "jobmanager.rpc.address")) << summary;
  EXPECT_FALSE(absl::StrContains(summary, "taskmanager.numberOfTaskSlots")) << summary;
  EXPECT_TRUE(absl::StrContains(absl::StrJoin(config->StartupLines(kTaskManager), "\n"),
                                "  taskmanager.numberOfTaskSlots = 4 [file]"));
}

TEST(ConfigurationTest, UnknownKeyInFileNamesFileLineAndKey) {
  std::string path = WriteFile("jobmanager.rpc.port: 7000\nheartbeat.timout: 5 s\n");
  auto config = Configuration::Load(path, {});
  ExpectError(config.status(), ":2: unknown configuration key 'heartbeat.timout'");
}

TEST(ConfigurationTest, UnknownKeyOnCommandLine) {
  ExpectError(Configuration::Load(std::nullopt, {"taskmanager.slots=2"}).status(),
              "unknown configuration key 'taskmanager.slots'");
}

TEST(ConfigurationTest, AMisspeltKeyNamesTheNearestOne) {
  ExpectError(Configuration::Load(std::nullopt, {"execution.checkpointing.intervall=1s"}).status(),
              "unknown configuration key 'execution.checkpointing.intervall'; did you mean "
              "'execution.checkpointing.interval'?");
  ExpectError(Configuration::Load(WriteFile("heartbeat.timout: 5 s\n"), {}).status(),
              "did you mean 'heartbeat.timeout'?");
  // Nothing near: no guess.
  absl::Status far = Configuration::Load(std::nullopt, {"no.such.key=1"}).status();
  ExpectError(far, "unknown configuration key 'no.such.key'");
  EXPECT_FALSE(absl::StrContains(far.message(), "did you mean")) << far;
}

// A Flink config.yaml can be reused: Flink's names for Weir's settings set
// them, and Flink settings Weir has no use for are remembered for one
// warning instead of stopping the daemon.
TEST(ConfigurationTest, FlinkNamesSetWeirKeysAndFlinkOnlyKeysAreSetAside) {
  std::string path = WriteFile(
      "state.backend: hashmap\n"
      "restart-strategy: fixed-delay\n"
      "execution.checkpointing.dir: /data/checkpoints\n"
      "execution.checkpointing.savepoint-dir: /data/savepoints\n"
      "execution.checkpointing.num-retained: 3\n"
      "taskmanager.memory.process.size: 1728m\n"
      "jobmanager.memory.process.size: 1600m\n"
      "env.java.opts.all: -Xss2m\n"
      "taskmanager.numberOfTaskSlots: 2\n");
  auto config = Configuration::Load(path, {"web.submit.enable=false"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->GetString(k::kStateBackendType), "hashmap");
  EXPECT_EQ(config->GetString(k::kRestartStrategyType), "fixed-delay");
  EXPECT_EQ(config->GetString(k::kCheckpointsDir), "/data/checkpoints");
  EXPECT_EQ(config->GetString(k::kSavepointsDir), "/data/savepoints");
  EXPECT_EQ(config->GetInt(k::kCheckpointsRetained), 3);
  EXPECT_EQ(config->GetInt(k::kTaskManagerSlots), 2);
  EXPECT_THAT(config->ignored_flink_keys(),
              ::testing::ElementsAre("taskmanager.memory.process.size", "jobmanager.memory.process.size",
                                     "env.java.opts.all", "web.submit.enable"));
  // A Flink name still gets Weir's value check.
  ExpectError(Configuration::Load(std::nullopt, {"state.backend=filesystem"}).status(),
              "bad value 'filesystem' for 'state.backend.type'");
  // Weir's own keys under a Flink family stay Weir's.
  EXPECT_FALSE(IsFlinkKeyWeirIgnores(k::kSegmentSize));
  EXPECT_FALSE(IsFlinkKeyWeirIgnores(k::kRocksDbWriteBuffer));
}

TEST(ConfigurationTest, BadValuesNameTheKeyAndWhatWasExpected) {
  ExpectError(Configuration::Load(std::nullopt, {"jobmanager.rpc.port=http"}).status(),
              "bad value 'http' for 'jobmanager.rpc.port': expected an integer");
  ExpectError(Configuration::Load(std::nullopt, {"jobmanager.rpc.port=0"}).status(),
              "'jobmanager.rpc.port': expected an integer between 1 and 65535");
  ExpectError(Configuration::Load(std::nullopt, {"taskmanager.numberOfTaskSlots=0"}).status(),
              "'taskmanager.numberOfTaskSlots'");
  ExpectError(Configuration::Load(std::nullopt, {"heartbeat.timeout=soon"}).status(),
              "bad value 'soon' for 'heartbeat.timeout': expected a duration such as 500ms, 5 s or 1 min");
  ExpectError(Configuration::Load(std::nullopt, {"heartbeat.interval=1ms"}).status(),
              "'heartbeat.interval': expected a duration between 10 ms and 24 h");
  ExpectError(Configuration::Load(std::nullopt, {"log.level=verbose"}).status(),
              "bad value 'verbose' for 'log.level': expected one of: trace, debug, info, warn, error, off");
  ExpectError(Configuration::Load(std::nullopt, {"log.format=xml"}).status(), "expected one of: text, json");
}

TEST(ConfigurationTest, S3KeysAreValidatedAndTheSecretIsNeverShown) {
  ExpectError(Configuration::Load(std::nullopt, {"s3.upload.part-size=1mb"}).status(), "'s3.upload.part-size'");
  ExpectError(Configuration::Load(std::nullopt, {"s3.upload.part-size=-5mb"}).status(), "'s3.upload.part-size'");
  ExpectError(Configuration::Load(std::nullopt, {"s3.upload.part-size=NaN"}).status(), "'s3.upload.part-size'");
  ExpectError(Configuration::Load(std::nullopt, {"s3.path.style.access=yes please"}).status(),
              "'s3.path.style.access'");
  absl::StatusOr<Configuration> config =
      Configuration::Load(std::nullopt, {"s3.access-key=AKIDEXAMPLE", "s3.secret-key=do-not-print-me"});
  ASSERT_TRUE(config.ok()) << config.status();
  const std::string lines = absl::StrJoin(config->StartupLines(kJobManager), "\n");
  EXPECT_TRUE(absl::StrContains(lines, "s3.access-key = AKIDEXAMPLE")) << lines;
  EXPECT_TRUE(absl::StrContains(lines, "s3.secret-key = ******")) << lines;
  EXPECT_FALSE(absl::StrContains(lines, "do-not-print-me")) << lines;
}

TEST(ConfigurationTest, BadOverrideSyntax) {
  ExpectError(Configuration::Load(std::nullopt, {"heartbeat.timeout"}).status(), "expected -Dkey=value");
  ExpectError(Configuration::Load(std::nullopt, {"=5"}).status(), "expected -Dkey=value");
}

TEST(ConfigurationTest, UnreadableFile) {
  ExpectError(Configuration::Load("/nonexistent/weir.yaml", {}).status(),
              "cannot read configuration file '/nonexistent/weir.yaml'");
}

TEST(ConfigurationTest, MalformedFileLines) {
  ExpectError(Configuration::Load(WriteFile("just some words\n"), {}).status(), ":1: expected 'key: value'");
  ExpectError(Configuration::Load(WriteFile(": 5\n"), {}).status(), ":1: expected 'key: value' (the key is empty)");
  // yaml-cpp reads an unclosed quote to the end of the file: the value is
  // then wrong, and the error says which and where.
  ExpectError(Configuration::Load(WriteFile("log.level: \"info\n"), {}).status(),
              ":1: bad value 'info ' for 'log.level'");
  ExpectError(Configuration::Load(WriteFile("log.level: info\ntaskmanager: [1, 2\n"), {}).status(),
              ":3: not valid YAML");
  ExpectError(Configuration::Load(WriteFile("log.level: info\n  bad indent: 1\n"), {}).status(), "not valid YAML");
}

TEST(ConfigurationTest, TheFileIsYamlWithNestedMapsListsAndQuoting) {
  std::string path = WriteFile(
      "# Flink 2.x style: nested maps and flat dotted keys both work\n"
      "taskmanager:\n"
      "  rpc: {port: 7200}\n"
      "jobmanager.rpc.address: 'jm.example'   # quoted\n"
      "heartbeat:\n"
      "  timeout: \"10 s\"\n"
      "io.tmp.dirs:\n"
      "  - /data/1\n"
      "  - /data/2\n"
      "taskmanager.numberOfTaskSlots:\n");  // no value: the default
  auto config = Configuration::Load(path, {});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->GetInt(k::kTaskManagerSlots), 1);  // the default, the key had no value
  EXPECT_EQ(config->GetInt(k::kTaskManagerRpcPort), 7200);
  EXPECT_EQ(config->GetString(k::kJobManagerRpcAddress), "jm.example");
  EXPECT_EQ(config->GetDuration(k::kHeartbeatTimeout), absl::Seconds(10));
  EXPECT_THAT(SplitPathList(config->GetString(k::kIoTmpDirs)), ::testing::ElementsAre("/data/1", "/data/2"));

  // One key twice, nested and flat, is an error naming both lines.
  ExpectError(Configuration::Load(WriteFile("taskmanager:\n  numberOfTaskSlots: 2\ntaskmanager.numberOfTaskSlots: 3\n"),
                                  {}).status(),
              ":3: 'taskmanager.numberOfTaskSlots' is set twice (first on line 2)");

  // A nested key that does not exist is named in full, with its line.
  ExpectError(Configuration::Load(WriteFile("log.level: info\ntaskmanager:\n  numberOfSlots: 2\n"), {}).status(),
              ":3: unknown configuration key 'taskmanager.numberOfSlots'");
}

TEST(ConfigurationTest, FromCommandLine) {
  std::string path = WriteFile("taskmanager.numberOfTaskSlots: 3\n");
  const char* argv[] = {"weir-taskmanager", "--config", path.c_str(), "-Dheartbeat.interval=2 s",
                        "-D", "log.level=warn"};
  auto config = Configuration::FromCommandLine(6, argv);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->GetInt(k::kTaskManagerSlots), 3);
  EXPECT_EQ(config->GetDuration(k::kHeartbeatInterval), absl::Seconds(2));
  EXPECT_EQ(config->GetString(k::kLogLevel), "warn");

  std::string with_equals = "--config=" + path;
  const char* argv2[] = {"weir-taskmanager", with_equals.c_str()};
  ASSERT_TRUE(Configuration::FromCommandLine(2, argv2).ok());
}

TEST(ConfigurationTest, WithoutConfigTheFileIsTakenFromTheEnvironment) {
  std::string path = WriteFile("taskmanager.numberOfTaskSlots: 5\n");
  setenv("WEIR_CONFIG_FILE", path.c_str(), 1);
  const char* argv[] = {"weir-taskmanager", "-Dlog.level=warn"};
  auto config = Configuration::FromCommandLine(2, argv);
  std::string other = WriteFile("taskmanager.numberOfTaskSlots: 7\n");
  std::string flag = "--config=" + other;
  const char* explicit_argv[] = {"weir-taskmanager", flag.c_str()};
  auto explicit_config = Configuration::FromCommandLine(2, explicit_argv);
  unsetenv("WEIR_CONFIG_FILE");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->GetInt(k::kTaskManagerSlots), 5);
  EXPECT_TRUE(absl::StrContains(config->StartupLines(config::kTaskManager)[0], "from " + path))
      << config->StartupLines(config::kTaskManager)[0];
  // --config wins over the environment.
  ASSERT_TRUE(explicit_config.ok()) << explicit_config.status();
  EXPECT_EQ(explicit_config->GetInt(k::kTaskManagerSlots), 7);
}

TEST(ConfigurationTest, ContradictorySettingsAreRefusedNamingBothKeys) {
  absl::Status status = Configuration::Load(std::nullopt, {"heartbeat.interval=10s", "heartbeat.timeout=5s"}).status();
  ExpectError(status, "heartbeat.interval (10 s) must be shorter than heartbeat.timeout (5 s)");
  EXPECT_FALSE(Configuration::Load(std::nullopt, {"heartbeat.interval=5s", "heartbeat.timeout=5s"}).ok());
  EXPECT_TRUE(Configuration::Load(std::nullopt, {"heartbeat.interval=1s", "heartbeat.timeout=5s"}).ok());
}

TEST(ConfigurationTest, FromCommandLineErrors) {
  const char* unknown[] = {"weir-jobmanager", "--port", "5"};
  ExpectError(Configuration::FromCommandLine(3, unknown).status(), "unknown argument '--port'");
  const char* no_file[] = {"weir-jobmanager", "--config"};
  ExpectError(Configuration::FromCommandLine(2, no_file).status(), "--config needs a file name");
  const char* no_value[] = {"weir-jobmanager", "-D"};
  ExpectError(Configuration::FromCommandLine(2, no_value).status(), "-D needs key=value");
}

TEST(ConfigurationTest, ReferenceListsEveryKey) {
  std::string reference = ConfigurationReferenceMarkdown();
  for (const OptionSpec& spec : AllOptions()) {
    EXPECT_TRUE(absl::StrContains(reference, absl::StrCat("`", spec.key, "`"))) << spec.key;
  }
}

}  // namespace
}  // namespace weir::config

namespace weir::config {
namespace {

// docs/configuration.md must carry the table the schema generates; run
// scripts/gen-config-docs.sh after changing options.cc.
TEST(ConfigurationDocsTest, ReferenceInDocsIsCurrent) {
  std::string doc = weir::testing::ReadFile(std::string(WEIR_SOURCE_DIR) + "/docs/configuration.md");
  ASSERT_FALSE(doc.empty()) << "docs/configuration.md not found under " << WEIR_SOURCE_DIR;
  EXPECT_TRUE(absl::StrContains(doc, ConfigurationReferenceMarkdown()))
      << "docs/configuration.md is stale: run scripts/gen-config-docs.sh";
}

}  // namespace
}  // namespace weir::config
