// ResourceManager: the JobManager's registry of TaskManagers and their slots.
//
// A TaskManager is a member from the moment its membership session registers
// until the session closes (process death, deregistration) or it sends no
// heartbeat for heartbeat.timeout. Every join and loss is logged with the
// TaskManager's id, address and reason, and reported to listeners (the job
// masters use that to fail over the tasks that ran there). Slots that became
// free (a registration, a job's slots given back) are reported to the slots
// listeners, so that a job waiting for slots asks again at once.
//
// Thread-safety: all public methods are thread-safe. Listeners are called
// without the lock held, from the thread that noticed the change.
#pragma once

#include "absl/strings/string_view.h"
#include <cstdint>
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/logging/logging.h"
#include "common/time/clock.h"
#include "weir/v1/cluster.pb.h"

namespace weir::jobmanager {

// A live membership session; lets the registry close it when the TaskManager
// is declared lost or replaced, and the job masters send checkpoint
// triggers and notifications on it.
class MembershipSession {
 public:
  virtual ~MembershipSession() = default;
  // Ends the session from the JobManager's side (idempotent, non-blocking).
  virtual void Close() = 0;
  // Sends `message` to the TaskManager after everything sent before on this
  // session; never waits for it. False when the session is not open (its
  // registration not answered yet) or has ended; a caller may then call the
  // TaskManager instead, which nothing queued here can overtake any more.
  // Thread-safe.
  virtual bool Send(const v1::JobManagerMessage& message) = 0;
};

struct TaskManagerRecord {
  v1::TaskManagerInfo info;
  v1::SlotReport slots;
  absl::Time registered_at;
  absl::Time last_heartbeat;
  // The job each slot is allocated to ("" = free), as the JobManager sees it.
  std::vector<std::string> slot_jobs;
  int free_slots() const;
};

// One slot given to a job.
struct SlotAssignment {
  std::string taskmanager_id;
  std::string address;
  int slot_index = 0;
};

// Checks the counts and sizes of a slot report from the wire
// (kInvalidArgument naming what is too large).
absl::Status CheckSlotReport(const v1::SlotReport& slots);

enum class LossReason { kConnectionClosed, kHeartbeatTimeout, kDeregistered, kReplaced };
absl::string_view LossReasonName(LossReason reason);

class ResourceManager {
 public:
  using LossListener = std::function<void(const v1::TaskManagerInfo&, LossReason)>;
  using SlotsListener = std::function<void()>;

  // `clock`: the time heartbeats are stamped with and timeouts declared by;
  // null: time::Clock::Real(). Must outlive this object.
  // `leader_epoch`: this JobManager's fencing token (JobStore::TakeLeaderEpoch),
  // told to every TaskManager that registers.
  ResourceManager(absl::Duration heartbeat_timeout, std::string session_id, time::Clock* clock = nullptr,
                  int64_t leader_epoch = 0);
  ~ResourceManager();

  ResourceManager(const ResourceManager&) = delete;
  ResourceManager& operator=(const ResourceManager&) = delete;

  // Starts the thread that declares silent TaskManagers lost.
  void Start();
  // Stops that thread. Idempotent.
  void Stop();

  // Leadership (high-availability.type etcd). A ResourceManager leads from
  // its construction, with the epoch it was given. StepDown ends every
  // membership session and refuses registrations from then on (the
  // TaskManagers look for the new leader); Lead accepts them again, for a
  // leadership of `epoch`, which every TaskManager that registers is told.
  void StepDown(absl::string_view reason) ABSL_LOCKS_EXCLUDED(mu_);
  void Lead(int64_t epoch) ABSL_LOCKS_EXCLUDED(mu_);
  bool leading() const ABSL_LOCKS_EXCLUDED(mu_);

  // Registers (or re-registers) a TaskManager; returns the registration epoch
  // that the session passes to later calls. A previous session of the same id
  // is closed and replaced. Every count and size in `request` is checked
  // first (common/wire_limits.h); a bad one is kInvalidArgument and changes
  // nothing. The registry holds `session` until the registration ends.
  absl::StatusOr<uint64_t> Register(const v1::RegisterTaskManager& request,
                                    std::shared_ptr<MembershipSession> session) ABSL_LOCKS_EXCLUDED(mu_);

  // The session of TaskManager `taskmanager_id` at `address`, when it is a
  // member there and registered with takes_checkpoint_messages; else null
  // (the caller makes calls instead).
  std::shared_ptr<MembershipSession> CheckpointMessageSession(const std::string& taskmanager_id,
                                                              const std::string& address) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Records a heartbeat. Fails (kNotFound) when this registration is no longer
  // current, e.g. it was declared lost; the session should then end.
  absl::Status Heartbeat(const std::string& taskmanager_id, uint64_t epoch, const v1::SlotReport& slots)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Ends a registration; a no-op if `epoch` is no longer current.
  void Unregister(const std::string& taskmanager_id, uint64_t epoch, LossReason reason, absl::string_view detail)
      ABSL_LOCKS_EXCLUDED(mu_);

  std::vector<TaskManagerRecord> List() const ABSL_LOCKS_EXCLUDED(mu_);

  // Allocates `count` free slots to `job_id`, spread over the TaskManagers
  // (most free slots first). Fails with kResourceExhausted, saying how many
  // are free, when there are not enough. Slot i is on TaskManager
  // `preferred[i]` when that one is registered and has a free slot (local
  // recovery: a restarted subtask goes back to its state); `preferred` may
  // be shorter than `count` and hold "" for no preference.
  absl::StatusOr<std::vector<SlotAssignment>> AllocateSlots(const std::string& job_id, int count,
                                                            const std::vector<std::string>& preferred = {})
      ABSL_LOCKS_EXCLUDED(mu_);
  // Frees every slot of `job_id`.
  void ReleaseSlots(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);

  void AddLossListener(LossListener listener) ABSL_LOCKS_EXCLUDED(mu_);
  // Called, without the lock, after a TaskManager registered and after a
  // job's slots were released: free slots may now be enough for a job.
  void AddSlotsListener(SlotsListener listener) ABSL_LOCKS_EXCLUDED(mu_);

  const std::string& session_id() const { return session_id_; }
  int64_t leader_epoch() const { return leader_epoch_.load(); }
  // When the loop that declares silent TaskManagers lost last came round.
  absl::Time last_expiry_check() const { return absl::FromUnixMillis(expiry_tick_ms_.load()); }
  absl::Duration heartbeat_timeout() const { return heartbeat_timeout_; }

 private:
  struct Entry {
    TaskManagerRecord record;
    uint64_t epoch = 0;
    std::shared_ptr<MembershipSession> session;
    bool takes_checkpoint_messages = false;
    // Slots of record.slot_jobs that are free ("").
    int free = 0;
  };

  void ExpireLoop();
  // Removes `id` and returns its info; REQUIRES: mu_ held.
  v1::TaskManagerInfo RemoveLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NotifyLoss(const v1::TaskManagerInfo& info, LossReason reason) ABSL_LOCKS_EXCLUDED(mu_);
  void NotifySlots() ABSL_LOCKS_EXCLUDED(mu_);

  const absl::Duration heartbeat_timeout_;
  const std::string session_id_;
  // Changes only by Lead, while no TaskManager is registered.
  std::atomic<int64_t> leader_epoch_;
  time::Clock& clock_;
  std::shared_ptr<spdlog::logger> log_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> members_ ABSL_GUARDED_BY(mu_);
  uint64_t next_epoch_ ABSL_GUARDED_BY(mu_) = 1;
  std::vector<LossListener> listeners_ ABSL_GUARDED_BY(mu_);
  std::vector<SlotsListener> slots_listeners_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool leading_ ABSL_GUARDED_BY(mu_) = true;

  std::thread expire_thread_;
  std::atomic<int64_t> expiry_tick_ms_{0};
};

}  // namespace weir::jobmanager
