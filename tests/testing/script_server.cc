#include "tests/testing/script_server.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tests/testing/process.h"

namespace weir::testing {
namespace {

std::string ScriptPath(const std::string& script) { return absl::StrCat(WEIR_SOURCE_DIR, "/scripts/", script); }

}  // namespace

absl::StatusOr<std::unique_ptr<ScriptServer>> ScriptServer::Start(const std::string& script,
                                                                  std::vector<std::string> args) {
  std::unique_ptr<ScriptServer> server(
      new ScriptServer(script, MakeTempDir(absl::StrCat("weir-", absl::StripSuffix(script, ".sh"), "-")),
                       std::move(args)));
  absl::Status started = server->Restart();
  if (!started.ok()) return started;
  return server;
}

ScriptServer::~ScriptServer() { (void)Stop(); }

absl::Status ScriptServer::Restart() {
  std::vector<std::string> argv = {"/bin/bash", ScriptPath(script_), "start", dir_};
  argv.insert(argv.end(), args_.begin(), args_.end());
  CommandResult result = RunCommand(argv, absl::Seconds(120));
  if (result.exit_code != 0) {
    return absl::InternalError(absl::StrCat(script_, " start ", dir_, " failed (exit ", result.exit_code, "): ",
                                            result.err));
  }
  std::vector<std::string> lines = absl::StrSplit(absl::StripTrailingAsciiWhitespace(result.out), '\n');
  address_ = lines.empty() ? "" : lines.back();
  running_ = true;
  return absl::OkStatus();
}

absl::Status ScriptServer::Stop() {
  if (!running_) return absl::OkStatus();
  CommandResult result = RunCommand({"/bin/bash", ScriptPath(script_), "stop", dir_}, absl::Seconds(60));
  if (result.exit_code != 0) {
    return absl::InternalError(absl::StrCat(script_, " stop ", dir_, " failed: ", result.err));
  }
  running_ = false;
  return absl::OkStatus();
}

}  // namespace weir::testing
