#include "jobmanager/dispatcher.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/random_id.h"
#include "common/status_macros.h"
#include "common/wire_limits.h"
#include "connectors/connector.h"
#include "jobgraph/graph_spec.h"
#include "jobmanager/checkpoint/savepoint.h"
#include "jobmanager/checkpoint/state_assignment.h"
#include "jobmanager/grpc_taskmanager_gateway.h"

namespace weir::jobmanager {
Dispatcher::Dispatcher(DispatcherOptions options, ResourceManager* resource_manager, ArtifactStore* artifacts)
    : options_(options),
      connectors_(options_.connectors != nullptr ? options_.connectors
                                                 : std::make_shared<const connectors::ConnectorRegistry>()),
      resource_manager_(resource_manager),
      artifacts_(artifacts),
      log_(logging::Get("dispatcher")) {
  resource_manager_->AddLossListener([this](const v1::TaskManagerInfo& info, LossReason reason) {
    std::vector<std::shared_ptr<JobMaster>> masters;
    {
      absl::MutexLock lock(&mu_);
      for (const auto& [id, master] : jobs_) masters.push_back(master);
    }
    for (const auto& master : masters) master->OnTaskManagerLost(info, LossReasonName(reason));
  });
  resource_manager_->AddSlotsListener([this] {
    std::vector<std::shared_ptr<JobMaster>> masters;
    {
      absl::MutexLock lock(&mu_);
      for (const auto& [id, master] : jobs_) masters.push_back(master);
    }
    for (const auto& master : masters) master->OnSlotsOffered();
  });
}

absl::Duration Dispatcher::LockHeldFor() {
  const int64_t now_ms = absl::ToUnixMillis(absl::Now());
  if (mu_.ReaderTryLock()) {
    mu_.ReaderUnlock();
    taken_since_ms_.store(0);
    return absl::ZeroDuration();
  }
  int64_t since = 0;
  taken_since_ms_.compare_exchange_strong(since, now_ms);  // the first of a row
  return absl::Milliseconds(now_ms - taken_since_ms_.load());
}

Dispatcher::~Dispatcher() {
  std::map<std::string, std::shared_ptr<JobMaster>> jobs;
  {
    absl::MutexLock lock(&mu_);
    jobs.swap(jobs_);
  }
}

namespace {

// The request's own counts and sizes (the graph's are ValidateGraph's).
absl::Status CheckSubmissionLimits(const v1::SubmitJobRequest& request) {
  RETURN_IF_ERROR(limits::CheckCount("job arguments", request.args_size(), limits::kMaxJobArgs));
  for (const std::string& arg : request.args()) {
    RETURN_IF_ERROR(limits::CheckLength("a job argument", arg, limits::kMaxJobArgLength));
  }
  RETURN_IF_ERROR(limits::CheckCount("-D settings", request.config_size(), limits::kMaxJobConfigEntries));
  for (const auto& [key, value] : request.config()) {
    RETURN_IF_ERROR(limits::CheckLength("a -D key", key, limits::kMaxPropertyKeyLength));
    RETURN_IF_ERROR(limits::CheckLength(absl::StrCat("-D ", key), value, limits::kMaxPropertyValueLength));
  }
  return absl::OkStatus();
}

// A vertex's properties in the form connectors take.
connectors::Properties PropertiesOf(const v1::JobVertex& v) {
  return connectors::Properties(v.properties().begin(), v.properties().end());
}

std::string VertexText(const v1::JobVertex& v) { return absl::StrCat("vertex ", v.id(), " '", v.name(), "'"); }

// A name one vertex claims (Connector::ExclusiveName) and the vertex.
struct Claim {
  connectors::ExclusiveNameClaim name;
  const v1::JobVertex* vertex = nullptr;
  connectors::Connector::Kind kind = connectors::Connector::Kind::kSink;
};

// The exclusive names the connector vertices of `graph` claim. Vertices
// whose connector `registry` does not know claim nothing (submission
// refused them).
std::vector<Claim> ExclusiveNames(const v1::JobGraphSpec& graph, const connectors::ConnectorRegistry& registry) {
  std::vector<Claim> claims;
  for (const v1::JobVertex& v : graph.vertices()) {
    if (v.connector().empty()) continue;
    const connectors::Connector* connector = registry.Find(v.connector());
    if (connector == nullptr) continue;
    if (std::optional<connectors::ExclusiveNameClaim> name = connector->ExclusiveName(PropertiesOf(v))) {
      claims.push_back(Claim{*std::move(name), &v, connector->kind()});
    }
  }
  return claims;
}

}  // namespace

absl::StatusOr<std::string> Dispatcher::Submit(const v1::SubmitJobRequest& request,
                                               std::vector<std::string>* notices) {
  RETURN_IF_ERROR(Annotate(CheckSubmissionLimits(request), "invalid submission"));
  RETURN_IF_ERROR(Annotate(jobgraph::ValidateGraph(request.graph(), options_.max_parallelism), "invalid job graph"));
  for (const v1::JobVertex& v : request.graph().vertices()) {
    if (v.connector().empty()) continue;
    RETURN_IF_ERROR(Annotate(connectors_->Validate(v.connector(), PropertiesOf(v)), VertexText(v)));
  }
  RETURN_IF_ERROR(artifacts_->SizeOf(request.artifact_sha256()).status());
  if (request.parallelism() < 0 || request.parallelism() > options_.max_parallelism) {
    return absl::InvalidArgumentError(
        absl::StrCat("parallelism ", request.parallelism(), " is out of range 1..", options_.max_parallelism));
  }
  int parallelism = request.parallelism() > 0 ? request.parallelism() : options_.default_parallelism;
  if (parallelism > options_.max_parallelism) {
    return absl::InvalidArgumentError(absl::StrCat("parallelism ", parallelism, " (parallelism.default) exceeds ",
                                                   "pipeline.max-parallelism ", options_.max_parallelism));
  }
  ASSIGN_OR_RETURN(ExecutionGraph graph, ExecutionGraph::Build(request.graph(), parallelism));
  int64_t tasks = 0;
  for (const Chain& chain : graph.chains) tasks += chain.parallelism;
  RETURN_IF_ERROR(limits::CheckCount("parallel tasks in the job", tasks, limits::kMaxTasksPerJob));

  std::vector<std::string> config_notices;
  RETURN_IF_ERROR(CheckJobConfigKeys(request.config(), &config_notices));
  std::string job_id = RandomId();
  ASSIGN_OR_RETURN(JobSettings settings, ResolveJobSettings(options_.cluster_config, request.config(), job_id));
  RETURN_IF_ERROR(CheckConnectorsForJob(request.graph(), settings));
  RETURN_IF_ERROR(CheckExclusiveNamesUnused(request.graph()));
  RETURN_IF_ERROR(ApplySavepoint(request, graph, &settings));
  if (notices != nullptr) {
    *notices = std::move(config_notices);
    notices->insert(notices->end(), settings.savepoint_notices.begin(), settings.savepoint_notices.end());
  }
  ASSIGN_OR_RETURN(std::vector<SlotAssignment> slots, resource_manager_->AllocateSlots(job_id, graph.slots_needed));
  log_->info("job {} '{}' submitted: {} vertices, {} chains, parallelism {}, binary {}", job_id,
             request.graph().name(), request.graph().vertices_size(), graph.chains.size(), parallelism,
             request.artifact_sha256());
  if (options_.store != nullptr) {
    absl::Status saved = options_.store->SaveSubmission(job_id, request);
    if (!saved.ok()) {
      resource_manager_->ReleaseSlots(job_id);
      return Annotate(saved, "cannot persist the job in high-availability.storageDir");
    }
  }
  RETURN_IF_ERROR(StartJob(job_id, request, std::move(graph), std::move(slots), std::move(settings)));
  return job_id;
}

absl::Status Dispatcher::StartJob(const std::string& job_id, const v1::SubmitJobRequest& request,
                                  ExecutionGraph graph, std::vector<SlotAssignment> slots, JobSettings settings) {
  settings.max_parallelism = options_.max_parallelism;
  settings.cancel_timeout = options_.cancel_timeout;
  if (!settings.checkpoint_dir.empty()) settings.checkpoint.max_parallelism = options_.max_parallelism;
  settings.liveness = options_.liveness;
  settings.checkpoint.liveness = options_.liveness;
  settings.checkpoint.leading = options_.leading;
  if (options_.store != nullptr) {
    settings.on_attempt = [this, job_id](int attempt) {
      if (absl::Status s = options_.store->SaveAttempt(job_id, attempt); !s.ok()) {
        log_->warn("job {}: cannot persist attempt {}: {}", job_id, attempt, s.message());
      }
    };
  }
  SlotProvider slot_provider;
  slot_provider.allocate = [this, job_id](int count, const std::vector<std::string>& preferred) {
    return resource_manager_->AllocateSlots(job_id, count, preferred);
  };
  slot_provider.release = [this, job_id] { resource_manager_->ReleaseSlots(job_id); };
  // One per job, as each job's stubs (and so its connections) were its own.
  auto taskmanagers = std::make_shared<GrpcTaskManagerGateway>(
      [this](const std::string& taskmanager_id, const std::string& address) {
        return resource_manager_->CheckpointMessageSession(taskmanager_id, address);
      },
      resource_manager_->leader_epoch());
  absl::StatusOr<std::shared_ptr<JobMaster>> created = JobMaster::Create(
      job_id, request, std::move(graph), std::move(slots), std::move(settings), std::move(slot_provider),
      std::move(taskmanagers),
      [this](const std::string& id, v1::JobState state) {
        resource_manager_->ReleaseSlots(id);
        OnJobEnded(id);
      });
  if (!created.ok()) {
    resource_manager_->ReleaseSlots(job_id);
    return created.status();
  }
  std::shared_ptr<JobMaster> master = *std::move(created);
  {
    absl::MutexLock lock(&mu_);
    if (!leading_) {
      resource_manager_->ReleaseSlots(job_id);
      return absl::UnavailableError(
          absl::StrCat("job ", job_id, " not started: this JobManager lost its leadership meanwhile"));
    }
    jobs_[job_id] = master;
  }
  master->Start();
  return absl::OkStatus();
}

absl::Status Dispatcher::ApplySavepoint(const v1::SubmitJobRequest& request, const ExecutionGraph& graph,
                                        JobSettings* settings) const {
  if (request.savepoint_path().empty()) return absl::OkStatus();
  // A savepoint (relative paths are under state.savepoints.dir) or a
  // retained checkpoint under state.checkpoints.dir; nothing else.
  // A relative path is tried under both, savepoints first.
  absl::StatusOr<std::string> path =
      checkpoint::PathInside(options_.savepoints_dir, request.savepoint_path(), "state.savepoints.dir");
  if ((!path.ok() || !checkpoint::RestorePathExists(*path)) && !options_.checkpoints_dir.empty()) {
    absl::StatusOr<std::string> retained =
        checkpoint::PathInside(options_.checkpoints_dir, request.savepoint_path(), "state.checkpoints.dir");
    if (retained.ok() && (!path.ok() || checkpoint::RestorePathExists(*retained))) path = std::move(retained);
  }
  if (!path.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", request.savepoint_path(), "' is neither inside state.savepoints.dir (", options_.savepoints_dir,
        ") nor inside state.checkpoints.dir (", options_.checkpoints_dir,
        "); a job restores only savepoints and retained checkpoints kept there"));
  }
  ASSIGN_OR_RETURN(checkpoint::RestorePoint savepoint, checkpoint::ReadRestorePoint(*path));
  if (!savepoint.is_savepoint) {
    // A running job's checkpoints are still being written and deleted.
    const std::string owner = std::filesystem::path(savepoint.checkpoint_dir).parent_path().filename().string();
    if (Find(owner) != nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the checkpoint belongs to job ", owner, ", which is still running and may delete it at any moment; "
          "take a savepoint of it (weir savepoint ", owner, ") and submit from that"));
    }
    for (const std::string& why : savepoint.skipped) {
      log_->warn("submission: not restoring from {} ({})", why, *path);
    }
  }
  const v1::CheckpointMetadata& m = savepoint.metadata;
  if (m.max_parallelism() != 0 && m.max_parallelism() != options_.max_parallelism) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the savepoint was taken with pipeline.max-parallelism ", m.max_parallelism(), " and this cluster has ",
        options_.max_parallelism, "; the number of key groups cannot change"));
  }
  ASSIGN_OR_RETURN(checkpoint::StateFit fit,
                   checkpoint::FitStateToGraph(m, request.graph(), graph.vertex_parallelism,
                                               request.allow_non_restored_state()));
  for (const std::string& why : fit.dropped_why) {
    log_->warn("submission drops state: {}", why);
    settings->savepoint_notices.push_back(absl::StrCat("dropped: ", why));
  }
  if (!fit.rescaled.empty()) {
    log_->info("submission rescales the savepoint's state: operators {}", absl::StrJoin(fit.rescaled, ", "));
  }
  if (!fit.fresh.empty()) {
    // A stateless operator added to the job is expected here; a stateful
    // one (a source's offsets, a window) starting empty is worth a look.
    log_->info("submission: operators without state in the savepoint start empty: {}",
               absl::StrJoin(fit.fresh, ", "));
    settings->savepoint_notices.push_back(absl::StrCat(
        "without state in the savepoint (they start empty; a source reads from its configured start): ",
        absl::StrJoin(fit.fresh, ", ")));
  }
  settings->savepoint = m;
  settings->savepoint_dropped_operators = std::move(fit.dropped);
  settings->savepoint_checkpoint_dir = savepoint.checkpoint_dir;
  log_->info("submission starts from {} {} (checkpoint {}, {} tasks with state)",
             savepoint.is_savepoint ? "savepoint" : "retained checkpoint", savepoint.checkpoint_dir,
             m.checkpoint_id(), m.tasks_size());
  return absl::OkStatus();
}

absl::StatusOr<std::string> Dispatcher::TriggerSavepoint(const std::string& job_id,
                                                         const std::string& target_directory) {
  auto master = Find(job_id);
  if (master == nullptr) return absl::NotFoundError(absl::StrCat("no running job ", job_id, " (see weir list)"));
  ASSIGN_OR_RETURN(std::string target,
                   checkpoint::PathInside(options_.savepoints_dir, target_directory, "state.savepoints.dir"));
  return master->TriggerSavepoint(target);
}

absl::StatusOr<std::string> Dispatcher::StopJob(const std::string& job_id, const std::string& target_directory) {
  auto master = Find(job_id);
  if (master == nullptr) return absl::NotFoundError(absl::StrCat("no running job ", job_id, " (see weir list)"));
  ASSIGN_OR_RETURN(std::string target,
                   checkpoint::PathInside(options_.savepoints_dir, target_directory, "state.savepoints.dir"));
  log_->info("job {}: stop-with-savepoint requested", job_id);
  return master->StopWithSavepoint(target);
}

void Dispatcher::OnJobEnded(const std::string& job_id) {
  std::shared_ptr<JobMaster> master = Find(job_id);
  if (master == nullptr) return;
  EndedJob ended{master->Status(), master->Checkpoints(), absl::Now()};
  if (options_.store != nullptr) {
    if (absl::Status s = options_.store->SaveFinal(job_id, ended.status); !s.ok()) {
      log_->warn("job {}: cannot persist its final status (a restarted JobManager would run it again): {}", job_id,
                 s.message());
    }
  }
  absl::MutexLock lock(&mu_);
  ended_[job_id] = std::move(ended);
  // The graph, the tasks and the worker thread go; the status stays.
  jobs_.erase(job_id);
  retired_.push_back(std::move(master));
}

void Dispatcher::Housekeep() {
  std::vector<std::shared_ptr<JobMaster>> retired;
  std::vector<std::string> expired;
  std::optional<std::set<std::string>> artifacts_in_use;
  {
    absl::MutexLock lock(&mu_);
    retired.swap(retired_);
    const absl::Time now = absl::Now();
    // Unused job binaries: looked for at most once a minute (a directory
    // scan), more often when the retention is shorter.
    // Not before Recover took the stored jobs back: their binaries are in use.
    if (recovered_ && now - last_collect_ >= std::min(absl::Minutes(1), options_.artifact_retention)) {
      last_collect_ = now;
      artifacts_in_use.emplace();
      for (const auto& [id, master] : jobs_) artifacts_in_use->insert(master->artifact_sha256());
    }
    for (auto it = ended_.begin(); it != ended_.end();) {
      if (now - it->second.ended_at > options_.ended_job_expiration) {
        expired.push_back(it->first);
        it = ended_.erase(it);
      } else {
        ++it;
      }
    }
    while (static_cast<int>(ended_.size()) > options_.max_ended_jobs) {
      auto oldest = std::min_element(ended_.begin(), ended_.end(), [](const auto& a, const auto& b) {
        return a.second.ended_at < b.second.ended_at;
      });
      expired.push_back(oldest->first);
      ended_.erase(oldest);
    }
  }
  retired.clear();  // joins the finished workers, here, off their own threads
  if (artifacts_in_use.has_value() && artifacts_ != nullptr) {
    artifacts_->Collect(*artifacts_in_use, options_.artifact_retention, absl::Now());
  }
  for (const std::string& id : expired) {
    log_->info("job {} forgotten: it ended longer ago than jobstore.expiration-time (or beyond "
               "jobstore.max-capacity)",
               id);
    if (options_.store != nullptr) (void)options_.store->Remove(id);
  }
}

namespace {

// Whether `checkpoint_dir` holds a complete, intact checkpoint.
bool HasOwnCheckpoint(const std::string& checkpoint_dir) {
  if (checkpoint_dir.empty()) return false;
  absl::StatusOr<checkpoint::CheckpointStorage> storage = checkpoint::CheckpointStorage::OpenExisting(checkpoint_dir);
  if (!storage.ok()) return false;
  absl::StatusOr<std::optional<v1::CheckpointMetadata>> latest = storage->LatestValid(nullptr);
  return latest.ok() && latest->has_value();
}

}  // namespace

void Dispatcher::StepDown() {
  std::map<std::string, std::shared_ptr<JobMaster>> jobs;
  std::vector<std::shared_ptr<JobMaster>> retired;
  {
    absl::MutexLock lock(&mu_);
    leading_ = false;
    recovered_ = false;
    jobs.swap(jobs_);
    retired.swap(retired_);
    ended_.clear();
  }
  log_->info("stepping down: stopping the JobMasters of {} jobs; they stay in the store for the next leader",
             jobs.size());
  // First, at once and for every one: from here on no JobMaster triggers,
  // completes or notifies a checkpoint, deploys, or writes to the store,
  // whatever call it is in the middle of. Then each is destroyed (its
  // executor and checkpoint coordinator joined); each may wait for a call
  // under way, so all at once.
  for (auto& [id, master] : jobs) master->RevokeLeadership();
  for (auto& master : retired) master->RevokeLeadership();
  std::vector<std::thread> stoppers;
  for (auto& [id, master] : jobs) {
    stoppers.emplace_back([master = std::move(master)]() mutable { master.reset(); });
  }
  for (std::thread& stopper : stoppers) stopper.join();
  retired.clear();
  log_->info("stepped down: every JobMaster stopped");
}

void Dispatcher::Recover() {
  {
    absl::MutexLock lock(&mu_);
    leading_ = true;
  }
  struct Done {
    Dispatcher* d;
    ~Done() {
      absl::MutexLock lock(&d->mu_);
      d->recovered_ = true;
    }
  } done{this};
  if (options_.store == nullptr) return;
  std::vector<std::string> problems;
  std::vector<StoredJob> stored = options_.store->Load(&problems);
  for (const std::string& problem : problems) log_->error("not recovering {}", problem);
  int resumed = 0, ended = 0;
  for (StoredJob& job : stored) {
    if (job.final_status.has_value()) {
      absl::MutexLock lock(&mu_);
      // The clock of the retention restarts with this JobManager.
      ended_[job.job_id] = EndedJob{*job.final_status, {}, absl::Now()};
      ++ended;
      continue;
    }
    const v1::SubmitJobRequest& request = job.request;
    const int parallelism = request.parallelism() > 0 ? request.parallelism() : options_.default_parallelism;
    absl::StatusOr<ExecutionGraph> graph = ExecutionGraph::Build(request.graph(), parallelism);
    absl::StatusOr<JobSettings> settings =
        graph.ok() ? ResolveJobSettings(options_.cluster_config, request.config(), job.job_id)
                   : absl::StatusOr<JobSettings>(graph.status());
    absl::Status started = settings.status();
    if (started.ok() && !request.savepoint_path().empty()) {
      // Needed only while the job has no complete checkpoint of its own (the
      // savepoint may be gone by now, and that is fine then).
      absl::Status from_savepoint = ApplySavepoint(request, *graph, &*settings);
      if (!from_savepoint.ok() && HasOwnCheckpoint(settings->checkpoint_dir)) {
        log_->warn("job {}: its savepoint {} is not usable any more ({}); it goes on from its own checkpoints",
                   job.job_id, request.savepoint_path(), from_savepoint.message());
      } else {
        started = from_savepoint;
      }
    }
    if (started.ok()) {
      settings->recovered = true;
      settings->first_attempt = job.last_attempt + 1;
      started = StartJob(job.job_id, request, *std::move(graph), {}, *std::move(settings));
    }
    if (!started.ok()) {
      log_->error("job {} '{}' cannot be recovered: {}", job.job_id, request.graph().name(), started.message());
      v1::JobStatus status;
      status.set_job_id(job.job_id);
      status.set_name(request.graph().name());
      status.set_state(v1::FAILED);
      status.set_error(absl::StrCat("cannot be recovered after a JobManager restart: ", started.message()));
      (void)options_.store->SaveFinal(job.job_id, status);
      absl::MutexLock lock(&mu_);
      ended_[job.job_id] = EndedJob{std::move(status), {}, absl::Now()};
      continue;
    }
    log_->info("job {} '{}' taken over from the previous JobManager (its attempt {} was the last); waiting for slots",
               job.job_id, request.graph().name(), job.last_attempt);
    ++resumed;
  }
  if (resumed + ended > 0) {
    log_->info("recovered {} jobs from {}: {} resumed, {} ended before", resumed + ended, options_.store->location(),
               resumed, ended);
  }
}

absl::Status Dispatcher::CheckConnectorsForJob(const v1::JobGraphSpec& graph, const JobSettings& settings) const {
  connectors::JobCheckpointing checkpointing;
  checkpointing.enabled = !settings.checkpoint_dir.empty();
  checkpointing.aligned = settings.checkpoint.mode == v1::EXACTLY_ONCE;
  checkpointing.interval = settings.checkpoint.interval;
  checkpointing.timeout = settings.checkpoint.timeout;
  checkpointing.restart_delay = settings.restart.LongestDelay();
  std::map<std::pair<std::string, std::string>, std::string> claimed;  // (what, name) -> vertex name
  for (const v1::JobVertex& v : graph.vertices()) {
    const std::string where = VertexText(v);
    // Exactly-once sinks commit when checkpoints complete: they need
    // checkpoints, and aligned ones (an unaligned barrier lets records of
    // the next interval into the transaction it closes).
    if (connectors::WritesExactlyOnce(v.properties())) {
      if (!checkpointing.enabled) {
        return absl::FailedPreconditionError(absl::StrCat(
            where, " writes exactly-once, which commits its output when checkpoints complete, but checkpoints are "
                   "off; set execution.checkpointing.interval (e.g. -Dexecution.checkpointing.interval=1s)"));
      }
      if (!checkpointing.aligned) {
        return absl::FailedPreconditionError(absl::StrCat(
            where, " writes exactly-once, which needs aligned checkpoints, but execution.checkpointing.mode is "
                   "AT_LEAST_ONCE; set it to EXACTLY_ONCE or write at-least-once"));
      }
    }
    if (v.connector().empty()) continue;
    const connectors::Connector* connector = connectors_->Find(v.connector());
    if (connector == nullptr) continue;  // Submit validated the connectors first
    const connectors::Properties properties = PropertiesOf(v);
    RETURN_IF_ERROR(Annotate(connector->ValidateForJob(properties, checkpointing), where));
    std::optional<connectors::ExclusiveNameClaim> claim = connector->ExclusiveName(properties);
    if (!claim.has_value()) continue;
    auto [it, inserted] = claimed.emplace(std::make_pair(claim->what, claim->name), v.name());
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat(where, " and vertex '", it->second, "' both use the ",
                                                     claim->what, " '", claim->name, "': they would ", claim->conflict,
                                                     "; give one of them its own ", claim->setting));
    }
  }
  return absl::OkStatus();
}

absl::Status Dispatcher::CheckExclusiveNamesUnused(const v1::JobGraphSpec& graph) const {
  const std::vector<Claim> mine = ExclusiveNames(graph, *connectors_);
  if (mine.empty()) return absl::OkStatus();
  std::vector<std::shared_ptr<JobMaster>> masters;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, master] : jobs_) masters.push_back(master);
  }
  for (const auto& master : masters) {
    const v1::JobState state = master->Status().state();
    if (state == v1::FINISHED || state == v1::CANCELED || state == v1::FAILED) continue;
    for (const Claim& theirs : ExclusiveNames(master->graph_spec(), *connectors_)) {
      for (const Claim& claim : mine) {
        if (claim.name.what != theirs.name.what || claim.name.name != theirs.name.name) continue;
        return absl::FailedPreconditionError(absl::StrCat(
            "job ", master->job_id(), " ('", master->graph_spec().name(), "') already ", theirs.name.use, " the ",
            theirs.name.what, " '", theirs.name.name, "'; two jobs with one ", claim.name.what, " ",
            claim.name.conflict, ". Cancel that job first, or give this job's ", connectors::KindName(claim.kind),
            " '", claim.vertex->name(), "' its own ", claim.name.setting));
      }
    }
  }
  return absl::OkStatus();
}

std::shared_ptr<JobMaster> Dispatcher::Find(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : it->second;
}

std::vector<v1::JobStatus> Dispatcher::List() const {
  std::vector<std::shared_ptr<JobMaster>> masters;
  std::vector<v1::JobStatus> out;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, master] : jobs_) masters.push_back(master);
    for (const auto& [id, ended] : ended_) out.push_back(ended.status);
  }
  for (const auto& m : masters) out.push_back(m->Status());
  std::sort(out.begin(), out.end(), [](const v1::JobStatus& a, const v1::JobStatus& b) {
    return a.submitted_at_unix_ms() < b.submitted_at_unix_ms();
  });
  return out;
}

absl::StatusOr<v1::JobStatus> Dispatcher::Get(const std::string& job_id) const {
  auto master = Find(job_id);
  if (master == nullptr) {
    absl::MutexLock lock(&mu_);
    if (auto it = ended_.find(job_id); it != ended_.end()) return it->second.status;
    return absl::NotFoundError(absl::StrCat("no job ", job_id, " (see weir list)"));
  }
  return master->Status();
}

absl::Status Dispatcher::Cancel(const std::string& job_id) {
  auto master = Find(job_id);
  if (master == nullptr) {
    absl::MutexLock lock(&mu_);
    if (auto it = ended_.find(job_id); it != ended_.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job_id, " already ended (", v1::JobState_Name(it->second.status.state()), ")"));
    }
    return absl::NotFoundError(absl::StrCat("no job ", job_id, " (see weir list)"));
  }
  return master->Cancel();
}

void Dispatcher::OnTaskStateUpdate(const v1::TaskStateUpdate& update) {
  if (auto master = Find(update.job_id())) master->OnTaskStateUpdate(update);
}

void Dispatcher::OnTaskManagerReport(const v1::ReportTaskMetricsRequest& report) {
  std::vector<std::shared_ptr<JobMaster>> masters;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, master] : jobs_) masters.push_back(master);
  }
  for (const auto& master : masters) master->OnTaskManagerReport(report);
}

void Dispatcher::OnCheckpointAcknowledged(const v1::AcknowledgeCheckpointRequest& ack) {
  if (auto master = Find(ack.job_id())) master->OnCheckpointAcknowledged(ack);
}

void Dispatcher::OnCheckpointsAcknowledged(const v1::AcknowledgeCheckpointsRequest& request) {
  // Mostly one job per batch; in the order they came.
  std::vector<std::pair<std::string, std::vector<const v1::AcknowledgeCheckpointRequest*>>> by_job;
  for (const v1::AcknowledgeCheckpointRequest& ack : request.acks()) {
    auto it = std::find_if(by_job.begin(), by_job.end(), [&](const auto& job) { return job.first == ack.job_id(); });
    if (it == by_job.end()) it = by_job.insert(by_job.end(), {ack.job_id(), {}});
    it->second.push_back(&ack);
  }
  for (const auto& [job_id, acks] : by_job) {
    if (auto master = Find(job_id)) master->OnCheckpointsAcknowledged(acks);
  }
}

void Dispatcher::OnCheckpointDeclined(const v1::DeclineCheckpointRequest& decline) {
  if (auto master = Find(decline.job_id())) master->OnCheckpointDeclined(decline);
}

absl::StatusOr<v1::ListCheckpointsResponse> Dispatcher::Checkpoints(const std::string& job_id) const {
  auto master = Find(job_id);
  if (master == nullptr) {
    absl::MutexLock lock(&mu_);
    if (auto it = ended_.find(job_id); it != ended_.end()) return it->second.checkpoints;
    return absl::NotFoundError(absl::StrCat("no job ", job_id, " (see weir list)"));
  }
  return master->Checkpoints();
}

}  // namespace weir::jobmanager
