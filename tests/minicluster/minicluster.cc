#include "tests/minicluster/minicluster.h"

#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "jobmanager/execution_graph.h"
#include "tests/testing/process.h"

namespace weir::testing {

using jobmanager::DeployTasksCall;
using jobmanager::JobMaster;
using jobmanager::JobSettings;
using jobmanager::LossReason;
using jobmanager::SlotAssignment;

namespace {

// How often a wait for state that sends no notification looks again.
constexpr absl::Duration kPoll = absl::Milliseconds(1);

// A stand-in's membership session: nothing travels on it (checkpoint
// messages go through the gateway as calls).
class StandInSession final : public jobmanager::MembershipSession {
 public:
  void Close() override {}
  bool Send(const v1::JobManagerMessage&) override { return false; }
};

}  // namespace

MiniCluster::MiniCluster(MiniClusterOptions options)
    : options_(options), resource_manager_(absl::Seconds(30), "minicluster", &clock_) {
  temp_dir_ = MakeTempDir("minicluster");
  // As the Dispatcher wires it; the ResourceManager calls it on the thread
  // that ends a registration, which here is the test's.
  resource_manager_.AddLossListener([this](const v1::TaskManagerInfo& info, LossReason reason) {
    if (master_ != nullptr) master_->OnTaskManagerLost(info, jobmanager::LossReasonName(reason));
  });
  // Also as the Dispatcher wires it; called on the thread that registers a
  // TaskManager (the test's) or releases slots (the JobMaster's).
  resource_manager_.AddSlotsListener([this] {
    absl::MutexLock lock(&offer_mu_);
    if (offer_to_ != nullptr) offer_to_->OnSlotsOffered();
  });
  for (int i = 0; i < options_.taskmanagers; ++i) AddTaskManager(options_.slots_per_taskmanager);
}

MiniCluster::~MiniCluster() {
  {
    absl::MutexLock lock(&offer_mu_);
    offer_to_ = nullptr;
  }
  master_.reset();
  resource_manager_.Stop();
  std::error_code ec;
  std::filesystem::remove_all(temp_dir_, ec);
}

v1::SubmitJobRequest MiniCluster::SourceToSinkJob(int parallelism) {
  v1::SubmitJobRequest request;
  request.set_artifact_sha256("0123456789abcdef");
  v1::JobGraphSpec* spec = request.mutable_graph();
  spec->set_name("minicluster job");
  for (int i = 0; i < 2; ++i) {
    v1::JobVertex* v = spec->add_vertices();
    v->set_id(i);
    v->set_name(i == 0 ? "Source" : "Sink");
    v->set_uid(i == 0 ? "source" : "sink");
    v->set_parallelism(parallelism);
    v->set_kind(i == 0 ? v1::JobVertex::SOURCE : v1::JobVertex::SINK);
  }
  v1::JobEdge* e = spec->add_edges();
  e->set_source(0);
  e->set_target(1);
  e->set_partitioning(v1::HASH);
  return request;
}

std::string MiniCluster::TaskManagerId(int n) { return absl::StrCat("tm-", n); }

std::string MiniCluster::TaskManagerAddress(int n) { return absl::StrCat("127.0.0.1:", n); }

std::string MiniCluster::TaskId(int attempt, int chain, int subtask) {
  return jobmanager::ExecutionGraph::TaskId(kJobId, attempt, chain, subtask);
}

std::string MiniCluster::SnapshotFile(int attempt, int chain, int subtask) {
  return absl::StrCat("state-a", attempt, "-c", chain, "-s", subtask);
}

int MiniCluster::AddTaskManager(int slots) {
  const int n = static_cast<int>(taskmanagers_.size()) + 1;
  v1::RegisterTaskManager request;
  request.mutable_info()->set_taskmanager_id(TaskManagerId(n));
  request.mutable_info()->set_address(TaskManagerAddress(n));
  request.mutable_info()->set_hostname("minicluster");
  request.mutable_info()->set_slots_total(slots);
  absl::StatusOr<uint64_t> epoch = resource_manager_.Register(request, std::make_shared<StandInSession>());
  EXPECT_TRUE(epoch.ok()) << epoch.status();
  taskmanagers_.push_back({TaskManagerId(n), TaskManagerAddress(n), epoch.value_or(0)});
  return n;
}

void MiniCluster::LoseTaskManager(int n, LossReason reason) {
  const StandIn& tm = taskmanagers_.at(n - 1);
  resource_manager_.Unregister(tm.id, tm.epoch, reason, "");
}

absl::Status MiniCluster::StartJob(v1::SubmitJobRequest request, JobSettings settings) {
  if (master_ != nullptr) return absl::FailedPreconditionError("the MiniCluster runs one job");
  if (settings.clock == nullptr && options_.simulated_time) settings.clock = &clock_;
  if (settings.checkpoint_dir.empty() && settings.checkpoint.interval != absl::InfiniteDuration()) {
    checkpoint_dir_ = absl::StrCat(temp_dir_, "/checkpoints/", kJobId);
    settings.checkpoint_dir = checkpoint_dir_;
    if (settings.checkpoint.max_parallelism == 0) settings.checkpoint.max_parallelism = settings.max_parallelism;
  } else {
    checkpoint_dir_ = settings.checkpoint_dir;
  }
  absl::StatusOr<jobmanager::ExecutionGraph> graph = jobmanager::ExecutionGraph::Build(request.graph(), 1);
  if (!graph.ok()) return graph.status();
  absl::StatusOr<std::vector<SlotAssignment>> slots = resource_manager_.AllocateSlots(kJobId, graph->slots_needed);
  if (!slots.ok()) return slots.status();
  jobmanager::SlotProvider provider;
  provider.allocate = [this](int count, const std::vector<std::string>& preferred) {
    absl::StatusOr<std::vector<SlotAssignment>> slots = resource_manager_.AllocateSlots(kJobId, count, preferred);
    absl::MutexLock lock(&mu_);
    ++(slots.ok() ? allocations_ : failed_allocations_);
    return slots;
  };
  provider.release = [this] {
    resource_manager_.ReleaseSlots(kJobId);
    absl::MutexLock lock(&mu_);
    ++releases_;
  };
  absl::StatusOr<std::shared_ptr<JobMaster>> master =
      JobMaster::Create(kJobId, std::move(request), *std::move(graph), *std::move(slots), std::move(settings),
                        std::move(provider), gateway_, [this](const std::string&, v1::JobState state) {
                          absl::MutexLock lock(&mu_);
                          terminal_.push_back(state);
                        });
  if (!master.ok()) return master.status();
  master_ = *std::move(master);
  {
    absl::MutexLock lock(&offer_mu_);
    offer_to_ = master_.get();
  }
  master_->Start();
  return absl::OkStatus();
}

std::string MiniCluster::TaskManagerOf(const std::string& task_id) const {
  std::string address;
  for (const DeployTasksCall& call : gateway_->deploys()) {
    for (const v1::TaskDeploymentDescriptor& tdd : call.request.tasks()) {
      if (tdd.task_id() == task_id) address = call.address;
    }
  }
  for (const StandIn& tm : taskmanagers_) {
    if (tm.address == address) return tm.id;
  }
  ADD_FAILURE() << "task " << task_id << " was never deployed to a TaskManager of the MiniCluster";
  return "";
}

void MiniCluster::Report(int attempt, int chain, int subtask, v1::TaskState state, const std::string& error) {
  v1::TaskStateUpdate update;
  update.set_job_id(kJobId);
  update.set_attempt(attempt);
  update.set_task_id(TaskId(attempt, chain, subtask));
  update.set_taskmanager_id(TaskManagerOf(update.task_id()));
  update.set_state(state);
  update.set_error(error);
  master_->OnTaskStateUpdate(update);
}

void MiniCluster::ReportAll(int attempt, v1::TaskState state) { ReportAllOn(0, attempt, state); }

void MiniCluster::ReportAllOn(int n, int attempt, v1::TaskState state) {
  const std::string address = n > 0 ? TaskManagerAddress(n) : "";
  for (const DeployTasksCall& call : gateway_->deploys()) {
    if (!address.empty() && call.address != address) continue;
    for (const v1::TaskDeploymentDescriptor& tdd : call.request.tasks()) {
      if (tdd.attempt() != attempt) continue;
      v1::TaskStateUpdate update;
      update.set_job_id(kJobId);
      update.set_attempt(attempt);
      update.set_task_id(tdd.task_id());
      update.set_taskmanager_id(TaskManagerOf(tdd.task_id()));
      update.set_state(state);
      master_->OnTaskStateUpdate(update);
    }
  }
}

void MiniCluster::Acknowledge(int attempt, int chain, int subtask, int64_t id) {
  const std::string task_id = TaskId(attempt, chain, subtask);
  const std::optional<v1::TaskDeploymentDescriptor> tdd = Descriptor(task_id);
  ASSERT_TRUE(tdd.has_value()) << "task " << task_id << " was never deployed";
  const std::string file = SnapshotFile(attempt, chain, subtask);
  const std::string contents = absl::StrCat("state of ", task_id, " at checkpoint ", id);
  {
    std::ofstream out(absl::StrCat(checkpoint_dir_, "/chk-", id, "/", file), std::ios::binary);
    out << contents;
    ASSERT_TRUE(out.good()) << "writing the snapshot of " << task_id << " for checkpoint " << id;
  }
  v1::AcknowledgeCheckpointRequest ack;
  ack.set_job_id(kJobId);
  ack.set_attempt(attempt);
  ack.set_task_id(task_id);
  ack.set_checkpoint_id(id);
  v1::TaskStateHandle* state = ack.mutable_state();
  state->set_file(file);
  state->set_size_bytes(static_cast<int64_t>(contents.size()));
  state->set_sha256(std::string(64, '0'));
  *state->mutable_vertex_ids() = tdd->vertex_ids();
  *state->mutable_operator_uids() = tdd->operator_uids();
  state->set_subtask_index(tdd->subtask_index());
  state->set_parallelism(tdd->parallelism());
  master_->OnCheckpointAcknowledged(ack);
}

void MiniCluster::AcknowledgeAll(int attempt, int64_t id) {
  for (const DeployTasksCall& call : gateway_->deploys()) {
    for (const v1::TaskDeploymentDescriptor& tdd : call.request.tasks()) {
      if (tdd.attempt() != attempt) continue;
      Acknowledge(attempt, tdd.vertex_ids(0) == 0 ? 0 : 1, tdd.subtask_index(), id);
    }
  }
}

void MiniCluster::Decline(int attempt, int chain, int subtask, int64_t id, const std::string& reason) {
  v1::DeclineCheckpointRequest decline;
  decline.set_job_id(kJobId);
  decline.set_attempt(attempt);
  decline.set_task_id(TaskId(attempt, chain, subtask));
  decline.set_checkpoint_id(id);
  decline.set_reason(reason);
  master_->OnCheckpointDeclined(decline);
}

std::map<std::string, std::set<std::string>> MiniCluster::DeployedTasks(size_t from, size_t to) const {
  std::map<std::string, std::set<std::string>> out;
  const std::vector<DeployTasksCall> deploys = gateway_->deploys();
  for (size_t i = from; i < to && i < deploys.size(); ++i) {
    for (const v1::TaskDeploymentDescriptor& tdd : deploys[i].request.tasks()) {
      out[deploys[i].address].insert(tdd.task_id());
    }
  }
  return out;
}

std::optional<v1::TaskDeploymentDescriptor> MiniCluster::Descriptor(const std::string& task_id) const {
  std::optional<v1::TaskDeploymentDescriptor> found;
  for (const DeployTasksCall& call : gateway_->deploys()) {
    for (const v1::TaskDeploymentDescriptor& tdd : call.request.tasks()) {
      if (tdd.task_id() == task_id) found = tdd;
    }
  }
  return found;
}

std::vector<InMemoryTaskManagerGateway::NotifyCall> MiniCluster::NotificationsAbout(int64_t id) const {
  std::vector<InMemoryTaskManagerGateway::NotifyCall> out;
  for (InMemoryTaskManagerGateway::NotifyCall& call : gateway_->notifications()) {
    if (call.request.checkpoint_id() == id) out.push_back(std::move(call));
  }
  return out;
}

bool MiniCluster::AwaitState(v1::JobState state) const {
  return WaitFor([&] { return master_->Status().state() == state; }, kPatience, kPoll);
}

std::vector<v1::JobState> MiniCluster::terminal() const {
  absl::MutexLock lock(&mu_);
  return terminal_;
}

std::vector<v1::JobState> MiniCluster::AwaitTerminal() const {
  absl::MutexLock lock(&mu_);
  auto called = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !terminal_.empty(); };
  mu_.AwaitWithTimeout(absl::Condition(&called), kPatience);
  return terminal_;
}

int MiniCluster::allocations() const {
  absl::MutexLock lock(&mu_);
  return allocations_;
}

int MiniCluster::failed_allocations() const {
  absl::MutexLock lock(&mu_);
  return failed_allocations_;
}

int MiniCluster::releases() const {
  absl::MutexLock lock(&mu_);
  return releases_;
}

bool MiniCluster::AwaitFailedAllocations(int count) const {
  absl::MutexLock lock(&mu_);
  auto enough = [this, count]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return failed_allocations_ >= count; };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), kPatience);
}

bool MiniCluster::AdvanceUntil(const std::function<bool()>& done, absl::Duration step, int max_steps, int threads) {
  for (int i = 0; i < max_steps; ++i) {
    if (done()) return true;
    if (!clock_.WaitUntilParked(threads, kPatience)) return false;
    clock_.Advance(step);
  }
  return WaitFor(done, kPatience, kPoll);
}

}  // namespace weir::testing
