// JobManager high availability, end to end: real weir-jobmanager processes
// with high-availability.type etcd against a real etcd (the "etcd" fixture's,
// or one of the test's own), sharing one high-availability.storageDir, a
// real TaskManager and the real `weir` client; leaders are SIGKILLed. One
// case shares nothing: storage in S3, every local directory private.
#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "absl/strings/numbers.h"
#include "common/etcd/etcd_client.h"
#include "common/etcd/leader_retrieval.h"
#include "tests/kafka/kafka_io.h"
#include "tests/kafka/test_kafka.h"
#include "tests/s3/s3_test_server.h"
#include "tests/etcd/etcd_test_server.h"
#include "tests/testing/http_get.h"
#include "tests/testing/process.h"
#include "tests/testing/script_server.h"
#include "weir/v1/job.grpc.pb.h"

namespace weir {
namespace {

using testing::BinDir;
using testing::HttpGet;
using testing::RunCommand;
using testing::Subprocess;
using testing::WaitFor;

constexpr absl::Duration kDeadline = absl::Seconds(60);

// A cluster id of its own per test, so that tests sharing the etcd server
// never see each other's leaders.
std::string NewClusterId() {
  absl::BitGen gen;
  return absl::StrCat("failover-", ::testing::UnitTest::GetInstance()->current_test_info()->name(), "-",
                      absl::Uniform<uint32_t>(gen));
}

// A client of the test's own for the etcd at `endpoint`, to read the
// election's keys as the JobManagers left them.
std::unique_ptr<etcd::EtcdClient> NewEtcdClient(const std::string& endpoint) {
  etcd::EtcdClientOptions options;
  options.endpoints = {endpoint};
  absl::StatusOr<std::unique_ptr<etcd::EtcdClient>> client = etcd::EtcdClient::Create(std::move(options));
  return client.ok() ? *std::move(client) : nullptr;
}

// The keys under `prefix` at etcd revision `revision` (0: now).
absl::StatusOr<etcdserverpb::RangeResponse> RangePrefix(etcd::EtcdClient& client, const std::string& prefix,
                                                        int64_t revision = 0) {
  etcdserverpb::RangeRequest range;
  range.set_key(prefix);
  std::string end = prefix;
  end.back() = static_cast<char>(end.back() + 1);
  range.set_range_end(end);
  range.set_revision(revision);
  return client.Range(range, absl::Now() + absl::Seconds(10));
}

// Every version of the job-store records under `store_prefix` written at
// etcd revision `from` or later (revisions move only with writes: leader
// keys and the store), each with the epoch it was written for.
struct RecordVersion {
  std::string key;
  int64_t revision = 0;
  int64_t written_for_epoch = 0;
  bool final = false;
};
absl::StatusOr<std::vector<RecordVersion>> RecordVersionsSince(etcd::EtcdClient& client,
                                                               const std::string& store_prefix, int64_t from) {
  absl::StatusOr<etcdserverpb::RangeResponse> now = RangePrefix(client, store_prefix);
  if (!now.ok()) return now.status();
  std::vector<RecordVersion> versions;
  for (int64_t revision = from; revision <= now->header().revision(); ++revision) {
    absl::StatusOr<etcdserverpb::RangeResponse> at = RangePrefix(client, store_prefix, revision);
    if (!at.ok()) return at.status();
    for (const mvccpb::KeyValue& kv : at->kvs()) {
      if (kv.mod_revision() != revision) continue;
      v1::StoredJobRecord record;
      if (!record.ParseFromString(kv.value())) return absl::DataLossError(absl::StrCat(kv.key(), " is no record"));
      versions.push_back({kv.key(), revision, record.written_for_epoch(), record.has_final_status()});
    }
  }
  return versions;
}

// The ids N of the lines "job <job> checkpoint N <what>" in `log`.
std::set<int64_t> CheckpointIdsLogged(const std::string& log, const std::string& job, const std::string& what) {
  std::set<int64_t> ids;
  const std::string lead = absl::StrCat("job ", job, " checkpoint ");
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    const size_t at = line.find(lead);
    if (at == absl::string_view::npos) continue;
    absl::string_view rest = line.substr(at + lead.size());
    const size_t space = rest.find(' ');
    int64_t id = 0;
    if (space == absl::string_view::npos || !absl::SimpleAtoi(rest.substr(0, space), &id)) continue;
    if (absl::StartsWith(rest.substr(space + 1), what)) ids.insert(id);
  }
  return ids;
}

// One JobManager of the cluster: its ports stay when it is started again.
struct JobManagerSeat {
  int rpc_port = 0;
  int rest_port = 0;
  std::unique_ptr<Subprocess> process;
  int starts = 0;
  std::string address() const { return absl::StrCat("127.0.0.1:", rpc_port); }
};

class JobManagerFailoverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("weir-jm-failover");
    cluster_id_ = NewClusterId();
  }

  void TearDown() override {
    for (JobManagerSeat& jm : jms_) jm.process.reset();
    taskmanagers_.clear();
    if (!HasFailure()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    } else {
      std::cerr << "kept " << dir_ << "\n";
    }
  }

  void AddSeats(int count) {
    for (int i = 0; i < count; ++i) jms_.push_back(JobManagerSeat{testing::FreePort(), testing::FreePort()});
  }

  std::vector<std::string> HaConfig(const std::string& etcd) const {
    return {"-Dhigh-availability.type=etcd", absl::StrCat("-Dhigh-availability.etcd.endpoints=", etcd),
            absl::StrCat("-Dhigh-availability.cluster-id=", cluster_id_)};
  }

  void StartJobManager(int i, const std::string& etcd, const std::vector<std::string>& extra = {}) {
    JobManagerSeat& jm = jms_[i];
    std::vector<std::string> argv = {BinDir() + "/weir-jobmanager",
                                     absl::StrCat("-Djobmanager.rpc.port=", jm.rpc_port),
                                     absl::StrCat("-Drest.port=", jm.rest_port), "-Dlog.format=json",
                                     // One directory for all of them: the election decides who writes.
                                     absl::StrCat("-Dhigh-availability.storageDir=", dir_, "/ha")};
    for (std::string& key : HaConfig(etcd)) argv.push_back(std::move(key));
    argv.insert(argv.end(), extra.begin(), extra.end());
    jm.process = std::make_unique<Subprocess>(argv, absl::StrCat(dir_, "/jobmanager-", i, "-", ++jm.starts, ".log"));
  }

  // A TaskManager whose jobmanager.rpc.port is JobManager `configured`'s;
  // with `etcd` set it finds the leader there instead.
  void StartTaskManager(const std::string& id, int configured, const std::string& etcd) {
    std::vector<std::string> argv = {BinDir() + "/weir-taskmanager",
                                     absl::StrCat("-Djobmanager.rpc.port=", jms_[configured].rpc_port),
                                     absl::StrCat("-Dtaskmanager.resource-id=", id),
                                     "-Dtaskmanager.numberOfTaskSlots=1", absl::StrCat("-Dio.tmp.dirs=", dir_)};
    if (!etcd.empty()) {
      for (std::string& key : HaConfig(etcd)) argv.push_back(std::move(key));
    }
    taskmanagers_.push_back(std::make_unique<Subprocess>(argv, absl::StrCat(dir_, "/", id, ".log")));
  }

  testing::HttpResult Readyz(int i) const { return HttpGet(jms_[i].rest_port, "/readyz"); }

  // Until the leader, asked through JobManager `via`, has `n` TaskManagers:
  // a submission checks the free slots at once.
  bool WaitForTaskManagers(int via, size_t n) {
    return WaitFor(
        [&] {
          nlohmann::json cluster = Weir(via, {"cluster"});
          return !cluster.is_null() && cluster["taskmanagers"].size() == n;
        },
        kDeadline);
  }

  // The seat whose JobManager answers /readyz 200, or -1.
  int Leader() const {
    for (size_t i = 0; i < jms_.size(); ++i) {
      if (jms_[i].process != nullptr && Readyz(static_cast<int>(i)).status == 200) return static_cast<int>(i);
    }
    return -1;
  }

  // `weir --json ARGS` against JobManager `i`; null on failure.
  nlohmann::json Weir(int i, std::vector<std::string> args) {
    std::vector<std::string> argv = {BinDir() + "/weir", "--jobmanager", jms_[i].address(), "--json"};
    argv.insert(argv.end(), args.begin(), args.end());
    testing::CommandResult result = RunCommand(argv);
    if (result.exit_code != 0) {
      last_error_ = result.err;
      return nullptr;
    }
    return nlohmann::json::parse(result.out, nullptr, /*allow_exceptions=*/false);
  }

  // GET on JobManager `i`'s REST port, parsed; null unless 200.
  nlohmann::json Rest(int i, const std::string& path) const {
    testing::HttpResult result = HttpGet(jms_[i].rest_port, path);
    if (result.status != 200) return nullptr;
    return nlohmann::json::parse(result.body, nullptr, /*allow_exceptions=*/false);
  }

  std::string Logs() const {
    std::string all;
    for (const JobManagerSeat& jm : jms_) {
      if (jm.process != nullptr) absl::StrAppend(&all, "--- ", jm.process->log_path(), "\n", jm.process->Log());
    }
    for (const auto& tm : taskmanagers_) absl::StrAppend(&all, "--- ", tm->log_path(), "\n", tm->Log());
    return all;
  }

  std::string dir_;
  std::string cluster_id_;
  std::vector<JobManagerSeat> jms_;
  std::vector<std::unique_ptr<Subprocess>> taskmanagers_;
  std::string last_error_;
};

// Two JobManagers on one storage directory: one leads, the other is a
// standby that refuses with the leader's address; the TaskManagers (one
// finding the leader in etcd, one following the standby's redirect) and
// `weir` reach the leader. Then, three times: SIGKILL the leader; the
// standby takes over, the TaskManagers register with it, and the job runs
// again from its newest checkpoint; the killed one comes back as a standby.
// The TaskManager that follows redirects knows only the address it was
// given: once that JobManager is the one killed, it has nobody to ask. So
// after the first round it is replaced by one that asks etcd.
TEST_F(JobManagerFailoverTest, StandbyTakesOverTheJobWhenTheLeaderIsKilled) {
  const std::string etcd = testing::SharedEtcdEndpoint();
  ASSERT_FALSE(etcd.empty()) << "WEIR_TEST_ETCD_DIR is not set: run through ctest (the etcd fixture)";
  AddSeats(2);
  StartJobManager(0, etcd);
  ASSERT_TRUE(WaitFor([&] { return Readyz(0).status == 200; }, kDeadline)) << Logs();
  StartJobManager(1, etcd);
  // The standby serves its probes at once and names the leader.
  ASSERT_TRUE(WaitFor([&] { return Readyz(1).status == 503; }, kDeadline)) << Logs();
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(Readyz(1).body, jms_[0].address()); }, kDeadline))
      << Readyz(1).body;
  EXPECT_TRUE(absl::StartsWith(Readyz(1).body, "standby; leader ")) << Readyz(1).body;

  // A job RPC at the standby: refused, with the leader in the metadata.
  {
    auto stub = v1::JobService::NewStub(
        grpc::CreateChannel(jms_[1].address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::ListJobsResponse response;
    grpc::Status status = stub->List(&context, v1::ListJobsRequest(), &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << status.error_message();
    EXPECT_TRUE(absl::StrContains(status.error_message(), jms_[0].address())) << status.error_message();
    auto leader = context.GetServerTrailingMetadata().find("weir-leader");
    ASSERT_NE(leader, context.GetServerTrailingMetadata().end());
    EXPECT_EQ(std::string(leader->second.data(), leader->second.size()), jms_[0].address());
  }

  // Both TaskManagers are configured with the standby's address.
  StartTaskManager("tm-etcd", /*configured=*/1, etcd);
  StartTaskManager("tm-redirected", /*configured=*/1, /*etcd=*/"");
  auto members = [&](int via) {
    std::vector<std::string> ids;
    nlohmann::json cluster = Weir(via, {"cluster"});
    if (cluster.is_null()) return ids;
    for (const auto& tm : cluster["taskmanagers"]) ids.push_back(tm["id"]);
    std::sort(ids.begin(), ids.end());
    return ids;
  };
  std::vector<std::string> both = {"tm-etcd", "tm-redirected"};
  // `weir` given the standby follows it to the leader.
  ASSERT_TRUE(WaitFor([&] { return members(1) == both; }, kDeadline)) << last_error_ << Logs();
  EXPECT_EQ(Weir(1, {"cluster"})["jobmanager"], jms_[0].address());

  nlohmann::json submitted =
      Weir(1, {"submit", std::string(WEIR_JOBS_DIR) + "/test/timed_numbers.so", "-p", "2",
               "-Dexecution.checkpointing.interval=200ms"});
  ASSERT_FALSE(submitted.is_null()) << last_error_ << Logs();
  const std::string job = submitted["job_id"];

  std::vector<double> takeover_seconds;
  int leader = 0;
  for (int round = 1; round <= 3; ++round) {
    const int standby = 1 - leader;
    // Running at the leader, with checkpoints completed in this leadership.
    int64_t newest = 0;
    ASSERT_TRUE(WaitFor(
        [&] {
          nlohmann::json status = Rest(leader, absl::StrCat("/jobs/", job));
          nlohmann::json checkpoints = Rest(leader, absl::StrCat("/jobs/", job, "/checkpoints"));
          if (status.is_null() || checkpoints.is_null() || status["state"] != "RUNNING") return false;
          const nlohmann::json& completed = checkpoints["latest"]["completed"];
          if (completed.is_null()) return false;
          const nlohmann::json& restored = checkpoints["latest"]["restored"];
          const int64_t restored_id = restored.is_null() ? 0 : restored["id"].get<int64_t>();
          newest = completed["id"];
          return newest >= restored_id + 2;
        },
        kDeadline))
        << "round " << round << Logs();
    ASSERT_EQ(Readyz(standby).status, 503) << Readyz(standby).body;

    const absl::Time killed = absl::Now();
    jms_[leader].process->Signal(SIGKILL);
    ASSERT_TRUE(jms_[leader].process->Wait(absl::Seconds(10)).has_value());
    // RUNNING again under the standby, restored from a checkpoint at least
    // as new as the newest one seen completed before the kill.
    nlohmann::json restored;
    ASSERT_TRUE(WaitFor(
        [&] {
          nlohmann::json status = Rest(standby, absl::StrCat("/jobs/", job));
          if (status.is_null() || status["state"] != "RUNNING") return false;
          nlohmann::json checkpoints = Rest(standby, absl::StrCat("/jobs/", job, "/checkpoints"));
          if (checkpoints.is_null()) return false;
          restored = checkpoints["latest"]["restored"];
          return true;
        },
        kDeadline, absl::Milliseconds(20)))
        << "round " << round << Logs();
    takeover_seconds.push_back(absl::ToDoubleSeconds(absl::Now() - killed));
    ASSERT_FALSE(restored.is_null()) << "round " << round << ": the job started without restoring a checkpoint";
    EXPECT_GE(restored["id"].get<int64_t>(), newest) << "round " << round;
    EXPECT_EQ(Readyz(standby).status, 200);
    // Both TaskManagers run its tasks again: registered with the new leader.
    EXPECT_TRUE(WaitFor([&] { return members(standby) == both; }, kDeadline)) << Logs();
    if (round == 1) {
      // Its configured JobManager is the next one killed (see above).
      taskmanagers_[1]->Signal(SIGKILL);
      ASSERT_TRUE(taskmanagers_[1]->Wait(absl::Seconds(10)).has_value());
      StartTaskManager("tm-etcd-2", /*configured=*/1, etcd);
      both = {"tm-etcd", "tm-etcd-2"};
      ASSERT_TRUE(WaitFor([&] { return members(standby) == both; }, kDeadline)) << Logs();
    }

    // The killed JobManager comes back as a standby of the new leader.
    StartJobManager(leader, etcd);
    ASSERT_TRUE(WaitFor([&] { return absl::StrContains(Readyz(leader).body, jms_[standby].address()); },
                        kDeadline))
        << Readyz(leader).body << Logs();
    EXPECT_EQ(Readyz(leader).status, 503);
    leader = standby;
  }
  std::vector<std::string> seconds;
  for (double s : takeover_seconds) seconds.push_back(absl::StrFormat("%.2f", s));
  // The figure docs/operations.md quotes; not asserted (no timing thresholds).
  std::cout << "leader SIGKILL -> job RUNNING under the new leader: " << absl::StrJoin(seconds, " s, ") << " s\n";
  // The job ran on the whole time: nothing ended it.
  nlohmann::json status = Rest(leader, absl::StrCat("/jobs/", job));
  EXPECT_EQ(status["state"], "RUNNING");

  // A leader stopped with SIGTERM leaves the election (its lease revoked):
  // the standby takes over, and the job goes on there.
  const int standby = 1 - leader;
  const absl::Time stopped = absl::Now();
  jms_[leader].process->Signal(SIGTERM);
  ASSERT_TRUE(WaitFor(
      [&] {
        nlohmann::json job_status = Rest(standby, absl::StrCat("/jobs/", job));
        return !job_status.is_null() && job_status["state"] == "RUNNING";
      },
      kDeadline, absl::Milliseconds(20)))
      << Logs();
  std::cout << "leader SIGTERM -> job RUNNING under the new leader: "
            << absl::StrFormat("%.2f", absl::ToDoubleSeconds(absl::Now() - stopped)) << " s\n";
  EXPECT_EQ(jms_[leader].process->Wait(absl::Seconds(30)), 0);
  EXPECT_TRUE(absl::StrContains(jms_[leader].process->Log(), "gives up leadership")) << jms_[leader].process->Log();
}

// A leader frozen (SIGSTOP) past its lease, and resumed (SIGCONT) once the
// standby leads and runs the job: from the moment the standby was granted,
// the old leader triggers, completes and notifies no checkpoint, and nothing
// it writes reaches the job store. The evidence: its log after the resume,
// the job store's history in etcd since the new leader's grant (every
// record version names the epoch it was written for), the checkpoints'
// _metadata against the leaders' logs, and the TaskManagers' logs.
TEST_F(JobManagerFailoverTest, LeaderFrozenPastItsLeaseDoesNothingOnceResumed) {
  const std::string etcd = testing::SharedEtcdEndpoint();
  ASSERT_FALSE(etcd.empty()) << "WEIR_TEST_ETCD_DIR is not set: run through ctest (the etcd fixture)";
  std::unique_ptr<etcd::EtcdClient> client = NewEtcdClient(etcd);
  ASSERT_NE(client, nullptr);
  const std::string leader_key = etcd::LeaderKey(cluster_id_);
  const std::string store_prefix = absl::StrCat("/weir/", cluster_id_, "/store/");
  auto epoch_in_etcd = [&]() -> int64_t {
    absl::StatusOr<etcdserverpb::RangeResponse> leader = RangePrefix(*client, leader_key);
    return leader.ok() && !leader->kvs().empty() ? leader->kvs(0).create_revision() : 0;
  };

  AddSeats(2);
  StartJobManager(0, etcd);
  ASSERT_TRUE(WaitFor([&] { return Readyz(0).status == 200; }, kDeadline)) << Logs();
  StartJobManager(1, etcd);
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(Readyz(1).body, jms_[0].address()); }, kDeadline)) << Logs();
  StartTaskManager("tm-1", 1, etcd);
  StartTaskManager("tm-2", 1, etcd);
  ASSERT_TRUE(WaitForTaskManagers(1, 2)) << last_error_ << Logs();
  nlohmann::json submitted =
      Weir(1, {"submit", std::string(WEIR_JOBS_DIR) + "/test/timed_numbers.so", "-p", "2",
               "-Dexecution.checkpointing.interval=200ms"});
  ASSERT_FALSE(submitted.is_null()) << last_error_ << Logs();
  const std::string job = submitted["job_id"];
  // Running with checkpoints completed by `jm` since its restore.
  int64_t newest = 0;
  auto checkpointing_at = [&](int jm) {
    nlohmann::json status = Rest(jm, absl::StrCat("/jobs/", job));
    nlohmann::json checkpoints = Rest(jm, absl::StrCat("/jobs/", job, "/checkpoints"));
    if (status.is_null() || checkpoints.is_null() || status["state"] != "RUNNING") return false;
    const nlohmann::json& completed = checkpoints["latest"]["completed"];
    if (completed.is_null()) return false;
    const nlohmann::json& restored = checkpoints["latest"]["restored"];
    newest = completed["id"];
    return newest >= (restored.is_null() ? 0 : restored["id"].get<int64_t>()) + 2;
  };
  ASSERT_TRUE(WaitFor([&] { return checkpointing_at(0); }, kDeadline)) << Logs();
  const int64_t old_epoch = epoch_in_etcd();
  ASSERT_GT(old_epoch, 0);

  // Frozen: what its log holds now is all it did before.
  jms_[0].process->Signal(SIGSTOP);
  const std::string log_before_freeze = jms_[0].process->Log();
  const int64_t newest_before_freeze = newest;
  ASSERT_TRUE(WaitFor([&] { return Readyz(1).status == 200; }, kDeadline)) << Logs();
  const int64_t new_epoch = epoch_in_etcd();
  ASSERT_GT(new_epoch, old_epoch);
  ASSERT_TRUE(WaitFor([&] { return checkpointing_at(1); }, kDeadline)) << Logs();
  nlohmann::json restored = Rest(1, absl::StrCat("/jobs/", job, "/checkpoints"))["latest"]["restored"];
  ASSERT_FALSE(restored.is_null()) << "the new leader restored no checkpoint";
  EXPECT_GE(restored["id"].get<int64_t>(), newest_before_freeze);
  const int attempt = Rest(1, absl::StrCat("/jobs/", job))["attempt"];
  std::vector<size_t> tm_logs_at_resume;
  for (const auto& tm : taskmanagers_) tm_logs_at_resume.push_back(tm->Log().size());

  // Resumed: it finds its lease gone and steps down. The new leader goes on
  // checkpointing past that, so anything the old one did meanwhile shows.
  jms_[0].process->Signal(SIGCONT);
  auto log_since_freeze = [&] { return jms_[0].process->Log().substr(log_before_freeze.size()); };
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(log_since_freeze(), "is a standby of cluster"); }, kDeadline))
      << Logs();
  const int64_t after_resume = newest;
  ASSERT_TRUE(WaitFor([&] { return checkpointing_at(1) && newest >= after_resume + 2; }, kDeadline)) << Logs();
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(Readyz(0).body, jms_[1].address()); }, kDeadline))
      << Readyz(0).body;

  // 1. The old leader's log since the freeze: it lost the leadership, and
  //    triggered and completed (so notified) no checkpoint: its threads wake
  //    with the election's, but every trigger and completion first checks
  //    that the lease is fresh.
  const std::string resumed_log = log_since_freeze();
  EXPECT_TRUE(absl::StrContains(resumed_log, "lost the leadership of cluster")) << resumed_log;
  EXPECT_TRUE(CheckpointIdsLogged(resumed_log, job, "triggered").empty()) << resumed_log;
  EXPECT_TRUE(CheckpointIdsLogged(resumed_log, job, "completed").empty()) << resumed_log;
  // And no TaskManager had a checkpoint call of the old epoch to refuse.
  // (A cancellation can come: the old leader's ResourceManager finds the
  // TaskManagers silent since the freeze, and its job master cancels their
  // tasks in the moment before the revocation; the TaskManagers refuse it.)
  for (size_t i = 0; i < taskmanagers_.size(); ++i) {
    const std::string since = taskmanagers_[i]->Log().substr(tm_logs_at_resume[i]);
    for (const char* call : {"a checkpoint trigger", "a checkpoint notification"}) {
      EXPECT_FALSE(absl::StrContains(since, absl::StrCat("refused ", call, " from a JobManager with leader epoch ",
                                                         old_epoch, ":")))
          << since;
    }
  }

  // 2. The job store's history since the new leader's grant: every version
  //    of every record was written for the new epoch, and the job's record
  //    stayed. (Revisions move only with writes: leader keys and the store.)
  absl::StatusOr<etcdserverpb::RangeResponse> now = RangePrefix(*client, store_prefix);
  ASSERT_TRUE(now.ok()) << now.status();
  const std::string record_key = absl::StrCat(store_prefix, "jobs/", job);
  int versions_since_grant = 0;
  for (int64_t revision = new_epoch; revision <= now->header().revision(); ++revision) {
    absl::StatusOr<etcdserverpb::RangeResponse> at = RangePrefix(*client, store_prefix, revision);
    ASSERT_TRUE(at.ok()) << at.status();
    bool has_job = false;
    for (const mvccpb::KeyValue& kv : at->kvs()) {
      has_job = has_job || kv.key() == record_key;
      if (kv.mod_revision() != revision) continue;
      ++versions_since_grant;
      v1::StoredJobRecord record;
      ASSERT_TRUE(record.ParseFromString(kv.value())) << kv.key();
      EXPECT_EQ(record.written_for_epoch(), new_epoch)
          << kv.key() << " at revision " << revision << ": written for epoch " << record.written_for_epoch();
      EXPECT_FALSE(record.has_final_status()) << kv.key() << " at revision " << revision;
    }
    EXPECT_TRUE(has_job) << "job " << job << "'s record is gone at revision " << revision;
  }
  // The new leader's own write (the attempt it started) is there to see.
  EXPECT_GE(versions_since_grant, 1);
  v1::StoredJobRecord record;
  for (const mvccpb::KeyValue& kv : now->kvs()) {
    if (kv.key() == record_key) {
      ASSERT_TRUE(record.ParseFromString(kv.value()));
    }
  }
  EXPECT_EQ(record.last_attempt(), attempt);

  // 3. Every checkpoint with a _metadata was completed by the old leader
  //    before the freeze or by the new one.
  const std::set<int64_t> before = CheckpointIdsLogged(log_before_freeze, job, "completed");
  const std::set<int64_t> by_new_leader = CheckpointIdsLogged(jms_[1].process->Log(), job, "completed");
  ASSERT_FALSE(by_new_leader.empty());
  int metadata_files = 0;
  std::error_code ec;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::filesystem::path(dir_) / "ha" / "checkpoints" / job, ec)) {
    const std::string name = entry.path().filename().string();
    int64_t id = 0;
    if (!absl::StartsWith(name, "chk-") || !absl::SimpleAtoi(name.substr(4), &id)) continue;
    if (!std::filesystem::exists(entry.path() / "_metadata")) continue;
    ++metadata_files;
    EXPECT_TRUE(before.count(id) == 1 || by_new_leader.count(id) == 1)
        << "checkpoint " << id << " has a _metadata neither leader's log accounts for" << Logs();
  }
  EXPECT_GE(metadata_files, 1) << ec.message();

  // 4. No TaskManager took a call from the old epoch or registered with it
  //    after the resume (a refusal is logged, and is fine).
  for (size_t i = 0; i < taskmanagers_.size(); ++i) {
    const std::string since = taskmanagers_[i]->Log().substr(tm_logs_at_resume[i]);
    EXPECT_FALSE(absl::StrContains(since, absl::StrCat("(leader epoch ", old_epoch, ")"))) << since;
    EXPECT_FALSE(absl::StrContains(since, absl::StrCat("has leader epoch ", old_epoch, ", below"))) << since;
  }

  // The job runs on under the new leader, in the attempt it started.
  nlohmann::json status = Rest(1, absl::StrCat("/jobs/", job));
  EXPECT_EQ(status["state"], "RUNNING");
  EXPECT_EQ(status["attempt"], attempt);
  std::cout << "old leader: no trigger or completion after its resume; " << versions_since_grant
            << " job-store record version(s) since the new grant, all the new leader's\n";
}

// A leader stopped (here by itself, at the fault-injection point) in the
// middle of a job-store write: it read the job's record and is about to send
// the new attempt. A standby takes over and runs the job; then the old
// leader is resumed and its write goes out, before its own lease check can
// revoke anything. etcd refuses it: no version of the record since the new
// leader's grant was written for the old epoch.
TEST_F(JobManagerFailoverTest, LeaderFrozenInAJobStoreWriteIsRefusedByEtcdWhenResumed) {
  const std::string etcd = testing::SharedEtcdEndpoint();
  ASSERT_FALSE(etcd.empty()) << "WEIR_TEST_ETCD_DIR is not set: run through ctest (the etcd fixture)";
  std::unique_ptr<etcd::EtcdClient> client = NewEtcdClient(etcd);
  ASSERT_NE(client, nullptr);
  const std::string store_prefix = absl::StrCat("/weir/", cluster_id_, "/store/");
  auto epoch_in_etcd = [&]() -> int64_t {
    absl::StatusOr<etcdserverpb::RangeResponse> leader = RangePrefix(*client, etcd::LeaderKey(cluster_id_));
    return leader.ok() && !leader->kvs().empty() ? leader->kvs(0).create_revision() : 0;
  };
  AddSeats(2);
  StartJobManager(0, etcd, {"-Dtest.fault-injection.point=jobmanager-stop-before-store-write"});
  ASSERT_TRUE(WaitFor([&] { return Readyz(0).status == 200; }, kDeadline)) << Logs();
  StartJobManager(1, etcd);
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(Readyz(1).body, jms_[0].address()); }, kDeadline)) << Logs();
  StartTaskManager("tm-1", 1, etcd);
  StartTaskManager("tm-2", 1, etcd);
  ASSERT_TRUE(WaitForTaskManagers(1, 2)) << last_error_ << Logs();
  const int64_t old_epoch = epoch_in_etcd();
  ASSERT_GT(old_epoch, 0);

  // The submission is stored; the first attempt's write stops the leader.
  testing::CommandResult submit_result;
  std::thread submit([&] {
    submit_result = RunCommand({BinDir() + "/weir", "--jobmanager", jms_[0].address(), "--json", "submit",
                                std::string(WEIR_JOBS_DIR) + "/test/timed_numbers.so", "-p", "2",
                                "-Dexecution.checkpointing.interval=200ms"});
  });
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(jms_[0].process->Log(), "FAULT INJECTION: stopping"); },
                      kDeadline))
      << Logs();
  const std::string log_at_stop = jms_[0].process->Log();
  // The standby leads and runs the stored job.
  std::string job;
  ASSERT_TRUE(WaitFor(
      [&] {
        nlohmann::json jobs = Rest(1, "/jobs");
        if (jobs.is_null() || jobs["jobs"].size() != 1) return false;
        job = jobs["jobs"][0]["id"];
        nlohmann::json checkpoints = Rest(1, absl::StrCat("/jobs/", job, "/checkpoints"));
        return jobs["jobs"][0]["status"] == "RUNNING" && !checkpoints.is_null() &&
               !checkpoints["latest"]["completed"].is_null();
      },
      kDeadline))
      << Logs();
  const int64_t new_epoch = epoch_in_etcd();
  ASSERT_GT(new_epoch, old_epoch);

  // Resumed: its write goes to etcd for the old epoch, then it steps down.
  jms_[0].process->Signal(SIGCONT);
  auto resumed_log = [&] { return jms_[0].process->Log().substr(log_at_stop.size()); };
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(resumed_log(), "is a standby of cluster"); }, kDeadline))
      << Logs();
  submit.join();
  EXPECT_TRUE(WaitFor([&] { return absl::StrContains(resumed_log(), "cannot persist attempt 1"); }, kDeadline))
      << resumed_log();
  EXPECT_TRUE(absl::StrContains(resumed_log(), absl::StrCat("fenced: epoch ", old_epoch, " no longer leads")))
      << resumed_log();

  absl::StatusOr<std::vector<RecordVersion>> versions = RecordVersionsSince(*client, store_prefix, new_epoch);
  ASSERT_TRUE(versions.ok()) << versions.status();
  EXPECT_FALSE(versions->empty()) << "the new leader's attempt is stored";
  for (const RecordVersion& v : *versions) {
    EXPECT_EQ(v.written_for_epoch, new_epoch) << v.key << " at revision " << v.revision;
    EXPECT_FALSE(v.final) << v.key << " at revision " << v.revision;
  }
  // The job goes on under the new leader, in its first attempt there.
  nlohmann::json status = Rest(1, absl::StrCat("/jobs/", job));
  EXPECT_EQ(status["state"], "RUNNING");
  EXPECT_EQ(status["attempt"], 1);
  std::cout << "weir submit to the frozen leader, once resumed: exit " << submit_result.exit_code << " "
            << submit_result.out << submit_result.err << "\n";
}

// etcd is down when the JobManager starts: it serves as a standby, says why
// in its log, and leads once etcd is up.
TEST_F(JobManagerFailoverTest, JobManagerWaitsForAnUnreachableEtcd) {
  auto server = testing::ScriptServer::Start("etcd.sh");
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string etcd = (*server)->address();
  ASSERT_TRUE((*server)->Stop().ok());

  AddSeats(1);
  StartJobManager(0, etcd);
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(jms_[0].process->Log(), "campaign failed, retrying"); },
                      kDeadline))
      << Logs();
  EXPECT_TRUE(jms_[0].process->running());
  testing::HttpResult readyz = Readyz(0);
  EXPECT_EQ(readyz.status, 503);
  EXPECT_EQ(readyz.body, "standby; no leader elected yet\n");
  // `weir` is told that no leader is there to answer.
  nlohmann::json list = Weir(0, {"list"});
  EXPECT_TRUE(list.is_null());
  EXPECT_TRUE(absl::StrContains(last_error_, "no leader is elected yet")) << last_error_;

  ASSERT_TRUE((*server)->Restart().ok());
  ASSERT_TRUE(WaitFor([&] { return Readyz(0).status == 200; }, kDeadline)) << Logs();
  EXPECT_FALSE(Weir(0, {"list"}).is_null()) << last_error_;
}

// The leader loses etcd: it steps down (the job's master stopped, the job
// not marked ended in the store), and once etcd is back it leads again and
// the job runs from its checkpoint.
TEST_F(JobManagerFailoverTest, LeaderThatLosesEtcdStepsDownAndLeadsAgainWhenItReturns) {
  auto server = testing::ScriptServer::Start("etcd.sh");
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string etcd = (*server)->address();
  AddSeats(1);
  StartJobManager(0, etcd);
  ASSERT_TRUE(WaitFor([&] { return Readyz(0).status == 200; }, kDeadline)) << Logs();
  StartTaskManager("tm-1", 0, etcd);
  StartTaskManager("tm-2", 0, etcd);
  ASSERT_TRUE(WaitForTaskManagers(0, 2)) << last_error_ << Logs();
  nlohmann::json submitted = Weir(0, {"submit", std::string(WEIR_JOBS_DIR) + "/test/timed_numbers.so", "-p", "2",
                                      "-Dexecution.checkpointing.interval=200ms"});
  ASSERT_FALSE(submitted.is_null()) << last_error_ << Logs();
  const std::string job = submitted["job_id"];
  int64_t newest = 0;
  ASSERT_TRUE(WaitFor(
      [&] {
        nlohmann::json status = Rest(0, absl::StrCat("/jobs/", job));
        nlohmann::json checkpoints = Rest(0, absl::StrCat("/jobs/", job, "/checkpoints"));
        if (status.is_null() || checkpoints.is_null() || status["state"] != "RUNNING") return false;
        if (checkpoints["latest"]["completed"].is_null()) return false;
        newest = checkpoints["latest"]["completed"]["id"];
        return newest >= 2;
      },
      kDeadline))
      << Logs();

  ASSERT_TRUE((*server)->Stop().ok());
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(jms_[0].process->Log(), "is a standby of cluster"); },
                      kDeadline))
      << Logs();
  EXPECT_TRUE(absl::StrContains(jms_[0].process->Log(), "lost the leadership of cluster")) << Logs();
  EXPECT_EQ(Readyz(0).status, 503);
  // The job's master stopped: the standby lists no job.
  EXPECT_EQ(HttpGet(jms_[0].rest_port, absl::StrCat("/jobs/", job)).status, 404);

  ASSERT_TRUE((*server)->Restart().ok());
  nlohmann::json restored;
  ASSERT_TRUE(WaitFor(
      [&] {
        nlohmann::json status = Rest(0, absl::StrCat("/jobs/", job));
        if (status.is_null() || status["state"] != "RUNNING") return false;
        restored = Rest(0, absl::StrCat("/jobs/", job, "/checkpoints"))["latest"]["restored"];
        return true;
      },
      kDeadline))
      << Logs();
  ASSERT_FALSE(restored.is_null());
  EXPECT_GE(restored["id"].get<int64_t>(), newest);
  // A step-down does not end the job: its record has no final status.
  std::unique_ptr<etcd::EtcdClient> client = NewEtcdClient(etcd);
  ASSERT_NE(client, nullptr);
  absl::StatusOr<etcdserverpb::RangeResponse> stored =
      RangePrefix(*client, absl::StrCat("/weir/", cluster_id_, "/store/jobs/", job));
  ASSERT_TRUE(stored.ok()) << stored.status();
  ASSERT_EQ(stored->kvs_size(), 1);
  v1::StoredJobRecord record;
  ASSERT_TRUE(record.ParseFromString(stored->kvs(0).value()));
  EXPECT_FALSE(record.has_final_status());
  EXPECT_GE(record.last_attempt(), 2) << "the attempt it started on leading again is stored";
}

// keyed_count from Kafka to Kafka at parallelism 2, checkpoints every
// 300 ms; records arrive before and after the leader is SIGKILLed. The
// standby takes the job over, and the keyed state is exact: the last count
// written for every key is the true number of records with that key (the
// output itself is at-least-once). Registered in ctest as
// jobmanager_failover_kafka_test, with the Kafka fixture too.
TEST_F(JobManagerFailoverTest, KafkaKeyedCountStaysExactAcrossALeaderKill) {
  if (std::getenv("WEIR_TEST_KAFKA_DIR") == nullptr) {
    GTEST_SKIP() << "needs the Kafka fixture: ctest runs it as jobmanager_failover_kafka_test";
  }
  const std::string bootstrap = test::TestKafkaBootstrap();
  ASSERT_FALSE(bootstrap.empty());
  const std::string etcd = testing::SharedEtcdEndpoint();
  ASSERT_FALSE(etcd.empty());
  const std::string in = test::UniqueTopicName("ha-in"), out = test::UniqueTopicName("ha-out");
  ASSERT_TRUE(test::CreateTopic(bootstrap, in, 4).ok());
  ASSERT_TRUE(test::CreateTopic(bootstrap, out, 4).ok());
  AddSeats(2);
  StartJobManager(0, etcd);
  ASSERT_TRUE(WaitFor([&] { return Readyz(0).status == 200; }, kDeadline)) << Logs();
  StartJobManager(1, etcd);
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(Readyz(1).body, jms_[0].address()); }, kDeadline)) << Logs();
  StartTaskManager("tm-1", 1, etcd);
  StartTaskManager("tm-2", 1, etcd);
  ASSERT_TRUE(WaitForTaskManagers(1, 2)) << last_error_ << Logs();
  nlohmann::json submitted =
      Weir(1, {"submit", std::string(WEIR_JOBS_DIR) + "/keyed_count.so", "-p", "2",
               "-Dexecution.checkpointing.interval=300ms", "--", "--brokers", bootstrap, "--input-topic", in,
               "--output-topic", out});
  ASSERT_FALSE(submitted.is_null()) << last_error_ << Logs();
  const std::string job = submitted["job_id"];
  auto running_with_checkpoint = [&](int jm) {
    nlohmann::json status = Rest(jm, absl::StrCat("/jobs/", job));
    nlohmann::json checkpoints = Rest(jm, absl::StrCat("/jobs/", job, "/checkpoints"));
    return !status.is_null() && status["state"] == "RUNNING" && !checkpoints.is_null() &&
           !checkpoints["latest"]["completed"].is_null();
  };
  ASSERT_TRUE(WaitFor([&] { return running_with_checkpoint(0); }, kDeadline)) << Logs();

  std::map<std::string, int64_t> truth;
  auto batch = [&](int first, int n) {
    std::vector<test::KafkaMessage> messages;
    for (int i = first; i < first + n; ++i) {
      std::string value = absl::StrCat("value-", i % 300);
      messages.push_back({absl::StrCat("id-", i), value});
      ++truth[value];
    }
    return messages;
  };
  ASSERT_TRUE(test::ProduceMessages(bootstrap, in, batch(0, 6000)).ok());
  // Some of it counted and checkpointed before the kill.
  ASSERT_TRUE(WaitFor(
      [&] {
        absl::StatusOr<std::vector<test::KafkaMessage>> output = test::ReadTopic(bootstrap, out);
        return output.ok() && !output->empty();
      },
      kDeadline))
      << Logs();
  jms_[0].process->Signal(SIGKILL);
  ASSERT_TRUE(test::ProduceMessages(bootstrap, in, batch(6000, 6000)).ok());
  ASSERT_TRUE(WaitFor([&] { return running_with_checkpoint(1); }, kDeadline)) << Logs();

  auto last_counts = [&] {
    std::map<std::string, int64_t> last;
    absl::StatusOr<std::vector<test::KafkaMessage>> output = test::ReadTopic(bootstrap, out);
    if (!output.ok()) return last;
    std::vector<test::KafkaMessage> messages = *std::move(output);
    test::SortByPosition(&messages);
    for (const test::KafkaMessage& m : messages) {
      int64_t count = 0;
      if (m.key.has_value() && absl::SimpleAtoi(m.value, &count)) last[*m.key] = count;
    }
    return last;
  };
  EXPECT_TRUE(WaitFor([&] { return last_counts() == truth; }, absl::Seconds(90), absl::Seconds(1))) << Logs();
  nlohmann::json checkpoints = Rest(1, absl::StrCat("/jobs/", job, "/checkpoints"));
  ASSERT_FALSE(checkpoints.is_null());
  EXPECT_FALSE(checkpoints["latest"]["restored"].is_null()) << "the new leader restored a checkpoint";
}


// Nothing on a file system shared by two processes: three JobManagers and
// three TaskManagers, each with local directories of its own, and
// high-availability.storageDir, state.checkpoints.dir and
// state.savepoints.dir in a new S3 bucket; etcd elects the leader.
// keyed_count runs from Kafka to Kafka exactly-once at parallelism 3 (a slot
// on every TaskManager), checkpoints every 300 ms. Records arrive before the
// leader is SIGKILLed, after it, and after a TaskManager is SIGKILLed and a
// new one (new directories) takes its place. The committed output is exact:
// for every key, read_committed, the counts 1, 2, ..., n once each, n the
// true number of its records; no transaction stays open; and the test's
// directory holds nothing but the logs and the private directories. Registered in
// ctest as jobmanager_failover_no_shared_dir_test (etcd, S3 and Kafka
// fixtures).
TEST_F(JobManagerFailoverTest, NoDirectorySharedKeyedCountExactlyOnceAcrossLeaderAndTaskManagerKills) {
  if (std::getenv("WEIR_TEST_KAFKA_DIR") == nullptr || std::getenv("WEIR_TEST_S3_DIR") == nullptr) {
    GTEST_SKIP() << "needs the Kafka and S3 fixtures: ctest runs it as jobmanager_failover_no_shared_dir_test";
  }
  const std::string bootstrap = test::TestKafkaBootstrap();
  ASSERT_FALSE(bootstrap.empty());
  const std::string etcd = testing::SharedEtcdEndpoint();
  ASSERT_FALSE(etcd.empty());
  absl::StatusOr<std::string> endpoint = testing::S3TestEndpoint();
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  absl::StatusOr<testing::S3TestBucket> bucket = testing::CreateS3TestBucket("noshared");
  ASSERT_TRUE(bucket.ok()) << bucket.status();
  const std::vector<std::string> s3 = {absl::StrCat("-Ds3.endpoint=", *endpoint), "-Ds3.path.style.access=true",
                                       absl::StrCat("-Ds3.access-key=", testing::kS3TestAccessKey),
                                       absl::StrCat("-Ds3.secret-key=", testing::kS3TestSecretKey)};
  const std::string root = absl::StrCat("s3://", bucket->name);

  // Every local directory handed to a process, to check that none is
  // another's.
  std::vector<std::string> local_dirs;
  AddSeats(3);
  auto start_jobmanager = [&](int i) {
    const std::string tmp = absl::StrCat(dir_, "/jobmanager-", i, "/tmp");
    local_dirs.push_back(tmp);
    std::vector<std::string> argv = {BinDir() + "/weir-jobmanager",
                                     absl::StrCat("-Djobmanager.rpc.port=", jms_[i].rpc_port),
                                     absl::StrCat("-Drest.port=", jms_[i].rest_port), "-Dlog.format=json",
                                     absl::StrCat("-Dio.tmp.dirs=", tmp),
                                     absl::StrCat("-Dhigh-availability.storageDir=", root, "/ha"),
                                     absl::StrCat("-Dstate.checkpoints.dir=", root, "/checkpoints"),
                                     absl::StrCat("-Dstate.savepoints.dir=", root, "/savepoints")};
    for (std::string& key : HaConfig(etcd)) argv.push_back(std::move(key));
    argv.insert(argv.end(), s3.begin(), s3.end());
    jms_[i].process =
        std::make_unique<Subprocess>(argv, absl::StrCat(dir_, "/jobmanager-", i, "-", ++jms_[i].starts, ".log"));
  };
  auto start_taskmanager = [&](const std::string& id) {
    const std::string tmp = absl::StrCat(dir_, "/", id, "/tmp"), state = absl::StrCat(dir_, "/", id, "/state");
    local_dirs.push_back(tmp);
    local_dirs.push_back(state);
    std::vector<std::string> argv = {BinDir() + "/weir-taskmanager",
                                     absl::StrCat("-Djobmanager.rpc.port=", jms_[0].rpc_port),
                                     absl::StrCat("-Dtaskmanager.resource-id=", id),
                                     "-Dtaskmanager.numberOfTaskSlots=1", absl::StrCat("-Dio.tmp.dirs=", tmp),
                                     absl::StrCat("-Dtaskmanager.state.local.root-dirs=", state)};
    for (std::string& key : HaConfig(etcd)) argv.push_back(std::move(key));
    argv.insert(argv.end(), s3.begin(), s3.end());
    taskmanagers_.push_back(std::make_unique<Subprocess>(argv, absl::StrCat(dir_, "/", id, ".log")));
  };

  const std::string in = test::UniqueTopicName("noshared-in"), out = test::UniqueTopicName("noshared-out");
  ASSERT_TRUE(test::CreateTopic(bootstrap, in, 4).ok());
  ASSERT_TRUE(test::CreateTopic(bootstrap, out, 4).ok());
  start_jobmanager(0);
  ASSERT_TRUE(WaitFor([&] { return Readyz(0).status == 200; }, kDeadline)) << Logs();
  start_jobmanager(1);
  start_jobmanager(2);
  for (int i : {1, 2}) {
    ASSERT_TRUE(WaitFor([&] { return absl::StrContains(Readyz(i).body, jms_[0].address()); }, kDeadline)) << Logs();
  }
  for (const char* id : {"tm-1", "tm-2", "tm-3"}) start_taskmanager(id);
  ASSERT_TRUE(WaitForTaskManagers(0, 3)) << last_error_ << Logs();
  nlohmann::json submitted =
      Weir(1, {"submit", std::string(WEIR_JOBS_DIR) + "/keyed_count.so", "-p", "3",
               "-Dexecution.checkpointing.interval=300ms", "--", "--brokers", bootstrap, "--input-topic", in,
               "--output-topic", out, "--guarantee", "exactly-once"});
  ASSERT_FALSE(submitted.is_null()) << last_error_ << Logs();
  const std::string job = submitted["job_id"];
  // RUNNING at `jm` with a checkpoint completed after the one it restored.
  auto running_past_restore = [&](int jm) {
    nlohmann::json status = Rest(jm, absl::StrCat("/jobs/", job));
    nlohmann::json checkpoints = Rest(jm, absl::StrCat("/jobs/", job, "/checkpoints"));
    if (status.is_null() || checkpoints.is_null() || status["state"] != "RUNNING") return false;
    const nlohmann::json& completed = checkpoints["latest"]["completed"];
    const nlohmann::json& restored = checkpoints["latest"]["restored"];
    if (completed.is_null()) return false;
    return restored.is_null() || completed["id"].get<int64_t>() > restored["id"].get<int64_t>();
  };
  ASSERT_TRUE(WaitFor([&] { return running_past_restore(0); }, kDeadline)) << Logs();

  // No process was handed a directory another one has, or one inside it.
  ASSERT_EQ(local_dirs.size(), 3u + 2u * 3u);
  for (size_t a = 0; a < local_dirs.size(); ++a) {
    for (size_t b = 0; b < local_dirs.size(); ++b) {
      if (a == b) continue;
      EXPECT_FALSE(absl::StartsWith(absl::StrCat(local_dirs[a], "/"), absl::StrCat(local_dirs[b], "/")))
          << local_dirs[a] << " is " << local_dirs[b] << " or inside it";
    }
  }

  std::map<std::string, int64_t> truth;
  int produced = 0;
  auto produce = [&](int n) {
    std::vector<test::KafkaMessage> messages;
    for (int i = produced; i < produced + n; ++i) {
      std::string value = absl::StrCat("value-", i % 300);
      messages.push_back({absl::StrCat("id-", i), value});
      ++truth[value];
    }
    produced += n;
    return test::ProduceMessages(bootstrap, in, messages);
  };
  // The committed output (read_committed), per key in the order written.
  auto committed = [&] {
    std::map<std::string, std::vector<int64_t>> counts;
    absl::StatusOr<std::vector<test::KafkaMessage>> output = test::ReadTopic(bootstrap, out);
    if (!output.ok()) return counts;
    std::vector<test::KafkaMessage> messages = *std::move(output);
    test::SortByPosition(&messages);
    for (const test::KafkaMessage& m : messages) {
      int64_t count = 0;
      if (m.key.has_value() && absl::SimpleAtoi(m.value, &count)) counts[*m.key].push_back(count);
    }
    return counts;
  };
  auto records_out = [&] {
    size_t n = 0;
    for (const auto& [key, counts] : committed()) n += counts.size();
    return n;
  };

  // 1. Counted and committed under the first leader, which is SIGKILLed.
  ASSERT_TRUE(produce(4000).ok());
  ASSERT_TRUE(WaitFor([&] { return records_out() > 0; }, kDeadline)) << Logs();
  jms_[0].process->Signal(SIGKILL);
  ASSERT_TRUE(jms_[0].process->Wait(absl::Seconds(10)).has_value());
  ASSERT_TRUE(produce(4000).ok());
  int leader = -1;
  ASSERT_TRUE(WaitFor(
      [&] {
        for (int i : {1, 2}) {
          if (Readyz(i).status == 200 && running_past_restore(i)) leader = i;
        }
        return leader != -1;
      },
      kDeadline))
      << Logs();
  nlohmann::json checkpoints = Rest(leader, absl::StrCat("/jobs/", job, "/checkpoints"));
  ASSERT_FALSE(checkpoints.is_null());
  EXPECT_FALSE(checkpoints["latest"]["restored"].is_null()) << "the new leader restored a checkpoint from S3";
  const int64_t restored_after_leader_kill = checkpoints["latest"]["restored"].value("id", int64_t{0});

  // 2. A TaskManager SIGKILLed; a new one, with directories of its own,
  //    takes its slot.
  taskmanagers_[0]->Signal(SIGKILL);
  ASSERT_TRUE(taskmanagers_[0]->Wait(absl::Seconds(10)).has_value());
  start_taskmanager("tm-4");
  ASSERT_TRUE(WaitFor(
      [&] {
        if (!running_past_restore(leader)) return false;
        nlohmann::json now = Rest(leader, absl::StrCat("/jobs/", job, "/checkpoints"));
        return !now.is_null() && !now["latest"]["restored"].is_null() &&
               now["latest"]["restored"]["id"].get<int64_t>() > restored_after_leader_kill;
      },
      kDeadline))
      << "the job restarts on the new TaskManager from a newer checkpoint" << Logs();
  ASSERT_TRUE(produce(4000).ok());

  // 3. Exact: for every key the counts 1..n, each once, n its true number.
  std::map<std::string, std::vector<int64_t>> expected;
  for (const auto& [key, n] : truth) {
    for (int64_t c = 1; c <= n; ++c) expected[key].push_back(c);
  }
  std::map<std::string, std::vector<int64_t>> got;
  EXPECT_TRUE(WaitFor(
      [&] {
        got = committed();
        return got == expected;
      },
      absl::Seconds(90), absl::Seconds(1)))
      << "keys committed " << got.size() << " of " << expected.size() << Logs();
  for (const auto& [key, counts] : got) {
    const auto want = expected.find(key);
    if (want == expected.end() || want->second != counts) {
      ADD_FAILURE() << key << ": " << counts.size() << " counts committed, last "
                    << (counts.empty() ? 0 : counts.back()) << "; expected 1.." << truth[key];
      break;
    }
  }
  // No transaction left open: read_committed reaches the high watermark.
  absl::StatusOr<std::map<int32_t, int64_t>> stable, high;
  EXPECT_TRUE(WaitFor(
      [&] {
        stable = test::EndOffsets(bootstrap, out, /*read_committed=*/true);
        high = test::EndOffsets(bootstrap, out, /*read_committed=*/false);
        return stable.ok() && high.ok() && *stable == *high;
      },
      kDeadline))
      << "a transaction is still open on " << out;
  // Locally there are only the logs and the private directories: nobody
  // wrote next to them (a local storage or checkpoint directory would be).
  std::set<std::string> expected_entries;
  for (const std::string& dir : local_dirs) {
    expected_entries.insert(std::filesystem::path(dir).parent_path().filename().string());
  }
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    EXPECT_TRUE(expected_entries.count(name) == 1 || absl::EndsWith(name, ".log")) << entry.path();
  }
  ASSERT_FALSE(ec) << ec.message();
  // The checkpoints are in the bucket.
  absl::StatusOr<std::vector<fs::FileInfo>> listed = bucket->fs->List(absl::StrCat("checkpoints/", job));
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_FALSE(listed->empty());
  std::cout << produced << " records, " << records_out() << " committed counts; leader now jobmanager-" << leader
            << "; restored checkpoint " << restored_after_leader_kill << " after the leader kill\n";
}

}  // namespace
}  // namespace weir
