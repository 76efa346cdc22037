// The `weir` client's global options, parsed the same way before and after
// the command, in both spellings.
#include "client/cli.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "weir/version.h"

namespace weir::client {
namespace {

using ::testing::HasSubstr;

GlobalOptions Parse(const std::vector<std::string>& args) {
  GlobalOptions options;
  for (size_t i = 0; i < args.size(); ++i) {
    absl::StatusOr<bool> parsed = ParseGlobalOption(args, &i, &options);
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_TRUE(parsed.ok() && *parsed) << args[i] << " is not a global option";
  }
  return options;
}

TEST(CliTest, OptionsTakeTheirValueWithASpaceOrAnEqualsSign) {
  EXPECT_EQ(Parse({"--jobmanager", "h:1"}).jobmanager, "h:1");
  EXPECT_EQ(Parse({"--jobmanager=h:2"}).jobmanager, "h:2");
  EXPECT_EQ(Parse({"-m", "h:3"}).jobmanager, "h:3");
  EXPECT_EQ(Parse({"--token-file", "/a"}).token_file, "/a");
  EXPECT_EQ(Parse({"--token-file=/b"}).token_file, "/b");
  EXPECT_TRUE(Parse({"--json"}).json);
  EXPECT_TRUE(Parse({"--version"}).version);
}

TEST(CliTest, AJobManagerWithoutAPortGetsTheDefaultPort) {
  EXPECT_EQ(Parse({"--jobmanager", "127.0.0.1"}).jobmanager, "127.0.0.1:6123");
  EXPECT_EQ(Parse({"--jobmanager=jm.example"}).jobmanager, "jm.example:6123");
  EXPECT_EQ(Parse({"--jobmanager", "[::1]"}).jobmanager, "[::1]:6123");
  EXPECT_EQ(Parse({"--jobmanager", "[::1]:7000"}).jobmanager, "[::1]:7000");
}

TEST(CliTest, AMissingValueIsAnError) {
  GlobalOptions options;
  std::vector<std::string> args = {"--token-file"};
  size_t i = 0;
  absl::StatusOr<bool> parsed = ParseGlobalOption(args, &i, &options);
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("--token-file needs a value"));
  args = {"--jobmanager="};
  i = 0;
  EXPECT_FALSE(ParseGlobalOption(args, &i, &options).ok());
}

TEST(CliTest, OtherArgumentsAreNotGlobalOptions) {
  GlobalOptions options;
  for (const std::string arg : {"-p", "submit", "-Dx=y", "--savepoint-path"}) {
    std::vector<std::string> args = {arg, "v"};
    size_t i = 0;
    absl::StatusOr<bool> parsed = ParseGlobalOption(args, &i, &options);
    ASSERT_TRUE(parsed.ok());
    EXPECT_FALSE(*parsed) << arg;
    EXPECT_EQ(i, 0u);
  }
}

TEST(CliTest, VersionAndOptionsAfterTheCommand) {
  std::ostringstream out, err;
  EXPECT_EQ(RunCli({"--version"}, out, err), 0);
  EXPECT_THAT(out.str(), HasSubstr(WEIR_VERSION_STRING));
  // A global option after the command is taken as one; an unknown token
  // file fails before any call, whichever side of the command it is on.
  for (const std::vector<std::string>& args : {std::vector<std::string>{"list", "--token-file=/nonexistent/t"},
                                               std::vector<std::string>{"--token-file", "/nonexistent/t", "list"}}) {
    std::ostringstream o, e;
    EXPECT_EQ(RunCli(args, o, e), 2);
    EXPECT_THAT(e.str(), HasSubstr("/nonexistent/t"));
  }
}

TEST(CliTest, TheConfigFileGivesTheJobManagerAndTheTokenUnlessGivenOtherwise) {
  char dir[] = "/tmp/weir-cli-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string file = std::string(dir) + "/weir.yaml";
  std::ofstream(file) << "jobmanager:\n  rpc: {address: jm.example, port: 7123}\n"
                         "security.auth.token-file: /etc/weir/token\n";
  GlobalOptions from_file = Parse({"--config", file});
  ASSERT_TRUE(ApplyConfigFile(&from_file).ok());
  EXPECT_EQ(from_file.jobmanager, "jm.example:7123");
  EXPECT_EQ(from_file.token_file, "/etc/weir/token");

  GlobalOptions flags_win = Parse({"--config=" + file, "--jobmanager", "other:1", "--token-file", "/t"});
  ASSERT_TRUE(ApplyConfigFile(&flags_win).ok());
  EXPECT_EQ(flags_win.jobmanager, "other:1");
  EXPECT_EQ(flags_win.token_file, "/t");

  // -D before the command overrides the file, as for the daemons.
  GlobalOptions overridden = Parse({"--config", file});
  overridden.overrides = {"jobmanager.rpc.port=7124"};
  ASSERT_TRUE(ApplyConfigFile(&overridden).ok());
  EXPECT_EQ(overridden.jobmanager, "jm.example:7124");
  GlobalOptions job_key;
  job_key.overrides = {"parallelism.default=2"};
  absl::Status refused = ApplyConfigFile(&job_key);
  EXPECT_THAT(std::string(refused.message()), HasSubstr("put a job's settings after `submit`"));

  GlobalOptions missing = Parse({"--config", std::string(dir) + "/none.yaml"});
  absl::Status status = ApplyConfigFile(&missing);
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr("cannot read configuration file"));
}

TEST(CliTest, WithJsonErrorsAreJsonToo) {
  std::ostringstream out, err;
  EXPECT_EQ(RunCli({"--json", "frobnicate"}, out, err), 2);
  nlohmann::json error = nlohmann::json::parse(err.str());
  EXPECT_EQ(error["error"], "unknown command 'frobnicate'");
  EXPECT_EQ(error["exit_code"], 2);
  EXPECT_TRUE(out.str().empty());

  std::ostringstream out2, err2;
  EXPECT_EQ(RunCli({"status", "--json"}, out2, err2), 2);  // no job id
  EXPECT_EQ(nlohmann::json::parse(err2.str())["exit_code"], 2) << err2.str();

  // Without --json: the plain line.
  std::ostringstream out3, err3;
  EXPECT_EQ(RunCli({"frobnicate"}, out3, err3), 2);
  EXPECT_THAT(err3.str(), HasSubstr("weir: unknown command 'frobnicate'"));
}

// No flag is ignored without a word: `list` takes Flink's -r and -a, and
// refuses anything else before it asks the JobManager.
TEST(CliTest, ListRefusesArgumentsItDoesNotTake) {
  std::ostringstream out, err;
  EXPECT_EQ(RunCli({"--jobmanager", "127.0.0.1:1", "list", "--runing"}, out, err), 2);
  EXPECT_THAT(err.str(), HasSubstr("weir: list: unknown argument '--runing'; usage: weir list [-r|--running"));
  EXPECT_TRUE(out.str().empty());
}

}  // namespace
}  // namespace weir::client
