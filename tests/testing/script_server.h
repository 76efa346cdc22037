// ScriptServer: a throw-away server started and stopped by one of the
// project's scripts (scripts/redis.sh, scripts/postgres.sh):
//   <script> start DIR [args...]   prints the server's address last
//   <script> stop DIR
// The destructor stops it, so a failing test leaves nothing behind.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace weir::testing {

class ScriptServer {
 public:
  // Starts `script` (a path below the source tree's scripts/) in a new
  // temporary directory named after it.
  static absl::StatusOr<std::unique_ptr<ScriptServer>> Start(const std::string& script,
                                                             std::vector<std::string> args = {});
  ~ScriptServer();

  // The last line the start printed: "127.0.0.1:PORT" or a conninfo.
  const std::string& address() const { return address_; }
  const std::string& dir() const { return dir_; }

  // Kills the server; Restart starts it again in the same directory (same
  // address, same data).
  absl::Status Stop();
  absl::Status Restart();

 private:
  ScriptServer(std::string script, std::string dir, std::vector<std::string> args)
      : script_(std::move(script)), dir_(std::move(dir)), args_(std::move(args)) {}

  std::string script_;
  std::string dir_;
  std::vector<std::string> args_;
  std::string address_;
  bool running_ = false;
};

}  // namespace weir::testing
