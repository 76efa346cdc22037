#include "tests/testing/local_cluster.h"

#include <signal.h>

#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace weir::testing {

LocalCluster::LocalCluster(Options options) : options_(std::move(options)) {
  dir_ = MakeTempDir("weir-local-cluster");
  port_ = FreePort();
  rest_port_ = FreePort();
}

HttpResult LocalCluster::RestGet(const std::string& path) const {
  return HttpGet(rest_port_, path, options_.auth_token);
}

namespace {

// Whether the test that owns the cluster has failed so far, or is failing by
// an exception that is unwinding the stack now (gtest records it only once
// it has caught it, after the destructors ran). Outside a test (a cluster of
// a whole suite, or of a benchmark), whether any test failed.
bool TestFailing() {
  if (std::uncaught_exceptions() > 0) return true;
  const ::testing::UnitTest* unit = ::testing::UnitTest::GetInstance();
  const ::testing::TestInfo* test = unit->current_test_info();
  return test != nullptr ? test->result()->Failed() : unit->Failed();
}

}  // namespace

LocalCluster::~LocalCluster() {
  // The daemons first: nothing writes into the directory once they are gone.
  taskmanagers_.clear();
  jobmanager_.reset();
  if (TestFailing()) {
    std::cerr << "LocalCluster: kept " << dir_
              << " (daemon logs, HA store, io.tmp.dirs) of the failed test\n";
    return;
  }
  std::error_code error;
  std::filesystem::remove_all(dir_, error);
  if (error) std::cerr << "LocalCluster: could not remove " << dir_ << ": " << error.message() << "\n";
}

std::string LocalCluster::jobmanager_address() const { return absl::StrCat("127.0.0.1:", port_); }

std::string LocalCluster::taskmanager_id(int i) const { return absl::StrCat("tm-", i); }

void LocalCluster::Start() {
  std::vector<std::string> common = {absl::StrCat("-Djobmanager.rpc.port=", port_)};
  if (!options_.auth_token.empty()) {
    std::ofstream(dir_ + "/token") << options_.auth_token << "\n";
    common.push_back(absl::StrCat("-Dsecurity.auth.token-file=", dir_, "/token"));
  }
  common.insert(common.end(), options_.config.begin(), options_.config.end());
  std::vector<std::string> jm = {BinDir() + "/weir-jobmanager", absl::StrCat("-Dhigh-availability.storageDir=", dir_, "/ha"),
                                 absl::StrCat("-Drest.port=", rest_port_)};
  jm.insert(jm.end(), common.begin(), common.end());
  jobmanager_argv_ = jm;
  jobmanager_ = std::make_unique<Subprocess>(jm, absl::StrCat(dir_, "/jobmanager-", ++jobmanager_starts_, ".log"));
  common_args_ = common;
  for (int i = 0; i < options_.taskmanagers; ++i) StartTaskManager();
  bool up = WaitFor(
      [&] {
        nlohmann::json cluster = WeirJson({"cluster"});
        return !cluster.is_null() && static_cast<int>(cluster["taskmanagers"].size()) == options_.taskmanagers;
      },
      absl::Seconds(60));
  if (!up) throw std::runtime_error(absl::StrCat("the local cluster in ", dir_, " did not come up:\n", Logs()));
}

void LocalCluster::RestartJobManager(const std::vector<std::string>& extra) {
  jobmanager_->Signal(SIGKILL);
  jobmanager_->Wait(absl::Seconds(30));
  std::vector<std::string> argv = jobmanager_argv_;
  argv.insert(argv.end(), extra.begin(), extra.end());
  jobmanager_ = std::make_unique<Subprocess>(argv,
                                             absl::StrCat(dir_, "/jobmanager-", ++jobmanager_starts_, ".log"));
}

void LocalCluster::KillTaskManager(int i) {
  taskmanagers_.at(i)->Signal(SIGKILL);
  taskmanagers_.at(i)->Wait(absl::Seconds(30));
}

int LocalCluster::StartTaskManager(const std::vector<std::string>& extra) {
  const int i = static_cast<int>(taskmanagers_.size());
  std::vector<std::string> tm = {BinDir() + "/weir-taskmanager", absl::StrCat("-Dtaskmanager.resource-id=", taskmanager_id(i)),
                                 absl::StrCat("-Dtaskmanager.numberOfTaskSlots=", options_.slots_per_taskmanager),
                                 absl::StrCat("-Dio.tmp.dirs=", dir_)};
  tm.insert(tm.end(), common_args_.begin(), common_args_.end());
  tm.insert(tm.end(), extra.begin(), extra.end());
  taskmanagers_.push_back(std::make_unique<Subprocess>(tm, absl::StrCat(dir_, "/", taskmanager_id(i), ".log")));
  return i;
}

CommandResult LocalCluster::Weir(const std::vector<std::string>& args, absl::Duration timeout) {
  std::vector<std::string> argv = {BinDir() + "/weir", "--jobmanager", jobmanager_address()};
  if (!options_.auth_token.empty()) {
    argv.push_back("--token-file");
    argv.push_back(dir_ + "/token");
  }
  argv.insert(argv.end(), options_.client_config.begin(), options_.client_config.end());
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, timeout);
}

nlohmann::json LocalCluster::WeirJson(const std::vector<std::string>& args) {
  std::vector<std::string> with_json = {"--json"};
  with_json.insert(with_json.end(), args.begin(), args.end());
  CommandResult result = Weir(with_json);
  if (result.exit_code != 0) return nullptr;
  return nlohmann::json::parse(result.out, nullptr, /*allow_exceptions=*/false);
}

std::string LocalCluster::Submit(const std::string& binary, const std::vector<std::string>& submit_options,
                                 const std::vector<std::string>& job_args, std::string* error) {
  std::vector<std::string> args = {"--json", "submit", binary};
  args.insert(args.end(), submit_options.begin(), submit_options.end());
  args.push_back("--");
  args.insert(args.end(), job_args.begin(), job_args.end());
  CommandResult result = Weir(args);
  if (result.exit_code != 0) {
    // --json: the error is {"error": ..., "exit_code": N}.
    if (error != nullptr) {
      nlohmann::json parsed = nlohmann::json::parse(result.err, nullptr, /*allow_exceptions=*/false);
      *error = parsed.is_object() && parsed.contains("error") ? parsed["error"].get<std::string>() : result.err;
    }
    return "";
  }
  return nlohmann::json::parse(result.out)["job_id"];
}

nlohmann::json LocalCluster::WaitForJobEnd(const std::string& job_id, absl::Duration timeout) {
  nlohmann::json last;
  WaitFor(
      [&] {
        nlohmann::json status = WeirJson({"status", job_id});
        if (status.is_null()) return false;
        last = status;
        std::string state = status["state"];
        return state == "FINISHED" || state == "FAILED" || state == "CANCELED";
      },
      timeout, absl::Milliseconds(200));
  return last;
}

std::string LocalCluster::Logs() const {
  std::string out = absl::StrCat("--- jobmanager ---\n", jobmanager_ ? jobmanager_->Log() : "");
  for (size_t i = 0; i < taskmanagers_.size(); ++i) {
    out += absl::StrCat("--- ", taskmanager_id(static_cast<int>(i)), " ---\n", taskmanagers_[i]->Log());
  }
  return out;
}

}  // namespace weir::testing
