#include "jobmanager/resource_manager.h"

#include <algorithm>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/logging/logging.h"
#include "common/status_macros.h"
#include "common/wire_limits.h"

namespace weir::jobmanager {
namespace {

// Checks what a TaskManager claims about itself before anything is built
// from it.
absl::Status CheckRegistration(const v1::RegisterTaskManager& request) {
  const v1::TaskManagerInfo& info = request.info();
  if (info.taskmanager_id().empty()) return absl::InvalidArgumentError("registration without a taskmanager_id");
  if (info.address().empty()) return absl::InvalidArgumentError("registration without an address");
  RETURN_IF_ERROR(limits::CheckLength("taskmanager_id", info.taskmanager_id(), limits::kMaxIdLength));
  RETURN_IF_ERROR(limits::CheckLength("address", info.address(), limits::kMaxAddressLength));
  RETURN_IF_ERROR(limits::CheckLength("hostname", info.hostname(), limits::kMaxAddressLength));
  RETURN_IF_ERROR(limits::CheckLength("version", info.version(), limits::kMaxNameLength));
  if (info.slots_total() <= 0 || info.slots_total() > limits::kMaxSlotsPerTaskManager) {
    return absl::InvalidArgumentError(absl::StrCat("registration with ", info.slots_total(),
                                                   " slots; expected 1..", limits::kMaxSlotsPerTaskManager,
                                                   " (taskmanager.numberOfTaskSlots)"));
  }
  if (info.rest_port() < 0 || info.rest_port() > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("registration with HTTP port ", info.rest_port(),
                                                   "; expected 0..65535"));
  }
  return CheckSlotReport(request.slots());
}

}  // namespace

absl::Status CheckSlotReport(const v1::SlotReport& slots) {
  RETURN_IF_ERROR(limits::CheckCount("slots in the slot report", slots.slots_size(),
                                     limits::kMaxSlotsPerTaskManager));
  for (const v1::SlotStatus& slot : slots.slots()) {
    RETURN_IF_ERROR(limits::CheckLength("a slot's job_id", slot.job_id(), limits::kMaxIdLength));
    RETURN_IF_ERROR(limits::CheckLength("a slot's allocation_id", slot.allocation_id(), limits::kMaxIdLength));
  }
  return absl::OkStatus();
}

absl::string_view LossReasonName(LossReason reason) {
  switch (reason) {
    case LossReason::kConnectionClosed: return "connection closed";
    case LossReason::kHeartbeatTimeout: return "heartbeat timeout";
    case LossReason::kDeregistered: return "deregistered";
    case LossReason::kReplaced: return "replaced by a new registration";
  }
  return "?";
}

int TaskManagerRecord::free_slots() const {
  return static_cast<int>(std::count(slot_jobs.begin(), slot_jobs.end(), std::string()));
}

ResourceManager::ResourceManager(absl::Duration heartbeat_timeout, std::string session_id, time::Clock* clock,
                                 int64_t leader_epoch)
    : heartbeat_timeout_(heartbeat_timeout),
      session_id_(std::move(session_id)),
      leader_epoch_(leader_epoch),
      clock_(clock != nullptr ? *clock : time::Clock::Real()),
      log_(logging::Get("resourcemanager")) {}

ResourceManager::~ResourceManager() { Stop(); }

void ResourceManager::Start() {
  expiry_tick_ms_ = absl::ToUnixMillis(clock_.Now());
  expire_thread_ = std::thread([this] { ExpireLoop(); });
}

void ResourceManager::Stop() {
  std::vector<std::shared_ptr<MembershipSession>> sessions;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (auto& [id, entry] : members_) sessions.push_back(entry.session);
  }
  // Lets the sessions end so that the server can shut down. Closed without
  // the lock: a session's end may run its reaction (which unregisters) on
  // this thread.
  for (const auto& session : sessions) session->Close();
  if (expire_thread_.joinable()) expire_thread_.join();
}

void ResourceManager::StepDown(absl::string_view reason) {
  std::vector<std::shared_ptr<MembershipSession>> sessions;
  std::vector<std::string> ids;
  {
    absl::MutexLock lock(&mu_);
    if (!leading_) return;
    leading_ = false;
    for (auto& [id, entry] : members_) {
      sessions.push_back(entry.session);
      ids.push_back(id);
    }
    // No loss listener is told: the jobs that used these slots are no
    // longer this JobManager's to run.
    members_.clear();
  }
  if (ids.empty()) {
    log_->info("JobManager {} refuses registrations from now on ({})", session_id_, reason);
  } else {
    log_->info("JobManager {} refuses registrations from now on ({}); closing the sessions of {} TaskManagers: {}",
               session_id_, reason, ids.size(), absl::StrJoin(ids, ", "));
  }
  // Without the lock, as in Stop.
  for (const auto& session : sessions) session->Close();
}

void ResourceManager::Lead(int64_t epoch) {
  absl::MutexLock lock(&mu_);
  leading_ = true;
  leader_epoch_ = epoch;
  log_->info("JobManager {} accepts registrations for leader epoch {}", session_id_, epoch);
}

bool ResourceManager::leading() const {
  absl::MutexLock lock(&mu_);
  return leading_;
}

absl::StatusOr<uint64_t> ResourceManager::Register(const v1::RegisterTaskManager& request,
                                                    std::shared_ptr<MembershipSession> session) {
  RETURN_IF_ERROR(CheckRegistration(request));
  const v1::TaskManagerInfo& info = request.info();
  // Built completely before it is inserted: the expiry loop and the
  // allocator may see an entry as soon as the lock is released.
  Entry entry;
  entry.record.info = info;
  entry.record.slots = request.slots();
  entry.record.registered_at = clock_.Now();
  entry.record.last_heartbeat = entry.record.registered_at;
  entry.record.slot_jobs.assign(info.slots_total(), "");
  entry.free = info.slots_total();
  entry.session = std::move(session);
  entry.takes_checkpoint_messages = request.takes_checkpoint_messages();
  std::optional<v1::TaskManagerInfo> replaced;
  std::shared_ptr<MembershipSession> replaced_session;
  uint64_t epoch = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!leading_) {
      return absl::FailedPreconditionError(
          absl::StrCat("JobManager ", session_id_, " does not lead the cluster (it is a standby)"));
    }
    auto it = members_.find(info.taskmanager_id());
    if (it != members_.end()) {
      replaced_session = it->second.session;
      replaced = RemoveLocked(info.taskmanager_id());
    }
    epoch = next_epoch_++;
    entry.epoch = epoch;
    members_.emplace(info.taskmanager_id(), std::move(entry));
  }
  if (replaced_session != nullptr) replaced_session->Close();  // without the lock, as in Stop
  if (replaced.has_value()) {
    log_->info("TaskManager {} at {} lost: {}", replaced->taskmanager_id(), replaced->address(),
               LossReasonName(LossReason::kReplaced));
    NotifyLoss(*replaced, LossReason::kReplaced);
  }
  log_->info("TaskManager {} at {} registered with {} slots (host {}, pid {}, version {}, HTTP port {}){}",
             info.taskmanager_id(), info.address(), info.slots_total(), info.hostname(), info.pid(),
             info.version(), info.rest_port(),
             request.takes_checkpoint_messages() ? "" : "; checkpoint triggers and notifications go to it as calls");
  NotifySlots();
  return epoch;
}

std::shared_ptr<MembershipSession> ResourceManager::CheckpointMessageSession(const std::string& taskmanager_id,
                                                                              const std::string& address) const {
  absl::MutexLock lock(&mu_);
  auto it = members_.find(taskmanager_id);
  if (it == members_.end() || !it->second.takes_checkpoint_messages || it->second.record.info.address() != address) {
    return nullptr;
  }
  return it->second.session;
}

absl::Status ResourceManager::Heartbeat(const std::string& taskmanager_id, uint64_t epoch,
                                        const v1::SlotReport& slots) {
  RETURN_IF_ERROR(CheckSlotReport(slots));
  absl::MutexLock lock(&mu_);
  auto it = members_.find(taskmanager_id);
  if (it == members_.end() || it->second.epoch != epoch) {
    return absl::NotFoundError(absl::StrCat("TaskManager ", taskmanager_id,
                                            " is not registered (declared lost); register again"));
  }
  it->second.record.last_heartbeat = clock_.Now();
  it->second.record.slots = slots;
  return absl::OkStatus();
}

void ResourceManager::Unregister(const std::string& taskmanager_id, uint64_t epoch, LossReason reason,
                                 absl::string_view detail) {
  v1::TaskManagerInfo info;
  {
    absl::MutexLock lock(&mu_);
    auto it = members_.find(taskmanager_id);
    if (it == members_.end() || it->second.epoch != epoch) return;
    info = RemoveLocked(taskmanager_id);
  }
  if (detail.empty()) {
    log_->info("TaskManager {} at {} lost: {}", info.taskmanager_id(), info.address(), LossReasonName(reason));
  } else {
    log_->info("TaskManager {} at {} lost: {} ({})", info.taskmanager_id(), info.address(),
               LossReasonName(reason), detail);
  }
  NotifyLoss(info, reason);
}

std::vector<TaskManagerRecord> ResourceManager::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<TaskManagerRecord> out;
  out.reserve(members_.size());
  for (const auto& [id, entry] : members_) out.push_back(entry.record);
  std::sort(out.begin(), out.end(), [](const TaskManagerRecord& a, const TaskManagerRecord& b) {
    return a.info.taskmanager_id() < b.info.taskmanager_id();
  });
  return out;
}

absl::StatusOr<std::vector<SlotAssignment>> ResourceManager::AllocateSlots(const std::string& job_id, int count,
                                                                          const std::vector<std::string>& preferred) {
  absl::MutexLock lock(&mu_);
  int64_t free = 0, total = 0;
  for (const auto& [id, entry] : members_) {
    free += entry.free;
    total += entry.record.info.slots_total();
  }
  if (free < count) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the job needs ", count, " slots but the cluster has ", free, " free (", members_.size(),
        " TaskManagers, ", total, " slots in all); lower the parallelism (-p) or add TaskManagers"));
  }
  auto take = [&job_id](Entry& entry) -> SlotAssignment {
    auto& jobs = entry.record.slot_jobs;
    int index = static_cast<int>(std::find(jobs.begin(), jobs.end(), std::string()) - jobs.begin());
    jobs[index] = job_id;
    --entry.free;
    return {entry.record.info.taskmanager_id(), entry.record.info.address(), index};
  };
  std::vector<std::optional<SlotAssignment>> chosen(count);
  for (int i = 0; i < count && i < static_cast<int>(preferred.size()); ++i) {
    auto it = members_.find(preferred[i]);
    if (it != members_.end() && it->second.free > 0) chosen[i] = take(it->second);
  }
  // The rest spread: always the TaskManager with the most free slots (the
  // smallest id among equals), O(log TaskManagers) per slot.
  auto order = [](const std::pair<int, const std::string*>& a, const std::pair<int, const std::string*>& b) {
    return a.first != b.first ? a.first < b.first : *a.second < *b.second;
  };
  std::set<std::pair<int, const std::string*>, decltype(order)> candidates(order);
  for (auto& [id, entry] : members_) {
    if (entry.free > 0) candidates.emplace(-entry.free, &id);
  }
  std::vector<SlotAssignment> out;
  out.reserve(count);
  for (std::optional<SlotAssignment>& slot : chosen) {
    if (!slot.has_value()) {
      auto best = candidates.begin();
      const std::string* id = best->second;
      candidates.erase(best);
      Entry& entry = members_.find(*id)->second;
      slot = take(entry);
      if (entry.free > 0) candidates.emplace(-entry.free, id);
    }
    out.push_back(*std::move(slot));
  }
  return out;
}

void ResourceManager::ReleaseSlots(const std::string& job_id) {
  bool released = false;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, entry] : members_) {
      for (std::string& job : entry.record.slot_jobs) {
        if (job == job_id) {
          job.clear();
          ++entry.free;
          released = true;
        }
      }
    }
  }
  if (released) NotifySlots();
}

void ResourceManager::AddLossListener(LossListener listener) {
  absl::MutexLock lock(&mu_);
  listeners_.push_back(std::move(listener));
}

void ResourceManager::AddSlotsListener(SlotsListener listener) {
  absl::MutexLock lock(&mu_);
  slots_listeners_.push_back(std::move(listener));
}

void ResourceManager::NotifySlots() {
  std::vector<SlotsListener> listeners;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    listeners = slots_listeners_;
  }
  for (const SlotsListener& listener : listeners) listener();
}

v1::TaskManagerInfo ResourceManager::RemoveLocked(const std::string& id) {
  auto it = members_.find(id);
  v1::TaskManagerInfo info = std::move(it->second.record.info);
  members_.erase(it);
  return info;
}

void ResourceManager::NotifyLoss(const v1::TaskManagerInfo& info, LossReason reason) {
  std::vector<LossListener> listeners;
  {
    absl::MutexLock lock(&mu_);
    // The JobManager itself is stopping: the sessions end because of that,
    // not because a TaskManager was lost.
    if (stopping_) return;
    listeners = listeners_;
  }
  for (const LossListener& listener : listeners) listener(info, reason);
}

void ResourceManager::ExpireLoop() {
  // Check often enough that a loss is declared within a small fraction of the
  // timeout after it is due.
  const absl::Duration tick = std::clamp(heartbeat_timeout_ / 20, absl::Milliseconds(10), absl::Milliseconds(200));
  while (true) {
    expiry_tick_ms_ = absl::ToUnixMillis(clock_.Now());
    std::vector<std::pair<v1::TaskManagerInfo, absl::Duration>> expired;
    std::vector<std::shared_ptr<MembershipSession>> sessions;
    {
      absl::MutexLock lock(&mu_);
      auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
      if (clock_.AwaitWithTimeout(&mu_, absl::Condition(&stop), tick)) return;
      absl::Time now = clock_.Now();
      std::vector<std::string> ids;
      for (const auto& [id, entry] : members_) {
        if (now - entry.record.last_heartbeat > heartbeat_timeout_) ids.push_back(id);
      }
      for (const std::string& id : ids) {
        absl::Duration silent = now - members_[id].record.last_heartbeat;
        sessions.push_back(members_[id].session);
        expired.emplace_back(RemoveLocked(id), silent);
      }
    }
    for (const auto& session : sessions) session->Close();  // without the lock, as in Stop
    for (const auto& [info, silent] : expired) {
      log_->warn("TaskManager {} at {} lost: {} (no heartbeat for {:.1f} s, timeout {:.1f} s)",
                 info.taskmanager_id(), info.address(), LossReasonName(LossReason::kHeartbeatTimeout),
                 absl::ToDoubleSeconds(silent), absl::ToDoubleSeconds(heartbeat_timeout_));
      NotifyLoss(info, LossReason::kHeartbeatTimeout);
    }
  }
}

}  // namespace weir::jobmanager
