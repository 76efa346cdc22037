// ResourceManagerConnection: keeps this TaskManager registered with the
// JobManager.
//
// One thread runs sessions one after another: connect, register, heartbeat
// every heartbeat.interval, read the acknowledgements and the checkpoint
// triggers and notifications the JobManager sends on it (handed to the
// CheckpointMessageHandler on the session's reader thread). When the session ends
// (JobManager down, restarted, or silent for heartbeat.timeout) it retries
// with exponential backoff between cluster.registration.initial-timeout and
// cluster.registration.max-timeout, each wait drawn from its upper half
// (jitter, so that the TaskManagers of a restarted JobManager do not all
// come back at once), logging each attempt. Stop deregisters.
//
// Which JobManager: the leader, when several run (high-availability.type
// etcd). With find_leader (the leader's address from etcd) every session
// first asks it, and a wait between sessions ends early once it names
// another JobManager. Without it the session goes to the configured address;
// a standby there refuses the registration with the leader's address
// (trailing metadata weir-leader), where the next session goes at once.
// When that address fails, the configured one is tried again; a standby
// that knows no leader yet (or still names the one that failed) is asked
// again every 250 ms rather than after the backoff.
//
// Thread-safety: Start/Stop from the owning thread; accessors from any thread.
#pragma once

#include <functional>
#include <optional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/logging/logging.h"
#include "weir/v1/cluster.grpc.pb.h"

namespace weir::taskmanager {

struct ConnectionOptions {
  std::string jobmanager_address;  // host:port
  // The leader's address as the coordination service knows it now; null:
  // follow the configured address and the standbys' redirects only.
  std::function<absl::StatusOr<std::string>()> find_leader;
  absl::Duration heartbeat_interval;
  absl::Duration heartbeat_timeout;
  absl::Duration initial_backoff;
  absl::Duration max_backoff;
};

class ResourceManagerConnection {
 public:
  using SlotReporter = std::function<v1::SlotReport()>;
  // Called on the connection thread after each registration, with the
  // JobManager's session id and the address it was reached at.
  // `leader_epoch`: the JobManager's fencing token (RegistrationAccepted).
  using RegistrationListener = std::function<void(const std::string& jobmanager_session_id, int64_t leader_epoch,
                                                  const std::string& jobmanager_address)>;
  // Called on the session's reader thread with each checkpoint trigger or
  // notification (a JobManagerMessage of that kind); it must be quick (the
  // heartbeat acknowledgements queue behind it). Null: the registration
  // does not offer to take them, and the JobManager calls instead.
  using CheckpointMessageHandler = std::function<void(const v1::JobManagerMessage& message)>;

  ResourceManagerConnection(ConnectionOptions options, v1::TaskManagerInfo info, SlotReporter slots,
                            RegistrationListener on_registered, CheckpointMessageHandler on_checkpoint_message = {});
  ~ResourceManagerConnection();

  void Start();
  // Deregisters (when registered) and stops the session thread.
  void Stop(const std::string& reason);

  // The session id of the JobManager we are registered with; empty when not
  // registered.
  std::string jobmanager_session_id() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Runs one session with the JobManager at `address` until it ends;
  // returns true if it got registered. `error` receives why the session
  // ended (unless Stop ended it); `standby` is set when a standby refused
  // the registration: the leader's address it named, or "" for none.
  bool RunSession(const std::string& address, std::string* error, std::optional<std::string>* standby);
  // The address the next session goes to: find_leader's answer, else
  // `fallback`. Connection thread only.
  std::string NextAddress(const std::string& fallback);
  // Waits `wait`, or less once find_leader names another JobManager than
  // `failed`; true when Stop came meanwhile.
  bool WaitBeforeRetry(absl::Duration wait, const std::string& failed) ABSL_LOCKS_EXCLUDED(mu_);

  const ConnectionOptions options_;
  const v1::TaskManagerInfo info_;
  const SlotReporter slots_;
  const RegistrationListener on_registered_;
  const CheckpointMessageHandler on_checkpoint_message_;
  std::shared_ptr<spdlog::logger> log_;
  std::thread thread_;
  // The last find_leader error logged (connection thread only).
  std::string last_lookup_error_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::string stop_reason_ ABSL_GUARDED_BY(mu_);
  std::string jobmanager_session_id_ ABSL_GUARDED_BY(mu_);
  // The running session's context, to cancel it from Stop.
  grpc::ClientContext* session_context_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::Time last_ack_ ABSL_GUARDED_BY(mu_);
  bool session_done_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace weir::taskmanager
