// Cluster membership, end to end: the real weir-jobmanager, weir-taskmanager
// and weir binaries on free ports, killed with real signals.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/strings/str_split.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "weir/v1/cluster.grpc.pb.h"
#include "gtest/gtest.h"
#include "weir/v1/job.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "common/process/proc_status.h"
#include "tests/testing/http_get.h"
#include "tests/testing/local_cluster.h"
#include "tests/testing/process.h"

namespace weir {
namespace {

using testing::BinDir;
using testing::CommandResult;
using testing::RunCommand;
using testing::Subprocess;
using testing::WaitFor;

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("weir-cluster-test");
    jm_port_ = testing::FreePort();
  }

  std::string JobManagerAddress() const { return absl::StrCat("127.0.0.1:", jm_port_); }

  std::unique_ptr<Subprocess> StartJobManager(std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {BinDir() + "/weir-jobmanager", absl::StrCat("-Djobmanager.rpc.port=", jm_port_),
                                     "-Dlog.format=json", absl::StrCat("-Dhigh-availability.storageDir=", dir_, "/ha"),
                                     "-Drest.port=0"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return std::make_unique<Subprocess>(argv, absl::StrCat(dir_, "/jobmanager-", ++jm_starts_, ".log"));
  }

  std::unique_ptr<Subprocess> StartTaskManager(const std::string& id, int slots,
                                               std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {BinDir() + "/weir-taskmanager", absl::StrCat("-Djobmanager.rpc.port=", jm_port_),
                                     absl::StrCat("-Dtaskmanager.resource-id=", id),
                                     absl::StrCat("-Dtaskmanager.numberOfTaskSlots=", slots),
                                     // Its own local state directory: the default (/tmp/weir-state-<id>) is
                                     // locked by a TaskManager of the same id that may still be exiting.
                                     absl::StrCat("-Dio.tmp.dirs=", dir_)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return std::make_unique<Subprocess>(argv, absl::StrCat(dir_, "/", id, ".log"));
  }

  // `weir --json cluster`, parsed; null when the command failed.
  nlohmann::json Cluster() {
    auto result = RunCommand({BinDir() + "/weir", "--jobmanager", JobManagerAddress(), "--json", "cluster"});
    if (result.exit_code != 0) return nullptr;
    return nlohmann::json::parse(result.out);
  }

  // The ids of the TaskManagers the JobManager lists.
  std::vector<std::string> MemberIds() {
    nlohmann::json cluster = Cluster();
    std::vector<std::string> ids;
    if (cluster.is_null()) return ids;
    for (const auto& tm : cluster["taskmanagers"]) ids.push_back(tm["id"]);
    return ids;
  }

  bool WaitForMembers(const std::vector<std::string>& expected, absl::Duration timeout = absl::Seconds(30)) {
    return WaitFor([&] { return MemberIds() == expected; }, timeout);
  }

  // The "msg" of every JSON log line of `process`.
  static std::vector<std::string> LogMessages(const Subprocess& process) {
    std::vector<std::string> messages;
    for (absl::string_view line : absl::StrSplit(process.Log(), '\n', absl::SkipEmpty())) {
      auto parsed = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (parsed.is_object() && parsed.contains("msg")) messages.push_back(parsed["msg"]);
    }
    return messages;
  }

  static bool HasLogLine(const Subprocess& process, const std::string& a, const std::string& b) {
    for (const std::string& m : LogMessages(process)) {
      if (absl::StrContains(m, a) && absl::StrContains(m, b)) return true;
    }
    return false;
  }

  // CancelJobTasks of a job that does not run, as a JobManager of leader
  // epoch `epoch` (null: one that sends none) would call it.
  static grpc::Status CancelWithEpoch(v1::TaskExecutorService::Stub& stub, const char* epoch) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (epoch != nullptr) context.AddMetadata("weir-leader-epoch", epoch);
    v1::CancelJobTasksRequest request;
    request.set_job_id("nojob");
    request.set_attempt(1);
    v1::CancelJobTasksResponse response;
    return stub.CancelJobTasks(&context, request, &response);
  }

  std::string dir_;
  int jm_port_ = 0;
  int jm_starts_ = 0;
};

TEST_F(ClusterTest, TwoTaskManagersJoinWithTheirSlots) {
  auto jm = StartJobManager();
  auto a = StartTaskManager("tm-a", 2);
  auto b = StartTaskManager("tm-b", 3);
  ASSERT_TRUE(WaitForMembers({"tm-a", "tm-b"})) << jm->Log();

  nlohmann::json cluster = Cluster();
  ASSERT_EQ(cluster["taskmanagers"].size(), 2u);
  const auto& tm_a = cluster["taskmanagers"][0];
  const auto& tm_b = cluster["taskmanagers"][1];
  EXPECT_EQ(tm_a["slots_total"], 2);
  EXPECT_EQ(tm_a["slots_free"], 2);
  EXPECT_EQ(tm_b["slots_total"], 3);
  EXPECT_EQ(tm_b["slots_free"], 3);
  EXPECT_EQ(tm_a["pid"], a->pid());
  EXPECT_EQ(tm_b["pid"], b->pid());
  EXPECT_TRUE(absl::StartsWith(tm_a["address"].get<std::string>(), "127.0.0.1:"));
  EXPECT_NE(tm_a["address"], tm_b["address"]);
  EXPECT_GE(tm_a["seconds_since_heartbeat"].get<double>(), 0.0);

  // Every join is logged with the TaskManager's id and address.
  EXPECT_TRUE(HasLogLine(*jm, "tm-a at " + tm_a["address"].get<std::string>(), "registered"));
  EXPECT_TRUE(HasLogLine(*jm, "tm-b at " + tm_b["address"].get<std::string>(), "registered"));

  // The text form lists the same TaskManagers.
  auto text = RunCommand({BinDir() + "/weir", "--jobmanager", JobManagerAddress(), "cluster"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_TRUE(absl::StrContains(text.out, "tm-a")) << text.out;
  EXPECT_TRUE(absl::StrContains(text.out, "2/2")) << text.out;
  EXPECT_TRUE(absl::StrContains(text.out, "3/3")) << text.out;

  // A client pointed at a TaskManager's port by mistake says so.
  auto wrong_port = RunCommand({BinDir() + "/weir", "--jobmanager", tm_a["address"].get<std::string>(), "list"});
  EXPECT_EQ(wrong_port.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(wrong_port.err, "not a Weir JobManager")) << wrong_port.err;
}

TEST_F(ClusterTest, KilledTaskManagerIsLostWhenItsConnectionCloses) {
  // A timeout this long cannot be what detects the loss below.
  auto jm = StartJobManager({"-Dheartbeat.timeout=10 min"});
  auto a = StartTaskManager("tm-a", 1);
  auto b = StartTaskManager("tm-b", 1);
  ASSERT_TRUE(WaitForMembers({"tm-a", "tm-b"})) << jm->Log();

  a->Signal(SIGKILL);
  ASSERT_TRUE(WaitForMembers({"tm-b"}, absl::Seconds(60))) << jm->Log();
  EXPECT_TRUE(HasLogLine(*jm, "tm-a at ", "lost: connection closed")) << jm->Log();
  EXPECT_FALSE(HasLogLine(*jm, "tm-a", "heartbeat timeout"));
}

TEST_F(ClusterTest, StoppedTaskManagerIsLostAfterTheHeartbeatTimeout) {
  const absl::Duration interval = absl::Milliseconds(200);
  const absl::Duration timeout = absl::Seconds(2);
  auto jm = StartJobManager({"-Dheartbeat.interval=200ms", "-Dheartbeat.timeout=2 s"});
  auto a = StartTaskManager("tm-a", 1);
  auto b = StartTaskManager("tm-b", 1);
  ASSERT_TRUE(WaitForMembers({"tm-a", "tm-b"})) << jm->Log();

  a->Signal(SIGSTOP);
  absl::Time stopped_at = absl::Now();
  ASSERT_TRUE(WaitForMembers({"tm-b"}, absl::Seconds(60))) << jm->Log();
  // Its last heartbeat was at most one interval before the stop.
  EXPECT_GE(absl::Now() - stopped_at, timeout - interval);
  EXPECT_TRUE(HasLogLine(*jm, "tm-a at ", "lost: heartbeat timeout")) << jm->Log();

  // Once it runs again, it notices and registers anew on its own.
  a->Signal(SIGCONT);
  ASSERT_TRUE(WaitForMembers({"tm-a", "tm-b"})) << a->Log();
}

// A stand-in JobManager in the test process for what a real one only does
// in rare races: its membership session triggers a checkpoint of a task the
// TaskManager does not run, and it records the declines that come back.
class TriggeringJobManager final : public v1::ResourceManagerService::Service,
                                   public v1::JobMasterService::Service {
 public:
  grpc::Status Connect(grpc::ServerContext*,
                       grpc::ServerReaderWriter<v1::JobManagerMessage, v1::TaskManagerMessage>* stream) override {
    v1::TaskManagerMessage in;
    if (!stream->Read(&in) || !in.has_register_()) return grpc::Status::CANCELLED;
    offered_ = in.register_().takes_checkpoint_messages();
    v1::JobManagerMessage out;
    out.mutable_accepted()->set_jobmanager_session_id("jm-stand-in");
    out.mutable_accepted()->set_heartbeat_interval_ms(200);
    out.mutable_accepted()->set_heartbeat_timeout_ms(10000);
    stream->Write(out);
    out.Clear();
    v1::TriggerCheckpointsRequest* trigger = out.mutable_trigger_checkpoints();
    trigger->set_job_id("job-1");
    trigger->set_attempt(1);
    trigger->set_checkpoint_id(7);
    trigger->add_task_ids("job-1/1/c0s0");
    stream->Write(out);
    out.Clear();
    out.mutable_notify_checkpoint()->set_job_id("job-1");
    out.mutable_notify_checkpoint()->set_attempt(1);
    out.mutable_notify_checkpoint()->set_checkpoint_id(7);
    out.mutable_notify_checkpoint()->set_completed(true);
    stream->Write(out);
    while (stream->Read(&in)) {
      out.Clear();
      out.mutable_heartbeat_ack()->set_sequence(in.heartbeat().sequence());
      if (!stream->Write(out)) break;
    }
    return grpc::Status::OK;
  }
  grpc::Status DeclineCheckpoint(grpc::ServerContext*, const v1::DeclineCheckpointRequest* request,
                                 v1::CheckpointResponse*) override {
    absl::MutexLock lock(&mu_);
    declines_.push_back(*request);
    return grpc::Status::OK;
  }
  grpc::Status ReportTaskMetrics(grpc::ServerContext*, const v1::ReportTaskMetricsRequest*,
                                 v1::TaskStateUpdateResponse*) override {
    return grpc::Status::OK;
  }

  bool offered() const { return offered_; }
  std::vector<v1::DeclineCheckpointRequest> declines() {
    absl::MutexLock lock(&mu_);
    return declines_;
  }

 private:
  std::atomic<bool> offered_{false};
  absl::Mutex mu_;
  std::vector<v1::DeclineCheckpointRequest> declines_ ABSL_GUARDED_BY(mu_);
};

// Checkpoint triggers and notifications reach a TaskManager on its
// membership session (the JobManager's single thread writes a message per
// TaskManager instead of making a call each): the TaskManager offers that
// when it registers, and declines a triggered task it does not run.
TEST_F(ClusterTest, TaskManagerTakesCheckpointMessagesOnItsSessionAndDeclinesUnknownTasks) {
  TriggeringJobManager jm;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(JobManagerAddress(), grpc::InsecureServerCredentials());
  builder.RegisterService(static_cast<v1::ResourceManagerService::Service*>(&jm));
  builder.RegisterService(static_cast<v1::JobMasterService::Service*>(&jm));
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto tm = StartTaskManager("tm-a", 1);

  ASSERT_TRUE(WaitFor([&] { return !jm.declines().empty(); }, absl::Seconds(60))) << tm->Log();
  EXPECT_TRUE(jm.offered());
  const std::vector<v1::DeclineCheckpointRequest> declines = jm.declines();
  ASSERT_EQ(declines.size(), 1u);
  EXPECT_EQ(declines[0].job_id(), "job-1");
  EXPECT_EQ(declines[0].attempt(), 1);
  EXPECT_EQ(declines[0].checkpoint_id(), 7);
  EXPECT_EQ(declines[0].task_id(), "job-1/1/c0s0");
  EXPECT_TRUE(absl::StrContains(declines[0].reason(), "no such task runs there")) << declines[0].reason();
  tm->Signal(SIGKILL);
  tm->Wait(absl::Seconds(30));
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

// A JobManager of a version without leader epochs registers a TaskManager
// with epoch 0 and sends none: its calls are taken unfenced, until a
// JobManager with an epoch calls, after which a call without one is refused.
TEST_F(ClusterTest, TaskManagerTakesCallsWithoutAnEpochOnlyFromAJobManagerWithout) {
  TriggeringJobManager jm;  // registers without an epoch, as an older JobManager does
  grpc::ServerBuilder builder;
  builder.AddListeningPort(JobManagerAddress(), grpc::InsecureServerCredentials());
  builder.RegisterService(static_cast<v1::ResourceManagerService::Service*>(&jm));
  builder.RegisterService(static_cast<v1::JobMasterService::Service*>(&jm));
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto tm = StartTaskManager("tm-a", 1);
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(tm->Log(), "(leader epoch 0)"); }, absl::Seconds(60)))
      << tm->Log();
  std::string address;
  for (absl::string_view line : absl::StrSplit(tm->Log(), '\n')) {
    const size_t at = line.find("TaskManager tm-a listening on ");
    if (at == absl::string_view::npos) continue;
    line.remove_prefix(at + std::string("TaskManager tm-a listening on ").size());
    address = std::string(line.substr(0, line.find(' ')));
  }
  ASSERT_FALSE(address.empty()) << tm->Log();
  auto stub = v1::TaskExecutorService::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  auto cancel = [&](const char* epoch) { return CancelWithEpoch(*stub, epoch); };
  EXPECT_TRUE(cancel(nullptr).ok());
  EXPECT_EQ(cancel("x").error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(cancel("1").ok());
  const grpc::Status unfenced = cancel(nullptr);
  EXPECT_EQ(unfenced.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(absl::StrContains(unfenced.error_message(), "follows epoch 1")) << unfenced.error_message();
  tm->Signal(SIGKILL);
  tm->Wait(absl::Seconds(30));
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

// A TaskManager that stops reading its membership session (hung, or a peer
// that only writes) does not make the JobManager queue messages for it
// without bound: once 1,024 wait, the session is closed and the TaskManager
// is lost, while a real TaskManager beside it stays a member. The stand-in
// registers from the test process and sends heartbeats without ever reading
// an acknowledgement.
TEST_F(ClusterTest, ATaskManagerThatStopsReadingItsSessionIsClosedAndLost) {
  auto jm = StartJobManager();
  auto b = StartTaskManager("tm-b", 1);
  ASSERT_TRUE(WaitForMembers({"tm-b"})) << jm->Log();

  // Without BDP probing the session's receive window stays at 64 KiB, so
  // the JobManager's queue starts growing after a few thousand unread acks.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  auto stub = v1::ResourceManagerService::NewStub(
      grpc::CreateCustomChannel(JobManagerAddress(), grpc::InsecureChannelCredentials(), args));
  grpc::ClientContext context;
  auto stream = stub->Connect(&context);
  v1::TaskManagerMessage hello;
  v1::TaskManagerInfo* info = hello.mutable_register_()->mutable_info();
  info->set_taskmanager_id("tm-deaf");
  info->set_address("127.0.0.1:1");
  info->set_slots_total(1);
  hello.mutable_register_()->mutable_slots()->set_slots_total(1);
  hello.mutable_register_()->mutable_slots()->set_slots_free(1);
  ASSERT_TRUE(stream->Write(hello));
  v1::JobManagerMessage answer;
  ASSERT_TRUE(stream->Read(&answer));
  ASSERT_TRUE(answer.has_accepted()) << answer.DebugString();
  ASSERT_TRUE(WaitForMembers({"tm-b", "tm-deaf"})) << jm->Log();

  v1::TaskManagerMessage heartbeat;
  *heartbeat.mutable_heartbeat()->mutable_slots() = hello.register_().slots();
  const absl::Time give_up = absl::Now() + absl::Seconds(120);  // failure guard
  bool closed = false;
  for (int64_t sequence = 1; !closed && absl::Now() < give_up; ++sequence) {
    heartbeat.mutable_heartbeat()->set_sequence(sequence);
    if (!stream->Write(heartbeat)) break;  // the JobManager ended the session
    if (sequence % 2000 == 0) closed = HasLogLine(*jm, "messages waiting", "stopped reading");
  }
  EXPECT_TRUE(WaitFor([&] { return HasLogLine(*jm, "tm-deaf's membership session has 1024 messages waiting",
                                               "stopped reading"); },
                      absl::Seconds(60)))
      << jm->Log();
  // Lost at once, for that reason (not at its heartbeat timeout, 5 s later).
  EXPECT_TRUE(WaitFor(
      [&] { return HasLogLine(*jm, "tm-deaf", "lost: connection closed (it stopped reading its session)"); },
      absl::Seconds(60)))
      << jm->Log();
  EXPECT_TRUE(WaitForMembers({"tm-b"})) << jm->Log();
  EXPECT_FALSE(HasLogLine(*jm, "tm-deaf", "heartbeat timeout")) << jm->Log();
  context.TryCancel();
}

TEST_F(ClusterTest, TaskManagerReRegistersWithARestartedJobManager) {
  auto jm = StartJobManager();
  auto a = StartTaskManager("tm-a", 2);
  ASSERT_TRUE(WaitForMembers({"tm-a"})) << jm->Log();
  std::string first_session = Cluster()["jobmanager_session_id"];

  jm->Signal(SIGKILL);
  ASSERT_TRUE(jm->Wait(absl::Seconds(10)).has_value());
  EXPECT_TRUE(Cluster().is_null());

  auto jm2 = StartJobManager();
  ASSERT_TRUE(WaitForMembers({"tm-a"})) << a->Log();
  nlohmann::json cluster = Cluster();
  EXPECT_NE(cluster["jobmanager_session_id"], first_session);
  EXPECT_EQ(cluster["taskmanagers"][0]["slots_total"], 2);
  EXPECT_TRUE(HasLogLine(*jm2, "tm-a at ", "registered"));
}

// Fencing: every JobManager started on a storage directory takes a higher
// leader epoch, and a TaskManager refuses calls from an epoch below the one
// it registered with (a deposed JobManager's, which may still be running
// after its successor took over), and calls that carry none.
TEST_F(ClusterTest, TaskManagerRefusesCallsFromADeposedJobManager) {
  auto jm = StartJobManager();
  auto tm = StartTaskManager("tm-a", 1);
  ASSERT_TRUE(WaitForMembers({"tm-a"})) << jm->Log();
  const std::string address = Cluster()["taskmanagers"][0]["address"];
  jm->Signal(SIGKILL);
  ASSERT_TRUE(jm->Wait(absl::Seconds(10)).has_value());
  auto jm2 = StartJobManager();
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(tm->Log(), "(leader epoch 2)"); }, absl::Seconds(60)))
      << tm->Log();
  EXPECT_TRUE(HasLogLine(*jm, "listening on", "leader epoch 1")) << jm->Log();
  EXPECT_TRUE(HasLogLine(*jm2, "listening on", "leader epoch 2")) << jm2->Log();

  auto stub = v1::TaskExecutorService::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  auto cancel = [&](const char* epoch) { return CancelWithEpoch(*stub, epoch); };
  const grpc::Status deposed = cancel("1");
  EXPECT_EQ(deposed.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(absl::StrContains(deposed.error_message(), "follows epoch 2")) << deposed.error_message();
  const grpc::Status unfenced = cancel(nullptr);
  EXPECT_EQ(unfenced.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(absl::StrContains(unfenced.error_message(), "carries no valid leader epoch"))
      << unfenced.error_message();
  const grpc::Status garbage = cancel("2x");
  EXPECT_EQ(garbage.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(cancel("2").ok());
  // A later epoch is followed at once (its registration may be on its way);
  // the one before it is refused from then on.
  EXPECT_TRUE(cancel("3").ok());
  EXPECT_EQ(cancel("2").error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(WaitFor(
      [&] { return absl::StrContains(tm->Log(), "refused a cancellation from a JobManager with leader epoch 1"); },
      absl::Seconds(10)))
      << tm->Log();
  // The TaskManager still serves its JobManager after all that.
  EXPECT_EQ(MemberIds(), std::vector<std::string>{"tm-a"});
}

TEST_F(ClusterTest, TaskManagerStartedBeforeTheJobManagerRegistersOnceItIsUp) {
  auto a = StartTaskManager("tm-a", 1);
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(a->Log(), "cannot register"); }, absl::Seconds(30)));
  auto jm = StartJobManager();
  ASSERT_TRUE(WaitForMembers({"tm-a"})) << a->Log();
}

// taskmanager.memory.release-code-pages: a TaskManager drops its start-up
// code pages from its resident set once settled and stays a working member;
// one with the key off keeps them.
TEST_F(ClusterTest, TaskManagerReleasesItsStartUpCodePagesOnceSettled) {
  auto jm = StartJobManager();
  auto a = StartTaskManager("tm-a", 1);
  auto b = StartTaskManager("tm-b", 1, {"-Dtaskmanager.memory.release-code-pages=false"});
  ASSERT_TRUE(WaitForMembers({"tm-a", "tm-b"})) << jm->Log();
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(a->Log(), "released the code pages of"); }, absl::Seconds(30)))
      << a->Log();
  absl::SleepFor(absl::Seconds(3));  // b's maintenance loop has come round since it settled too
  EXPECT_FALSE(absl::StrContains(b->Log(), "released the code pages")) << b->Log();
  // The same binary, both at rest: the one that released maps fewer pages of its files.
  const int64_t released = process::ProcStatusField(a->pid(), "RssFile");
  const int64_t kept = process::ProcStatusField(b->pid(), "RssFile");
  ASSERT_GT(released, 0);
  EXPECT_LT(released, kept);
  // Both still heartbeat and answer.
  EXPECT_TRUE(WaitForMembers({"tm-a", "tm-b"})) << a->Log();
  auto text = RunCommand({BinDir() + "/weir", "--jobmanager", JobManagerAddress(), "cluster"});
  EXPECT_EQ(text.exit_code, 0) << text.err;
}

// The pages a deployment's set-up touched (loading the job) are released
// as soon as the last of its tasks reports RUNNING, and those of opening
// its clients shortly after, not only once the deployments have been quiet
// for a while: they would otherwise add to the resident set while the
// job's buffers fill.
TEST(CodePagesTest, ATaskManagerReleasesItsCodePagesOnceItsTasksAreSetUp) {
  testing::LocalCluster cluster({.taskmanagers = 1, .slots_per_taskmanager = 2});
  cluster.Start();
  std::string error;
  const std::string job =
      cluster.Submit(std::string(WEIR_JOBS_DIR) + "/test/timed_numbers.so", {"-p", "2"}, {}, &error);
  ASSERT_FALSE(job.empty()) << error;
  ASSERT_TRUE(WaitFor(
      [&] {
        const std::string log = cluster.taskmanager(0).Log();
        return absl::StrContains(log, "released the code pages of") &&
               absl::StrContains(log, "once the deployed tasks were set up") &&
               absl::StrContains(log, "after the deployed tasks were set up (their clients opened)");
      },
      absl::Seconds(60)))
      << cluster.Logs();
  EXPECT_EQ(cluster.Weir({"cancel", job}).exit_code, 0);
}

// A LocalCluster removes its directory (daemon logs, HA store, io.tmp.dirs)
// when its test passes, so that test runs do not fill /tmp.
TEST(LocalClusterTest, RemovesItsDirectoryWhenTheTestPasses) {
  std::string dir;
  {
    testing::LocalCluster cluster({.taskmanagers = 1});
    cluster.Start();
    dir = cluster.dir();
    ASSERT_TRUE(std::filesystem::exists(dir + "/jobmanager-1.log"));
  }
  EXPECT_FALSE(std::filesystem::exists(dir)) << dir;
}

// Run only by the next tests, in a child process: they fail on purpose with
// a cluster alive, the first by an assertion, the second by an exception.
TEST(LocalClusterTest, DISABLED_FailsWithAClusterAlive) {
  testing::LocalCluster cluster({.taskmanagers = 1});
  cluster.Start();
  ADD_FAILURE() << "failing on purpose";
}

TEST(LocalClusterTest, DISABLED_ThrowsWithAClusterAlive) {
  testing::LocalCluster cluster({.taskmanagers = 1});
  cluster.Start();
  throw std::runtime_error("throwing on purpose");
}

// ... and when it fails, keeps the directory for reading and names it in
// the test's output.
TEST(LocalClusterTest, KeepsItsDirectoryWhenTheTestFailsAndSaysWhere) {
  for (const std::string test : {"DISABLED_FailsWithAClusterAlive", "DISABLED_ThrowsWithAClusterAlive"}) {
    SCOPED_TRACE(test);
    const CommandResult child = RunCommand({std::filesystem::read_symlink("/proc/self/exe").string(),
                                            "--gtest_also_run_disabled_tests",
                                            "--gtest_filter=LocalClusterTest." + test},
                                           absl::Seconds(120));
    EXPECT_NE(child.exit_code, 0) << child.out << child.err;
    const std::string prefix = "LocalCluster: kept ";
    const size_t at = child.err.find(prefix);
    ASSERT_NE(at, std::string::npos) << child.out << child.err;
    const size_t start = at + prefix.size();
    const std::string dir = child.err.substr(start, child.err.find(' ', start) - start);
    EXPECT_TRUE(absl::StartsWith(dir, "/")) << dir;
    EXPECT_TRUE(std::filesystem::exists(dir + "/jobmanager-1.log")) << dir;
    EXPECT_TRUE(std::filesystem::exists(dir + "/tm-0.log")) << dir;
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
}

TEST_F(ClusterTest, TaskManagerDeregistersOnSigterm) {
  auto jm = StartJobManager({"-Dheartbeat.timeout=10 min"});
  auto a = StartTaskManager("tm-a", 1);
  ASSERT_TRUE(WaitForMembers({"tm-a"})) << jm->Log();
  a->Signal(SIGTERM);
  EXPECT_EQ(a->Wait(absl::Seconds(30)), 0) << a->Log();
  ASSERT_TRUE(WaitForMembers({}));
  EXPECT_TRUE(HasLogLine(*jm, "tm-a at ", "lost: deregistered")) << jm->Log();

  jm->Signal(SIGTERM);
  EXPECT_EQ(jm->Wait(absl::Seconds(30)), 0) << jm->Log();
}

TEST_F(ClusterTest, ClientReportsAnUnreachableJobManager) {
  auto result = RunCommand({BinDir() + "/weir", "--jobmanager", JobManagerAddress(), "cluster"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_TRUE(absl::StartsWith(result.err, "weir: cannot reach the JobManager at " + JobManagerAddress()))
      << result.err;
  EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
  EXPECT_TRUE(result.out.empty());
}

// A JobManager address that takes the TCP connection but never answers the
// HTTP/2 handshake (a hung process; a listening socket that nobody
// accepts on): the client gives up on the connection and says it cannot
// reach the JobManager, rather than that it did not answer in time.
TEST_F(ClusterTest, ClientReportsAJobManagerThatNeverAnswersAsUnreachable) {
  const int silent = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  ASSERT_EQ(bind(silent, reinterpret_cast<sockaddr*>(&address), length), 0);
  ASSERT_EQ(listen(silent, 16), 0);
  ASSERT_EQ(getsockname(silent, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const std::string target = absl::StrCat("127.0.0.1:", ntohs(address.sin_port));
  auto result = RunCommand({BinDir() + "/weir", "--jobmanager", target, "cluster"});
  close(silent);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_TRUE(absl::StartsWith(result.err, "weir: cannot reach the JobManager at " + target)) << result.err;
}

TEST_F(ClusterTest, DaemonsRejectBadConfigurationWithExitCodeTwo) {
  struct Case {
    std::string binary;
    std::vector<std::string> args;
    std::string expected;
  };
  std::string config_file = dir_ + "/bad.yaml";
  {
    std::ofstream out(config_file);
    out << "# a comment\nheartbeat.interval: 1 s\ntaskmanager.numberOfTaskSlots: many\n";
  }
  const std::vector<Case> cases = {
      {"weir-jobmanager", {"-Dno.such.key=1"}, "unknown configuration key 'no.such.key'"},
      {"weir-jobmanager", {"-Dheartbeat.timeout=soon"}, "'heartbeat.timeout'"},
      {"weir-jobmanager", {"-Djobmanager.rpc.port=70000"}, "between 1 and 65535"},
      {"weir-jobmanager", {"--config", dir_ + "/missing.yaml"}, "cannot read configuration file"},
      {"weir-taskmanager", {"--config", config_file}, "bad.yaml:3: bad value 'many' for 'taskmanager.numberOfTaskSlots'"},
      {"weir-taskmanager", {"-Dlog.format=xml"}, "expected one of: text, json"},
      {"weir-taskmanager", {"--bogus"}, "unknown argument '--bogus'"},
      // It names directories the TaskManager removes on exit.
      {"weir-taskmanager", {"-Dtaskmanager.resource-id=x/../victim"}, "it names directories"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {BinDir() + "/" + c.binary};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    auto result = RunCommand(argv);
    EXPECT_EQ(result.exit_code, 2) << c.binary << " " << c.args[0];
    EXPECT_TRUE(absl::StrContains(result.err, c.expected)) << result.err;
  }
}

TEST_F(ClusterTest, SecondJobManagerOnTheSamePortFailsClearly) {
  auto jm = StartJobManager();
  ASSERT_TRUE(WaitFor([&] { return !Cluster().is_null(); }, absl::Seconds(30))) << jm->Log();
  // Its own storage directory: the port is what clashes.
  auto second = StartJobManager({absl::StrCat("-Dhigh-availability.storageDir=", dir_, "/ha-second")});
  EXPECT_EQ(second->Wait(absl::Seconds(30)), 1);
  EXPECT_TRUE(absl::StrContains(second->Log(), "cannot listen on 127.0.0.1:" + std::to_string(jm_port_)))
      << second->Log();
  EXPECT_TRUE(jm->running());
}

// Two JobManagers on one high-availability.storageDir would both run its
// jobs: the second refuses to start, naming the directory.
TEST_F(ClusterTest, SecondJobManagerOnTheSameStorageDirectoryFailsClearly) {
  auto jm = StartJobManager();
  ASSERT_TRUE(WaitFor([&] { return !Cluster().is_null(); }, absl::Seconds(30))) << jm->Log();
  auto second = StartJobManager({absl::StrCat("-Djobmanager.rpc.port=", jm_port_ + 1)});
  EXPECT_NE(second->Wait(absl::Seconds(30)), 0);
  EXPECT_TRUE(absl::StrContains(second->Log(), "another JobManager uses high-availability.storageDir"))
      << second->Log();
  EXPECT_TRUE(jm->running());
}

TEST_F(ClusterTest, ListeningBeyondLoopbackRequiresAToken) {
  auto jm = StartJobManager({"-Djobmanager.bind-host=0.0.0.0"});
  EXPECT_EQ(jm->Wait(absl::Seconds(30)), 2);
  EXPECT_TRUE(absl::StrContains(jm->Log(), "jobmanager.bind-host '0.0.0.0' listens beyond loopback")) << jm->Log();
  EXPECT_TRUE(absl::StrContains(jm->Log(), "security.auth.token-file")) << jm->Log();

  auto tm = StartTaskManager("tm-a", 1, {"-Dtaskmanager.bind-host=0.0.0.0"});
  EXPECT_EQ(tm->Wait(absl::Seconds(30)), 2);
  EXPECT_TRUE(absl::StrContains(tm->Log(), "security.auth.token-file")) << tm->Log();
}

// A caller without the token is refused on its call's metadata, before
// gRPC reads the message; a caller with it cannot make the JobManager
// receive and parse a message over the control plane's cap either: that is
// refused while it arrives, before the handler runs.
TEST_F(ClusterTest, OversizedCallsAreRefusedBeforeParsing) {
  std::string token = dir_ + "/token";
  std::ofstream(token) << "s3cret-of-the-cluster\n";
  auto jm = StartJobManager({"-Dsecurity.auth.token-file=" + token});
  auto channel = grpc::CreateChannel(JobManagerAddress(), grpc::InsecureChannelCredentials());
  auto stub = v1::JobService::NewStub(channel);
  v1::SubmitJobRequest big;
  big.add_args(std::string(6 << 20, 'x'));
  auto submit = [&](bool with_token) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (with_token) context.AddMetadata("authorization", "Bearer s3cret-of-the-cluster");
    v1::SubmitJobResponse response;
    return stub->Submit(&context, big, &response);
  };
  grpc::Status status;
  ASSERT_TRUE(WaitFor([&] {
    status = submit(/*with_token=*/false);
    return status.error_code() != grpc::StatusCode::UNAVAILABLE;  // the JobManager is up
  }, absl::Seconds(30))) << jm->Log();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << status.error_message();
  status = submit(/*with_token=*/true);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  // A small call without the token is refused as before.
  grpc::ClientContext context;
  v1::ListJobsResponse listed;
  EXPECT_EQ(stub->List(&context, v1::ListJobsRequest(), &listed).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(jm->running());
}

// A string field with invalid UTF-8 fails to parse before the handler
// runs; protobuf says so in the daemon's log, rate-limited, not once per
// call. (The calls carry the token: one without it is refused on its
// metadata, before its message is parsed.)
TEST_F(ClusterTest, UndecodableCallsAreLoggedRateLimited) {
  std::string token = dir_ + "/token";
  std::ofstream(token) << "s3cret-of-the-cluster\n";
  auto jm = StartJobManager({"-Dsecurity.auth.token-file=" + token});
  auto stub = v1::JobService::NewStub(grpc::CreateChannel(JobManagerAddress(), grpc::InsecureChannelCredentials()));
  v1::SubmitJobRequest bad;
  bad.add_args("\xff\xfe not UTF-8");
  constexpr int kCalls = 40;
  int refused = 0;
  ASSERT_TRUE(WaitFor([&] {
    grpc::ClientContext context;
    context.AddMetadata("authorization", "Bearer s3cret-of-the-cluster");
    v1::SubmitJobResponse response;
    return stub->Submit(&context, bad, &response).error_code() != grpc::StatusCode::UNAVAILABLE;
  }, absl::Seconds(30))) << jm->Log();
  for (int i = 0; i < kCalls; ++i) {
    grpc::ClientContext context;
    context.AddMetadata("authorization", "Bearer s3cret-of-the-cluster");
    v1::SubmitJobResponse response;
    if (!stub->Submit(&context, bad, &response).ok()) ++refused;
  }
  EXPECT_EQ(refused, kCalls);
  const std::string log = jm->Log();
  int lines = 0, in_daemon_log = 0;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (!absl::StrContains(line, "UTF-8")) continue;
    ++lines;
    // The daemon's own line, in the text or the JSON log format.
    if (absl::StrContains(line, "[protobuf]") || absl::StrContains(line, "\"logger\":\"protobuf\"")) ++in_daemon_log;
  }
  EXPECT_GE(in_daemon_log, 1) << log;
  EXPECT_EQ(in_daemon_log, lines) << "protobuf wrote to stderr itself:\n" << log;
  EXPECT_LT(lines, kCalls / 2) << log;
  EXPECT_TRUE(jm->running());
}

TEST_F(ClusterTest, WithATokenEveryCallMustCarryIt) {
  std::string token = dir_ + "/token", wrong = dir_ + "/wrong";
  std::ofstream(token) << "s3cret-of-the-cluster\n";
  std::ofstream(wrong) << "not-the-secret\n";
  auto jm = StartJobManager({"-Dsecurity.auth.token-file=" + token, "-Djobmanager.bind-host=0.0.0.0"});
  auto a = StartTaskManager("tm-a", 1, {"-Dsecurity.auth.token-file=" + token});
  auto intruder = StartTaskManager("tm-x", 1, {"-Dsecurity.auth.token-file=" + wrong});

  auto with_token = [&] {
    return RunCommand({BinDir() + "/weir", "--jobmanager", JobManagerAddress(), "--token-file", token, "--json",
                       "cluster"});
  };
  ASSERT_TRUE(WaitFor([&] {
    auto r = with_token();
    return r.exit_code == 0 && nlohmann::json::parse(r.out)["taskmanagers"].size() == 1;
  }, absl::Seconds(30))) << jm->Log();
  EXPECT_EQ(nlohmann::json::parse(with_token().out)["taskmanagers"][0]["id"], "tm-a");
  // The intruder says why it cannot register, and so does the JobManager.
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(intruder->Log(), "does not match this cluster's"); },
                      absl::Seconds(30))) << intruder->Log();
  EXPECT_TRUE(absl::StrContains(jm->Log(), "its token does not match security.auth.token-file")) << jm->Log();

  // A missing token and a wrong one are told apart.
  auto without = RunCommand({BinDir() + "/weir", "--jobmanager", JobManagerAddress(), "cluster"});
  EXPECT_EQ(without.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(without.err, "refused the call")) << without.err;
  EXPECT_TRUE(absl::StrContains(without.err, "none was given")) << without.err;
  auto bad = RunCommand({BinDir() + "/weir", "--jobmanager", JobManagerAddress(), "--token-file", wrong, "cluster"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(bad.err, "does not match this cluster's")) << bad.err;
  auto missing = RunCommand({BinDir() + "/weir", "--token-file", dir_ + "/none", "cluster"});
  EXPECT_EQ(missing.exit_code, 2);
}

// The HTTP endpoints: probes answer without the token, everything else
// wants it (the JobManager listens beyond loopback here); the REST API and
// both daemons' metrics describe the cluster; a taken REST port is a clear
// start-up error.
TEST_F(ClusterTest, HttpEndpointsServeProbesMetricsAndTheRestApi) {
  const std::string token = dir_ + "/token";
  std::ofstream(token) << "s3cret-of-the-cluster\n";
  const std::string secret = "s3cret-of-the-cluster";
  const int rest_port = testing::FreePort();
  auto jm = StartJobManager({"-Dsecurity.auth.token-file=" + token, "-Djobmanager.bind-host=0.0.0.0",
                             absl::StrCat("-Drest.port=", rest_port)});
  auto tm = StartTaskManager("tm-a", 3, {"-Dsecurity.auth.token-file=" + token});

  ASSERT_TRUE(WaitFor([&] { return testing::HttpGet(rest_port, "/readyz").status == 200; }, absl::Seconds(30)))
      << jm->Log();
  EXPECT_EQ(testing::HttpGet(rest_port, "/healthz").status, 200);
  EXPECT_EQ(testing::HttpGet(rest_port, "/overview").status, 401);
  nlohmann::json overview;
  ASSERT_TRUE(WaitFor([&] {
    testing::HttpResult r = testing::HttpGet(rest_port, "/overview", secret);
    if (r.status != 200) return false;
    overview = nlohmann::json::parse(r.body);
    return overview["taskmanagers"] == 1;
  }, absl::Seconds(30))) << jm->Log();
  EXPECT_EQ(overview["slots-total"], 3);
  EXPECT_EQ(overview["slots-available"], 3);
  EXPECT_EQ(overview["jobs-running"], 0);

  testing::HttpResult tms = testing::HttpGet(rest_port, "/taskmanagers", secret);
  ASSERT_EQ(tms.status, 200);
  const nlohmann::json listed = nlohmann::json::parse(tms.body)["taskmanagers"];
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0]["id"], "tm-a");
  const int tm_port = listed[0]["restPort"].get<int>();
  ASSERT_GT(tm_port, 0);
  // `weir cluster` shows the same port.
  auto cluster = RunCommand({BinDir() + "/weir", "--jobmanager", JobManagerAddress(), "--token-file", token, "--json",
                             "cluster"});
  ASSERT_EQ(cluster.exit_code, 0) << cluster.err;
  EXPECT_EQ(nlohmann::json::parse(cluster.out)["taskmanagers"][0]["rest_port"], tm_port);

  testing::HttpResult jm_metrics = testing::HttpGet(rest_port, "/metrics", secret);
  ASSERT_EQ(jm_metrics.status, 200);
  EXPECT_TRUE(absl::StartsWith(jm_metrics.content_type, "text/plain")) << jm_metrics.content_type;
  EXPECT_TRUE(absl::StrContains(jm_metrics.body, "weir_taskmanagers 1\n")) << jm_metrics.body;
  EXPECT_TRUE(absl::StrContains(jm_metrics.body, "weir_slots 3\n")) << jm_metrics.body;

  EXPECT_EQ(testing::HttpGet(tm_port, "/healthz").status, 200);
  EXPECT_EQ(testing::HttpGet(tm_port, "/readyz").status, 200);
  EXPECT_EQ(testing::HttpGet(tm_port, "/metrics").status, 401);
  testing::HttpResult tm_metrics = testing::HttpGet(tm_port, "/metrics", secret);
  ASSERT_EQ(tm_metrics.status, 200);
  EXPECT_TRUE(absl::StrContains(tm_metrics.body, "weir_taskmanager_registered 1\n")) << tm_metrics.body;
  EXPECT_TRUE(absl::StrContains(tm_metrics.body, "weir_taskmanager_slots_free 3\n")) << tm_metrics.body;
  // Network threads by default: one per slot, at most one per core.
  const int network_threads = std::min(3, static_cast<int>(std::thread::hardware_concurrency()));
  for (const char* side : {"server", "client"}) {
    EXPECT_TRUE(absl::StrContains(
        tm_metrics.body, absl::StrCat("weir_taskmanager_network_threads{side=\"", side, "\"} ", network_threads, "\n")))
        << tm_metrics.body;
  }
  EXPECT_TRUE(absl::StrContains(tm_metrics.body, "weir_taskmanager_network_streams_served 0\n")) << tm_metrics.body;

  testing::HttpResult unknown_job = testing::HttpGet(rest_port, "/jobs/no-such-job", secret);
  EXPECT_EQ(unknown_job.status, 404);
  EXPECT_EQ(nlohmann::json::parse(unknown_job.body)["errors"].size(), 1u) << unknown_job.body;

  // A second JobManager whose RPC port is free but whose REST port is
  // taken does not start, and says which port.
  jm_port_ = testing::FreePort();
  auto second = StartJobManager({absl::StrCat("-Dhigh-availability.storageDir=", dir_, "/ha-second"),
                                 absl::StrCat("-Drest.port=", rest_port)});
  EXPECT_EQ(second->Wait(absl::Seconds(30)), 1);
  EXPECT_TRUE(absl::StrContains(second->Log(), absl::StrCat("cannot listen on 127.0.0.1:", rest_port)))
      << second->Log();
  EXPECT_TRUE(absl::StrContains(second->Log(), "rest.port")) << second->Log();
  EXPECT_TRUE(jm->running());
}

}  // namespace
}  // namespace weir
