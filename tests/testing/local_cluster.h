// LocalCluster: a real Weir cluster for tests — weir-jobmanager and
// weir-taskmanager processes on free ports of 127.0.0.1, logs in a temporary
// directory, driven with the real `weir` client.
//
// The directory ($TMPDIR/weir-local-cluster-XXXXXX: the daemons' logs, the
// HA store, the TaskManagers' io.tmp.dirs) lives as long as the LocalCluster.
// The destructor kills the daemons and removes it, unless the current
// GoogleTest test has failed or an exception is unwinding: then it stays for
// reading, and the destructor prints its path on stderr ("LocalCluster: kept
// ..."). Outside a test (the benchmarks) only an exception keeps it.
//
// Thread-safety: none; use from the test's thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "tests/testing/http_get.h"
#include "tests/testing/process.h"

namespace weir::testing {

class LocalCluster {
 public:
  struct Options {
    int taskmanagers = 2;
    int slots_per_taskmanager = 1;
    // -Dkey=value for every daemon.
    std::vector<std::string> config;
    // When set: the cluster's shared secret (daemons and client use it).
    std::string auth_token;
    // -Dkey=value for the `weir` client, before the command (TLS settings).
    std::vector<std::string> client_config;
  };

  explicit LocalCluster(Options options);
  // SIGKILLs the daemons; removes dir() unless the test failed (see above).
  ~LocalCluster();

  // Starts the JobManager and the TaskManagers and waits until all registered.
  void Start();
  // SIGKILLs the JobManager and starts a new one on the same port.
  // SIGKILLs the JobManager and starts it again with the same arguments
  // plus `extra` (e.g. -D settings for this start only).
  void RestartJobManager(const std::vector<std::string>& extra = {});
  // SIGKILLs TaskManager `i` and waits for the process to be gone.
  void KillTaskManager(int i);
  // Starts one more TaskManager (as systemd would start a replacement) and
  // returns its index; it registers on its own.
  int StartTaskManager(const std::vector<std::string>& extra = {});

  std::string jobmanager_address() const;
  // The JobManager's HTTP port (rest.port, a free one).
  int rest_port() const { return rest_port_; }
  // GET http://127.0.0.1:<rest_port><path>, with the cluster's token if any.
  HttpResult RestGet(const std::string& path) const;
  const std::string& dir() const { return dir_; }
  Subprocess& jobmanager() { return *jobmanager_; }
  Subprocess& taskmanager(int i) { return *taskmanagers_.at(i); }
  std::string taskmanager_id(int i) const;

  // Runs `weir --jobmanager ADDR ARGS...`.
  CommandResult Weir(const std::vector<std::string>& args, absl::Duration timeout = absl::Seconds(120));
  // Runs `weir --json ...` and parses its stdout (null on failure).
  nlohmann::json WeirJson(const std::vector<std::string>& args);

  // Submits a job; returns its id, or "" with the error in `*error`.
  std::string Submit(const std::string& binary, const std::vector<std::string>& submit_options,
                     const std::vector<std::string>& job_args, std::string* error);

  // Polls `weir --json status JOB` until the job reaches a terminal state or
  // `timeout` passes; returns the last status (null if never readable).
  nlohmann::json WaitForJobEnd(const std::string& job_id, absl::Duration timeout = absl::Seconds(300));

  // Every log of the cluster, concatenated, for failure messages.
  std::string Logs() const;

 private:
  Options options_;
  std::string dir_;
  int port_ = 0;
  int rest_port_ = 0;
  std::vector<std::string> jobmanager_argv_;
  int jobmanager_starts_ = 0;
  std::unique_ptr<Subprocess> jobmanager_;
  std::vector<std::unique_ptr<Subprocess>> taskmanagers_;
  std::vector<std::string> common_args_;
};

}  // namespace weir::testing
