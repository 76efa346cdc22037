#include "jobmanager/checkpoint/checkpoint_coordinator.h"

#include <time.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/process/fault_injection.h"
#include "common/status_macros.h"
#include "common/wire_limits.h"

namespace weir::jobmanager::checkpoint {
namespace {

constexpr char kNotSurelyLeading[] =
    "this JobManager's leadership is not confirmed (its lease was not renewed in time); nothing is triggered "
    "until it is, or until the leadership is revoked";

// Task names an expiry message lists before it says "and N more".
constexpr size_t kMaxNamesInReason = 10;

// "10 s" for whole seconds, else "250 ms".
std::string DurationText(absl::Duration d) {
  if (d == absl::InfiniteDuration()) return "forever";
  const int64_t ms = absl::ToInt64Milliseconds(d);
  if (ms % 1000 == 0) return absl::StrCat(ms / 1000, " s");
  return absl::StrCat(ms, " ms");
}

// Text from the wire is cut, not refused (common/wire_limits.h).
std::string Cut(absl::string_view text) {
  if (text.size() <= limits::kMaxErrorLength) return std::string(text);
  return absl::StrCat(text.substr(0, limits::kMaxErrorLength), "...");
}

// CPU time of the calling thread.
absl::Duration ThreadCpuNow() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return absl::DurationFromTimespec(ts);
}

CheckpointCoordinatorOptions Sanitized(CheckpointCoordinatorOptions options) {
  options.max_concurrent = std::max(options.max_concurrent, 1);
  options.num_retained = std::max(options.num_retained, 1);
  options.tolerable_failed = std::max(options.tolerable_failed, -1);
  return options;
}

}  // namespace

absl::Status CheckpointCoordinatorOptions::Validate() const {
  if (interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("execution.checkpointing.interval must be positive, not ",
                                                   absl::FormatDuration(interval)));
  }
  if (timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("execution.checkpointing.timeout must be positive, not ",
                                                   absl::FormatDuration(timeout)));
  }
  if (min_pause < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("execution.checkpointing.min-pause must not be negative, not ",
                                                   absl::FormatDuration(min_pause)));
  }
  if (max_concurrent < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "execution.checkpointing.max-concurrent-checkpoints must be at least 1, not ", max_concurrent));
  }
  if (tolerable_failed < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "execution.checkpointing.tolerable-failed-checkpoints must be -1 (unlimited) or more, not ",
        tolerable_failed));
  }
  if (num_retained < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("state.checkpoints.num-retained must be at least 1, not ", num_retained));
  }
  if (max_parallelism < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline.max-parallelism must not be negative, not ", max_parallelism));
  }
  return absl::OkStatus();
}

absl::string_view CheckpointStatusName(CheckpointStatus status) {
  switch (status) {
    case CheckpointStatus::kInProgress: return "IN_PROGRESS";
    case CheckpointStatus::kCompleted: return "COMPLETED";
    case CheckpointStatus::kFailed: return "FAILED";
  }
  return "?";
}

CheckpointCoordinator::CheckpointCoordinator(std::string job_id, CheckpointCoordinatorOptions options,
                                             CheckpointStorage storage, CheckpointTaskGateway* gateway)
    : job_id_(std::move(job_id)),
      options_(Sanitized(options)),
      clock_(options_.clock != nullptr ? *options_.clock : time::Clock::Real()),
      storage_(std::move(storage)),
      gateway_(gateway),
      log_(logging::Get("checkpoint")) {
  const std::vector<int64_t> ids = storage_.ListCheckpointIds();
  // The complete checkpoints already on disk (a previous JobManager's) are
  // part of the history `weir checkpoints` shows.
  std::deque<CheckpointRecord> found;
  for (int64_t id : ids) {
    absl::StatusOr<v1::CheckpointMetadata> metadata = storage_.ReadMetadata(id);
    if (!metadata.ok()) continue;
    CheckpointRecord record;
    record.id = id;
    record.status = CheckpointStatus::kCompleted;
    record.trigger_time = absl::FromUnixMillis(metadata->trigger_time_unix_ms());
    record.duration = absl::Milliseconds(metadata->completion_time_unix_ms() - metadata->trigger_time_unix_ms());
    for (const v1::TaskStateHandle& handle : metadata->tasks()) {
      record.size_bytes += handle.size_bytes() + handle.state_files_bytes();
    }
    record.acknowledged_tasks = record.expected_tasks = metadata->tasks_size();
    found.push_front(std::move(record));
    if (found.size() > kHistorySize) found.pop_back();
  }
  absl::MutexLock lock(&mu_);
  if (!ids.empty()) next_id_ = ids.back() + 1;
  history_ = std::move(found);
}

CheckpointCoordinator::~CheckpointCoordinator() { Stop(); }

void CheckpointCoordinator::Start() {
  int64_t next_id = 0;
  {
    absl::MutexLock lock(&mu_);
    if (started_ || stopping_) return;
    started_ = true;
    next_id = next_id_;
    thread_ = std::thread([this] { Run(); });
  }
  log_->info("job {} checkpoint coordinator started: interval {}, timeout {}, min pause {}, max concurrent {}, "
             "next checkpoint {}, directory {}",
             job_id_, DurationText(options_.interval), DurationText(options_.timeout),
             DurationText(options_.min_pause), options_.max_concurrent, next_id, storage_.job_dir());
}

void CheckpointCoordinator::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  absl::MutexLock join_lock(&join_mu_);
  if (!thread_.joinable()) return;
  if (thread_.get_id() == std::this_thread::get_id()) {
    // From a gateway call: the thread ends when the call returns; a later
    // Stop (the destructor) on another thread joins it.
    return;
  }
  thread_.join();
  log_->info("job {} checkpoint coordinator stopped", job_id_);
}

void CheckpointCoordinator::Revoke() {
  {
    absl::MutexLock lock(&mu_);
    if (revoked_) return;
    revoked_ = true;
    stopping_ = true;
    // A _metadata write or a trigger in progress finishes (neither can be
    // taken back); after them, nothing is triggered or completed.
    mu_.Await(absl::Condition(this, &CheckpointCoordinator::NothingUnderWayLocked));
  }
  log_->warn("job {} checkpoint coordinator revoked: no trigger, completion, notification or file change from "
             "now on",
             job_id_);
}

void CheckpointCoordinator::SetTasks(int attempt, std::vector<std::string> source_task_ids,
                                     std::vector<std::string> all_task_ids) {
  // Every task once, sources included, in the order given.
  std::vector<std::string> all;
  absl::flat_hash_set<std::string> all_set;
  for (std::vector<std::string>* list : {&all_task_ids, &source_task_ids}) {
    for (std::string& task : *list) {
      if (all_set.insert(task).second) all.push_back(task);
    }
  }
  absl::MutexLock lock(&mu_);
  AbortAllLocked("job restarting", AbortKind::kSilent);
  attempt_ = attempt;
  sources_ = std::move(source_task_ids);
  all_tasks_ = std::move(all);
  all_task_set_ = std::move(all_set);
  finished_markers_.clear();
  last_notice_.reset();
  stop_checkpoint_.reset();
  tasks_set_ = true;
  last_trigger_time_ = clock_.Now();
  wake_ = true;
  log_->debug("job {} attempt {}: {} tasks, {} of them sources", job_id_, attempt_, all_tasks_.size(),
              sources_.size());
}

void CheckpointCoordinator::Suspend() {
  absl::MutexLock lock(&mu_);
  AbortAllLocked("job restarting", AbortKind::kSilent);
  suspended_ = true;
  wake_ = true;
}

void CheckpointCoordinator::Resume() {
  absl::MutexLock lock(&mu_);
  suspended_ = false;
  wake_ = true;
}

void CheckpointCoordinator::SetNextCheckpointId(int64_t id) {
  absl::MutexLock lock(&mu_);
  if (id > next_id_) {
    next_id_ = id;
  } else if (id < next_id_) {
    log_->debug("job {}: next checkpoint id {} ignored; ids only grow, the next is {}", job_id_, id, next_id_);
  }
}

absl::StatusOr<int64_t> CheckpointCoordinator::TriggerNow(bool stop) {
  auto request = std::make_shared<ManualTrigger>();
  request->stop = stop;
  absl::MutexLock lock(&mu_);
  if (!started_ || stopping_) {
    return absl::FailedPreconditionError(
        absl::StrCat("the checkpoint coordinator of job ", job_id_, " is not running"));
  }
  RETURN_IF_ERROR(CheckCanTriggerLocked());
  manual_triggers_.push_back(request);
  mu_.Await(absl::Condition(&request->done));
  return request->result;
}

bool CheckpointCoordinator::AwaitCapacity(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || pending_.size() < static_cast<size_t>(options_.max_concurrent);
  };
  clock_.AwaitWithDeadline(&mu_, absl::Condition(&room), deadline);
  return !stopping_ && pending_.size() < static_cast<size_t>(options_.max_concurrent);
}

std::optional<CheckpointRecord> CheckpointCoordinator::AwaitEnd(int64_t id, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto ended = [this, id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const CheckpointRecord* record = RecordLocked(id);
    return stopping_ || record == nullptr || record->status != CheckpointStatus::kInProgress;
  };
  clock_.AwaitWithDeadline(&mu_, absl::Condition(&ended), deadline);
  const CheckpointRecord* record = RecordLocked(id);
  if (record == nullptr) return std::nullopt;
  return *record;
}

void CheckpointCoordinator::FinishStop(int64_t id, bool end_input) {
  absl::MutexLock lock(&mu_);
  if (stop_checkpoint_ != id) return;
  stop_finishes_.push_back({attempt_, id, end_input});
  if (!end_input) stop_checkpoint_.reset();
}

void CheckpointCoordinator::OnAcknowledge(const v1::AcknowledgeCheckpointRequest& ack) {
  const v1::AcknowledgeCheckpointRequest* one = &ack;
  OnAcknowledgeBatch(absl::MakeConstSpan(&one, 1));
}

void CheckpointCoordinator::OnAcknowledgeBatch(absl::Span<const v1::AcknowledgeCheckpointRequest* const> acks) {
  // One lock and one reading of the CPU clock per batch (a TaskManager's
  // acknowledgements come in one call): at thousands of tasks the per-ack
  // overhead is what the coordinator spends.
  const absl::Duration cpu_start = ThreadCpuNow();
  absl::MutexLock lock(&mu_);
  if (revoked_) return;
  // The checkpoints this batch acknowledged for, and how many acks each.
  absl::flat_hash_map<int64_t, int> touched;
  for (const v1::AcknowledgeCheckpointRequest* ack : acks) {
    if (AcknowledgeLocked(*ack)) ++touched[ack->checkpoint_id()];
  }
  if (touched.empty()) return;
  int counted = 0;
  for (const auto& [id, count] : touched) counted += count;
  const absl::Duration cpu = ThreadCpuNow() - cpu_start;
  for (const auto& [id, count] : touched) {
    CheckpointRecord* record = RecordLocked(id);
    if (record == nullptr) continue;
    record->coordinator_cpu += cpu * count / counted;
    auto it = pending_.find(id);
    // Aborted by an ack of this batch: AcknowledgeLocked copied the figures.
    if (it != pending_.end()) CopyFigures(it->second, record);
  }
}

void CheckpointCoordinator::CopyFigures(const Pending& pending, CheckpointRecord* record) {
  record->acknowledged_tasks = static_cast<int>(pending.handles.size());
  record->size_bytes = pending.size_bytes;
  record->longest_alignment_ms = pending.longest_alignment_ms;
  record->longest_sync_ms = pending.longest_sync_ms;
  record->longest_async_ms = pending.longest_async_ms;
  record->longest_pre_barrier_ms = pending.longest_pre_barrier_ms;
  record->longest_start_delay_ms = pending.longest_start_delay_ms;
}

bool CheckpointCoordinator::AcknowledgeLocked(const v1::AcknowledgeCheckpointRequest& ack) {
  const int64_t id = ack.checkpoint_id();
  const std::string& task = ack.task_id();
  if (ack.job_id() != job_id_ || !tasks_set_ || ack.attempt() != attempt_) {
    log_->debug("job {} checkpoint {}: ignored an acknowledgement from task {} of job {} attempt {} "
                "(current attempt {})",
                job_id_, id, task, ack.job_id(), ack.attempt(), attempt_);
    return false;
  }
  auto it = pending_.find(id);
  if (it == pending_.end()) {
    log_->debug("job {} checkpoint {}: ignored an acknowledgement from task {}: the checkpoint is not pending",
                job_id_, id, task);
    return false;
  }
  Pending& pending = it->second;
  auto awaited = pending.awaiting.find(task);
  if (awaited == pending.awaiting.end()) {
    log_->debug("job {} checkpoint {}: ignored an acknowledgement from task {}, which it does not wait for",
                job_id_, id, task);
    return false;
  }
  const v1::TaskStateHandle& handle = ack.state();
  absl::Status usable = ValidateTaskFileName(handle.file());
  if (usable.ok() && (handle.size_bytes() < 0 || handle.state_files_bytes() < 0)) {
    usable = absl::InvalidArgumentError(absl::StrCat("a negative size of ", handle.size_bytes(), " + ",
                                                     handle.state_files_bytes(), " bytes"));
  }
  if (!usable.ok()) {
    // What the checkpoint got before this one, for its record.
    if (CheckpointRecord* record = RecordLocked(id)) CopyFigures(pending, record);
    AbortLocked(id, absl::StrCat("task ", task, " acknowledged with an unusable state handle: ", usable.message()),
                AbortKind::kFailure);
    return true;
  }
  pending.awaiting.erase(awaited);
  pending.handles[task] = handle;
  pending.size_bytes += handle.size_bytes() + handle.state_files_bytes();
  pending.reused_bytes += std::max<int64_t>(0, handle.state_files_reused_bytes());
  pending.longest_alignment_ms = std::max(pending.longest_alignment_ms, ack.alignment_ms());
  pending.longest_sync_ms = std::max(pending.longest_sync_ms, ack.sync_ms());
  pending.longest_async_ms = std::max(pending.longest_async_ms, ack.async_ms());
  pending.longest_pre_barrier_ms = std::max(pending.longest_pre_barrier_ms, ack.pre_barrier_ms());
  pending.longest_start_delay_ms = std::max(pending.longest_start_delay_ms, ack.start_delay_ms());
  log_->debug("job {} checkpoint {}: acknowledged by task {} ({} bytes; start delay {} ms, alignment {} ms, "
              "synchronous part {} ms, asynchronous part {} ms), {} to go",
              job_id_, id, task, handle.size_bytes(), ack.start_delay_ms(), ack.alignment_ms(), ack.sync_ms(),
              ack.async_ms(), pending.awaiting.size());
  if (pending.awaiting.empty()) {
    pending.phase = Phase::kAllAcknowledged;
    ready_.push_back(id);
  }
  return true;
}

void CheckpointCoordinator::OnDecline(const v1::DeclineCheckpointRequest& decline) {
  const int64_t id = decline.checkpoint_id();
  const std::string& task = decline.task_id();
  absl::MutexLock lock(&mu_);
  if (revoked_) return;
  if (decline.job_id() != job_id_ || !tasks_set_ || decline.attempt() != attempt_) {
    log_->debug("job {} checkpoint {}: ignored a decline from task {} of job {} attempt {} (current attempt {})",
                job_id_, id, task, decline.job_id(), decline.attempt(), attempt_);
    return;
  }
  auto it = pending_.find(id);
  if (it == pending_.end() || !it->second.awaiting.contains(task)) {
    log_->debug("job {} checkpoint {}: ignored a decline from task {}: the checkpoint is not pending or does not "
                "wait for it",
                job_id_, id, task);
    return;
  }
  AbortLocked(id, absl::StrCat("task ", task, " declined: ", Cut(decline.reason())), AbortKind::kFailure);
}

void CheckpointCoordinator::OnTaskFinished(int attempt, const std::string& task_id, v1::TaskStateHandle identity) {
  absl::MutexLock lock(&mu_);
  if (!tasks_set_ || attempt != attempt_ || !all_task_set_.contains(task_id)) {
    log_->debug("job {}: ignored that task {} of attempt {} finished (current attempt {})", job_id_, task_id,
                attempt, attempt_);
    return;
  }
  if (finished_markers_.contains(task_id)) return;
  // What every later checkpoint records for it: finished, no file.
  v1::TaskStateHandle marker;
  *marker.mutable_vertex_ids() = identity.vertex_ids();
  *marker.mutable_operator_uids() = identity.operator_uids();
  marker.set_subtask_index(identity.subtask_index());
  marker.set_parallelism(identity.parallelism());
  marker.set_finished(true);
  log_->debug("job {} attempt {}: task {} finished; later checkpoints record it as finished", job_id_, attempt_,
              task_id);
  // A task ends only after a checkpoint taken after its last record
  // completed (or, without a final checkpoint, after its last record
  // reached every consumer, whose snapshots then hold it): a checkpoint still
  // waiting for it loses nothing by recording it as finished.
  for (auto& [id, pending] : pending_) {
    if (pending.phase != Phase::kAwaitingAcks || !pending.awaiting.erase(task_id)) continue;
    pending.handles[task_id] = marker;
    if (pending.awaiting.empty()) {
      pending.phase = Phase::kAllAcknowledged;
      ready_.push_back(id);
    }
  }
  finished_markers_[task_id] = std::move(marker);
  wake_ = true;
}

std::vector<CheckpointRecord> CheckpointCoordinator::History() const {
  const absl::Time now = clock_.Now();
  absl::MutexLock lock(&mu_);
  std::vector<CheckpointRecord> out(history_.begin(), history_.end());
  for (CheckpointRecord& record : out) {
    if (record.status == CheckpointStatus::kInProgress) record.duration = now - record.trigger_time;
  }
  return out;
}

int64_t CheckpointCoordinator::completed_count() const {
  absl::MutexLock lock(&mu_);
  return completed_count_;
}

int64_t CheckpointCoordinator::failed_count() const {
  absl::MutexLock lock(&mu_);
  return failed_count_;
}

std::optional<int64_t> CheckpointCoordinator::latest_completed_id() const {
  absl::MutexLock lock(&mu_);
  return latest_completed_;
}

// ---------------------------------------------------------------------------
// The coordinator's thread.

void CheckpointCoordinator::Run() {
  std::unique_ptr<Liveness::Loop> live;
  if (options_.liveness != nullptr) {
    live = options_.liveness->Register(absl::StrCat("job ", job_id_, " checkpoint coordinator"));
  }
  while (true) {
    if (live != nullptr) live->Tick();
    std::vector<AbortAction> actions;
    std::vector<int64_t> ready;
    std::optional<TriggerPlan> trigger;
    std::vector<StopFinish> stop_finishes;
    std::optional<CompletionNotice> repeat;
    size_t unfinished = 0;
    {
      absl::MutexLock lock(&mu_);
      // Woken at least every kLivenessTickBound, to show it is alive.
      clock_.AwaitWithDeadline(&mu_, absl::Condition(this, &CheckpointCoordinator::HasWorkLocked),
                               std::min(NextWakeupLocked(), clock_.Now() + kLivenessTickBound));
      if (stopping_) break;
      wake_ = false;
      const absl::Time now = clock_.Now();
      ExpireLocked(now);
      actions.swap(actions_);
      ready.swap(ready_);
      stop_finishes.swap(stop_finishes_);
      if (!manual_triggers_.empty()) {
        std::shared_ptr<ManualTrigger> request = std::move(manual_triggers_.front());
        manual_triggers_.pop_front();
        if (absl::Status can = CheckCanTriggerLocked(); !can.ok()) {
          request->result = can;
          request->done = true;
        } else {
          trigger = PlanTriggerLocked(now, std::move(request));
        }
      } else if (CheckCanTriggerLocked().ok() && (trigger_soon_ || now >= NextPeriodicTriggerLocked())) {
        trigger_soon_ = false;
        trigger = PlanTriggerLocked(now, nullptr);
      }
      repeat = RepeatNoticeLocked(now);
      if (repeat.has_value()) {
        last_notice_->sent = now;
        unfinished = all_task_set_.size() - finished_markers_.size();
      }
    }
    // Storage and RPCs to every TaskManager: slow is not stuck.
    Liveness::Loop::Busy busy(live.get());
    for (const AbortAction& action : actions) RunAbortAction(action, /*stopping=*/false);
    for (int64_t id : ready) CompleteCheckpoint(id);
    for (const StopFinish& finish : stop_finishes) {
      log_->info("job {} checkpoint {}: the stop-with-savepoint {}", job_id_, finish.id,
                 finish.end_input ? "ends the sources' input" : "was given up; the sources resume");
      gateway_->FinishStop(finish.attempt, finish.id, finish.end_input);
    }
    if (trigger.has_value()) ExecuteTrigger(*std::move(trigger));
    if (repeat.has_value()) {
      log_->info("job {} attempt {}: every source finished and {} tasks have not; telling them again that "
                 "checkpoint {} completed",
                 job_id_, repeat->attempt, unfinished, repeat->id);
      gateway_->NotifyCheckpoint(repeat->attempt, repeat->id, /*completed=*/true, "");
    }
  }

  std::vector<AbortAction> actions;
  {
    absl::MutexLock lock(&mu_);
    if (revoked_) {
      // Left as they are: the next leader's coordinator decides about them.
      pending_.clear();
      actions_.clear();
    }
    AbortAllLocked("the checkpoint coordinator stopped", AbortKind::kSilent);
    for (const std::shared_ptr<ManualTrigger>& request : manual_triggers_) {
      request->result = absl::CancelledError(
          absl::StrCat("the checkpoint coordinator of job ", job_id_, " stopped"));
      request->done = true;
    }
    manual_triggers_.clear();
    ready_.clear();
    actions.swap(actions_);
  }
  for (const AbortAction& action : actions) RunAbortAction(action, /*stopping=*/true);
}

void CheckpointCoordinator::RequestTriggerSoon() {
  absl::MutexLock lock(&mu_);
  trigger_soon_ = true;
  wake_ = true;
}

bool CheckpointCoordinator::NoMetadataWriteLocked() const { return !writing_metadata_; }

bool CheckpointCoordinator::NothingUnderWayLocked() const { return !writing_metadata_ && triggers_under_way_ == 0; }

bool CheckpointCoordinator::HasWorkLocked() const {
  return stopping_ || wake_ || !actions_.empty() || !ready_.empty() || !manual_triggers_.empty() ||
         !stop_finishes_.empty();
}

absl::Time CheckpointCoordinator::NextWakeupLocked() const {
  absl::Time next = absl::InfiniteFuture();
  for (const auto& [id, pending] : pending_) {
    if (pending.phase == Phase::kAwaitingAcks) next = std::min(next, pending.trigger_time + options_.timeout);
  }
  if (CheckCanTriggerLocked().ok()) next = std::min(next, trigger_soon_ ? clock_.Now() : NextPeriodicTriggerLocked());
  if (RepeatNoticeLocked(absl::InfiniteFuture()).has_value()) {
    next = std::min(next, last_notice_->sent + options_.final_notice_repeat);
  }
  return next;
}

absl::Time CheckpointCoordinator::NextPeriodicTriggerLocked() const {
  return std::max(last_trigger_time_ + options_.interval, last_end_time_ + options_.min_pause);
}

bool CheckpointCoordinator::AllSourcesFinishedLocked() const {
  for (const std::string& source : sources_) {
    if (!finished_markers_.contains(source)) return false;
  }
  return true;
}

std::optional<CheckpointCoordinator::CompletionNotice> CheckpointCoordinator::RepeatNoticeLocked(
    absl::Time now) const {
  if (!tasks_set_ || suspended_ || !last_notice_.has_value() || last_notice_->attempt != attempt_ ||
      !pending_.empty() || sources_.empty() || !AllSourcesFinishedLocked() ||
      finished_markers_.size() >= all_task_set_.size() || now < last_notice_->sent + options_.final_notice_repeat) {
    return std::nullopt;
  }
  return last_notice_;
}

absl::Status CheckpointCoordinator::CheckCanTriggerLocked() const {
  if (!tasks_set_) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job_id_, " has no tasks to checkpoint yet"));
  }
  if (suspended_) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoints of job ", job_id_, " are suspended (the job is restarting)"));
  }
  if (sources_.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job_id_, " attempt ", attempt_, " has no source tasks"));
  }
  if (AllSourcesFinishedLocked()) {
    return absl::FailedPreconditionError(absl::StrCat("every source task of job ", job_id_, " attempt ", attempt_,
                                                      " has finished; no further checkpoints are taken"));
  }
  if (stop_checkpoint_.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job_id_, " is stopping with a savepoint (checkpoint ",
                                                      *stop_checkpoint_, ")"));
  }
  if (pending_.size() >= static_cast<size_t>(options_.max_concurrent)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("job ", job_id_, " has ", pending_.size(),
                     " checkpoints in progress, the maximum (execution.checkpointing.max-concurrent-checkpoints)"));
  }
  return absl::OkStatus();
}

CheckpointCoordinator::TriggerPlan CheckpointCoordinator::PlanTriggerLocked(absl::Time now,
                                                                            std::shared_ptr<ManualTrigger> manual) {
  TriggerPlan plan;
  plan.id = next_id_++;
  plan.attempt = attempt_;
  for (const std::string& source : sources_) {
    if (!finished_markers_.contains(source)) plan.sources.push_back(source);
  }
  plan.timestamp_unix_ms = absl::ToUnixMillis(now);
  plan.stop = manual != nullptr && manual->stop;
  plan.manual = std::move(manual);
  if (plan.stop) stop_checkpoint_ = plan.id;

  Pending pending;
  pending.id = plan.id;
  pending.attempt = attempt_;
  pending.trigger_time = now;
  pending.trigger_unix_ms = plan.timestamp_unix_ms;
  pending.expected = all_tasks_;
  pending.awaiting = all_task_set_;
  for (const auto& [task, marker] : finished_markers_) {
    pending.awaiting.erase(task);
    pending.handles[task] = marker;
  }
  pending.stop = plan.stop;
  pending_.emplace(plan.id, std::move(pending));

  CheckpointRecord record;
  record.id = plan.id;
  record.attempt = attempt_;
  record.trigger_time = now;
  record.expected_tasks = static_cast<int>(all_task_set_.size());
  history_.push_front(std::move(record));
  if (history_.size() > kHistorySize) history_.pop_back();
  last_trigger_time_ = now;
  return plan;
}

void CheckpointCoordinator::ExecuteTrigger(TriggerPlan plan) {
  const absl::Duration cpu_start = ThreadCpuNow();
  const int64_t id = plan.id;
  auto finish_manual = [&] {
    if (plan.manual == nullptr) return;
    absl::MutexLock lock(&mu_);
    plan.manual->result = id;
    plan.manual->done = true;
  };
  {
    absl::MutexLock lock(&mu_);
    if (revoked_ || !Leads()) {
      // Not leading (any more, or not surely): nothing goes out. Without a
      // revocation yet (a process just resumed from a freeze), the
      // checkpoint ends here, its directory not made.
      if (!revoked_) AbortLocked(id, kNotSurelyLeading, AbortKind::kSilent, /*discard=*/false);
      if (plan.manual != nullptr) {
        plan.manual->result = absl::CancelledError(
            absl::StrCat("job ", job_id_, ": ", revoked_ ? "leadership revoked" : kNotSurelyLeading));
        plan.manual->done = true;
      }
      return;
    }
    ++triggers_under_way_;
  }
  const absl::Status created = storage_.CreateCheckpointDir(id);
  {
    absl::MutexLock lock(&mu_);
    if (revoked_ || !Leads()) {
      if (!revoked_) AbortLocked(id, kNotSurelyLeading, AbortKind::kSilent, /*discard=*/false);
      // Revoked while the directory was made: no trigger goes out. The
      // directory stays (a file change after the revocation is what must
      // not happen), empty; the next leader's checkpoints of this id abort.
      --triggers_under_way_;
      if (plan.manual != nullptr) {
        plan.manual->result = absl::CancelledError(
            absl::StrCat("job ", job_id_, ": ", revoked_ ? "leadership revoked" : kNotSurelyLeading));
        plan.manual->done = true;
      }
      return;
    }
    if (!created.ok()) {
      // A directory that already existed is not this checkpoint's to delete.
      AbortLocked(id, absl::StrCat("creating its directory failed: ", created.message()), AbortKind::kFailure,
                  /*discard=*/!absl::IsAlreadyExists(created));
    }
    if (!pending_.contains(id)) {
      // Aborted meanwhile; its fate is in the history.
      --triggers_under_way_;
      if (plan.manual != nullptr) {
        plan.manual->result = id;
        plan.manual->done = true;
      }
      return;
    }
  }
  {
    logging::ScopedFields fields({{"event", "checkpoint_triggered"},
                                  {"job", job_id_},
                                  {"checkpoint_id", id},
                                  {"attempt", plan.attempt},
                                  {"trigger_time_unix_ms", plan.timestamp_unix_ms}});
    log_->info("job {} checkpoint {} triggered (attempt {}{})", job_id_, id, plan.attempt,
               plan.stop ? ", stop-with-savepoint" : "");
  }
  const absl::Time fanout_start = clock_.Now();
  const absl::Status status = gateway_->TriggerCheckpoints(plan.attempt, plan.sources, id, plan.timestamp_unix_ms,
                                                          plan.stop);
  {
    absl::MutexLock lock(&mu_);
    --triggers_under_way_;
    if (CheckpointRecord* record = RecordLocked(id)) {
      record->trigger_fanout = clock_.Now() - fanout_start;
      record->coordinator_cpu += ThreadCpuNow() - cpu_start;
    }
    // A task that ended since the plan (kNotFound) is no failure: the job
    // goes on, and the next checkpoint records it as finished.
    if (!status.ok()) {
      AbortLocked(id, std::string(status.message()),
                  absl::IsNotFound(status) ? AbortKind::kNotCounted : AbortKind::kFailure);
    }
  }
  finish_manual();
}

void CheckpointCoordinator::CompleteCheckpoint(int64_t id) {
  const absl::Duration cpu_start = ThreadCpuNow();
  v1::CheckpointMetadata metadata;
  int attempt = 0;
  int64_t size_bytes = 0;
  int64_t reused_bytes = 0;
  int64_t longest_alignment_ms = 0, longest_sync_ms = 0, longest_async_ms = 0, longest_pre_barrier_ms = 0;
  int64_t longest_start_delay_ms = 0;
  absl::Time trigger_time;
  {
    absl::MutexLock lock(&mu_);
    auto it = pending_.find(id);
    // Aborted since it was queued (SetTasks, Suspend, a task finished), or
    // this JobManager no longer leads.
    if (revoked_ || it == pending_.end() || it->second.phase != Phase::kAllAcknowledged) return;
    // Not surely leading (resumed from a freeze, Revoke not come yet): not
    // completed now; Revoke or the checkpoint timeout ends it.
    if (!Leads()) return;
    Pending& pending = it->second;
    pending.phase = Phase::kWritingMetadata;
    writing_metadata_ = true;
    attempt = pending.attempt;
    size_bytes = pending.size_bytes;
    reused_bytes = pending.reused_bytes;
    longest_alignment_ms = pending.longest_alignment_ms;
    longest_sync_ms = pending.longest_sync_ms;
    longest_async_ms = pending.longest_async_ms;
    longest_pre_barrier_ms = pending.longest_pre_barrier_ms;
    longest_start_delay_ms = pending.longest_start_delay_ms;
    trigger_time = pending.trigger_time;
    metadata.set_job_id(job_id_);
    metadata.set_checkpoint_id(id);
    metadata.set_trigger_time_unix_ms(pending.trigger_unix_ms);
    metadata.set_completion_time_unix_ms(absl::ToUnixMillis(clock_.Now()));
    metadata.set_mode(options_.mode);
    metadata.set_max_parallelism(options_.max_parallelism);
    for (const auto& [uid, signature] : options_.operator_signatures) {
      (*metadata.mutable_operator_signatures())[uid] = signature;
    }
    for (const std::string& task : pending.expected) {
      auto handle = pending.handles.find(task);
      if (handle != pending.handles.end()) *metadata.add_tasks() = handle->second;
    }
  }

  const absl::Time metadata_start = clock_.Now();
  // Checking the files first means a checkpoint whose snapshot a task wrote
  // somewhere else (a directory that is not shared) never becomes complete:
  // the sinks would commit for it and a restore could not use it.
  absl::Status status = storage_.VerifyTaskFiles(metadata);
  if (!status.ok()) {
    status = Annotate(status, "a task's snapshot is not where it acknowledged it");
  } else {
    status = storage_.WriteMetadata(metadata);
  }
  const absl::Time end = clock_.Now();

  {
    absl::MutexLock lock(&mu_);
    writing_metadata_ = false;
    if (!status.ok()) {
      AbortLocked(id, std::string(status.message()), AbortKind::kFailure);
      return;
    }
    pending_.erase(id);
    ++completed_count_;
    latest_completed_ = std::max(latest_completed_.value_or(0), id);
    consecutive_failures_ = 0;
    last_end_time_ = end;
    if (CheckpointRecord* record = RecordLocked(id)) {
      record->status = CheckpointStatus::kCompleted;
      record->duration = end - trigger_time;
      record->metadata_ms = absl::ToInt64Milliseconds(end - metadata_start);
    }
    // An older checkpoint still in progress would only ever restore to an
    // older state than this one.
    std::vector<int64_t> older;
    for (const auto& [other, pending] : pending_) {
      if (other < id) older.push_back(other);
    }
    for (int64_t other : older) {
      AbortLocked(other, absl::StrCat("subsumed by checkpoint ", id), AbortKind::kNotCounted);
    }
  }
  {
    const int64_t duration_ms = absl::ToInt64Milliseconds(end - trigger_time);
    logging::ScopedFields fields({{"event", "checkpoint_completed"},
                                  {"job", job_id_},
                                  {"checkpoint_id", id},
                                  {"attempt", attempt},
                                  {"tasks", metadata.tasks_size()},
                                  {"bytes_written", static_cast<int64_t>(size_bytes)},
                                  {"state_bytes", static_cast<int64_t>(size_bytes + reused_bytes)},
                                  {"duration_ms", duration_ms},
                                  {"longest_alignment_ms", static_cast<int64_t>(longest_alignment_ms)},
                                  {"longest_sync_ms", longest_sync_ms},
                                  {"longest_async_ms", longest_async_ms},
                                  {"longest_pre_barrier_ms", longest_pre_barrier_ms},
                                  {"longest_start_delay_ms", longest_start_delay_ms},
                                  {"metadata_ms", absl::ToInt64Milliseconds(end - metadata_start)}});
    log_->info("job {} checkpoint {} completed: {} tasks, {} bytes written ({} bytes of state in all), {} ms, "
               "longest start delay {} ms, alignment {} ms, synchronous part {} ms (of which flushing before the "
               "barrier {} ms), asynchronous part {} ms; metadata {} ms",
               job_id_, id, metadata.tasks_size(), size_bytes, size_bytes + reused_bytes, duration_ms,
               longest_start_delay_ms, longest_alignment_ms, longest_sync_ms, longest_pre_barrier_ms,
               longest_async_ms, absl::ToInt64Milliseconds(end - metadata_start));
  }
  fault::MaybeCrash(fault::Point::kJobManagerBeforeNotify, id);
  {
    absl::MutexLock lock(&mu_);
    // Revoked while its _metadata was written: complete, but the tasks hear
    // of it from the next leader (which restores it), not from this one.
    if (revoked_) return;
  }
  const absl::Time notify_start = clock_.Now();
  gateway_->NotifyCheckpoint(attempt, id, /*completed=*/true, "");
  {
    absl::MutexLock lock(&mu_);
    if (attempt == attempt_ && (!last_notice_.has_value() || last_notice_->id < id)) {
      last_notice_ = CompletionNotice{attempt, id, clock_.Now()};
    }
    if (CheckpointRecord* record = RecordLocked(id)) {
      record->notify_fanout = clock_.Now() - notify_start;
      record->coordinator_cpu += ThreadCpuNow() - cpu_start;
    }
  }
  Retain(id);
}

void CheckpointCoordinator::RunAbortAction(const AbortAction& action, bool stopping) {
  {
    absl::MutexLock lock(&mu_);
    if (revoked_) return;
  }
  {
    logging::ScopedFields fields({{"event", "checkpoint_aborted"},
                                  {"job", job_id_},
                                  {"checkpoint_id", action.id},
                                  {"attempt", action.attempt},
                                  {"reason", action.reason}});
    log_->warn("job {} checkpoint {} aborted: {}", job_id_, action.id, action.reason);
  }
  if (action.discard) {
    if (absl::Status discarded = storage_.Discard(action.id); !discarded.ok()) {
      log_->warn("job {} checkpoint {}: discarding its directory failed: {}", job_id_, action.id,
                 discarded.message());
    }
  }
  if (stopping) return;
  if (action.notify) gateway_->NotifyCheckpoint(action.attempt, action.id, /*completed=*/false, action.reason);
  if (action.fail_job_reason.has_value()) {
    log_->error("job {} checkpoint {}: failing the job: {}", job_id_, action.id, *action.fail_job_reason);
    gateway_->FailJob(*action.fail_job_reason);
  }
}

void CheckpointCoordinator::Pin(int64_t id) {
  absl::MutexLock lock(&mu_);
  pinned_.insert(id);
}

void CheckpointCoordinator::Unpin(int64_t id) {
  absl::MutexLock lock(&mu_);
  pinned_.erase(id);
}

void CheckpointCoordinator::Retain(int64_t newest_completed) {
  {
    absl::MutexLock lock(&mu_);
    if (revoked_) return;
  }
  const std::vector<int64_t> ids = storage_.ListCheckpointIds();
  int kept = 1;  // newest_completed itself
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
    const int64_t id = *it;
    if (id >= newest_completed) continue;
    {
      absl::MutexLock lock(&mu_);
      if (pending_.contains(id) || pinned_.contains(id)) continue;
    }
    absl::StatusOr<bool> complete = storage_.HasMetadata(id);
    if (!complete.ok()) {
      // Keep what cannot be seen: deleting it could lose a restore point.
      log_->warn("job {} checkpoint {}: kept, its state is unknown: {}", job_id_, id, complete.status().message());
      continue;
    }
    if (*complete && kept < options_.num_retained) {
      ++kept;
      continue;
    }
    if (absl::Status discarded = storage_.Discard(id); !discarded.ok()) {
      log_->warn("job {} checkpoint {}: discarding it failed: {}", job_id_, id, discarded.message());
      continue;
    }
    log_->debug("job {} checkpoint {} discarded: {}", job_id_, id,
                *complete ? "beyond state.checkpoints.num-retained" : "incomplete and older than a completed one");
  }
  // Shared files (incremental checkpoints) no complete checkpoint refers to
  // any more. What checkpoints still in progress uploaded is newer than
  // their trigger (the minute covers clocks that differ between machines);
  // with none in progress every such file goes (an aborted checkpoint's
  // upload still under way then fails, which changes nothing).
  // In an object store, where modification times are not used, the same
  // line is drawn by id: what no checkpoint from the oldest in progress (or
  // the next to be triggered) on can have uploaded.
  absl::Time cutoff = clock_.Now();
  int64_t below_id = 0;
  {
    absl::MutexLock lock(&mu_);
    below_id = next_id_;
    for (const auto& [id, pending] : pending_) {
      cutoff = std::min(cutoff, pending.trigger_time - absl::Minutes(1));
      below_id = std::min(below_id, id);
    }
  }
  absl::StatusOr<int> collected = storage_.CollectSharedGarbage(cutoff, below_id);
  if (!collected.ok()) {
    log_->warn("job {}: shared state files not cleaned up: {}", job_id_, collected.status().message());
  } else if (*collected > 0) {
    log_->debug("job {}: {} shared state files no retained checkpoint refers to were deleted", job_id_, *collected);
  }
}

// ---------------------------------------------------------------------------
// State changes under the lock.

void CheckpointCoordinator::AbortLocked(int64_t id, const std::string& reason, AbortKind kind, bool discard) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  const absl::Time now = clock_.Now();
  AbortAction action;
  action.id = id;
  action.attempt = it->second.attempt;
  action.reason = reason;
  action.notify = kind != AbortKind::kSilent;
  action.discard = discard;
  if (kind == AbortKind::kFailure) {
    ++consecutive_failures_;
    if (options_.tolerable_failed >= 0 && consecutive_failures_ > options_.tolerable_failed) {
      action.fail_job_reason = absl::StrCat(
          consecutive_failures_, " consecutive checkpoints failed, more than "
          "execution.checkpointing.tolerable-failed-checkpoints (", options_.tolerable_failed,
          "); the last, checkpoint ", id, ": ", reason);
      // FailJob once per excess; a restarted job may fail that many again.
      consecutive_failures_ = 0;
    }
  }
  if (CheckpointRecord* record = RecordLocked(id)) {
    record->status = CheckpointStatus::kFailed;
    record->failure_reason = reason;
    record->duration = now - it->second.trigger_time;
  }
  ++failed_count_;
  last_end_time_ = now;
  if (stop_checkpoint_ == id) stop_checkpoint_.reset();  // the tasks resume when told it aborted
  pending_.erase(it);
  actions_.push_back(std::move(action));
}

void CheckpointCoordinator::AbortAllLocked(const std::string& reason, AbortKind kind) {
  // A checkpoint whose _metadata is being written may already be complete.
  mu_.Await(absl::Condition(this, &CheckpointCoordinator::NoMetadataWriteLocked));
  std::vector<int64_t> ids;
  for (const auto& [id, pending] : pending_) ids.push_back(id);
  for (int64_t id : ids) AbortLocked(id, reason, kind);
}

void CheckpointCoordinator::ExpireLocked(absl::Time now) {
  std::vector<std::pair<int64_t, std::string>> expired;
  for (const auto& [id, pending] : pending_) {
    if (pending.phase != Phase::kAwaitingAcks || now < pending.trigger_time + options_.timeout) continue;
    std::vector<absl::string_view> missing;
    size_t more = 0;
    for (const std::string& task : pending.expected) {
      if (!pending.awaiting.contains(task)) continue;
      if (missing.size() < kMaxNamesInReason) {
        missing.push_back(task);
      } else {
        ++more;
      }
    }
    std::string reason = absl::StrCat("expired after ", DurationText(options_.timeout),
                                      "; no acknowledgement from: ", absl::StrJoin(missing, ", "));
    if (more > 0) absl::StrAppend(&reason, " and ", more, " more");
    expired.emplace_back(id, std::move(reason));
  }
  for (const auto& [id, reason] : expired) AbortLocked(id, reason, AbortKind::kFailure);
}

CheckpointRecord* CheckpointCoordinator::RecordLocked(int64_t id) {
  for (CheckpointRecord& record : history_) {
    if (record.id == id) return &record;
  }
  return nullptr;
}

}  // namespace weir::jobmanager::checkpoint
