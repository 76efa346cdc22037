#include "taskmanager/resource_manager_connection.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/config/configuration.h"
#include "common/logging/logging.h"
#include "common/retry/backoff.h"
#include "common/rpc/rpc.h"

namespace weir::taskmanager {
namespace {

// The trailing metadata in which a standby JobManager names the leader
// (jobmanager/leadership_gate.h).
constexpr char kLeaderMetadataKey[] = "weir-leader";

// How often a TaskManager waiting to register again asks find_leader.
constexpr absl::Duration kLeaderPoll = absl::Milliseconds(250);
// How soon a TaskManager asks a standby again that knows no leader yet.
constexpr absl::Duration kStandbyPoll = absl::Milliseconds(250);

}  // namespace

ResourceManagerConnection::ResourceManagerConnection(ConnectionOptions options, v1::TaskManagerInfo info,
                                                     SlotReporter slots, RegistrationListener on_registered,
                                                     CheckpointMessageHandler on_checkpoint_message)
    : options_(std::move(options)),
      info_(std::move(info)),
      slots_(std::move(slots)),
      on_registered_(std::move(on_registered)),
      on_checkpoint_message_(std::move(on_checkpoint_message)),
      log_(logging::Get("taskmanager")) {}

ResourceManagerConnection::~ResourceManagerConnection() { Stop("shutdown"); }

void ResourceManagerConnection::Start() {
  thread_ = std::thread([this] {
    // Equal jitter: every TaskManager of a cluster loses its session when
    // the JobManager restarts, and would otherwise come back in waves.
    retry::Backoff backoff(
        {.initial = options_.initial_backoff, .multiplier = 2, .max = options_.max_backoff, .jitter = 0.5});
    int attempt = 0;
    // Where the last standby said the leader is; "" when none said.
    std::string redirect;
    // The last address that could not be reached: a standby still naming it
    // (etcd keeps a dead leader's key until its lease expires) is asked
    // again shortly instead of being followed.
    std::string unreachable;
    // Redirects followed in a row without a registration: a second one
    // waits, so that two standbys naming each other (an election under
    // way) do not make a busy loop.
    int redirects = 0;
    // A standby that knows no leader yet is asked every kStandbyPoll: during
    // an election, or for as long as etcd is out. Say so every 10 s, not at
    // every ask.
    logging::RateLimiter standby_log(std::chrono::seconds(10));
    while (true) {
      ++attempt;
      const std::string address = NextAddress(redirect.empty() ? options_.jobmanager_address : redirect);
      std::string error;
      std::optional<std::string> standby;  // set when a standby answered: the leader it named, or ""
      bool registered = RunSession(address, &error, &standby);
      {
        absl::MutexLock lock(&mu_);
        if (stopping_) return;
      }
      if (registered) {
        backoff.Reset();
        attempt = 1;
        redirects = 0;
        unreachable.clear();
      }
      absl::Duration wait;
      if (standby.has_value()) {
        if (!standby->empty() && *standby != address && *standby != unreachable) {
          log_->info("TaskManager {}: the JobManager at {} is a standby; registering with the leader at {}",
                     info_.taskmanager_id(), address, *standby);
          redirect = *standby;
          if (++redirects == 1) continue;
        }
        // An election under way: ask again soon.
        wait = kStandbyPoll;
      } else {
        if (!registered) {
          // A leader that is gone: back to the configured address.
          unreachable = address;
          redirect.clear();
        }
        wait = backoff.Next();
      }
      int64_t suppressed = 0;
      if (!standby.has_value() || standby_log.ShouldLog(&suppressed)) {
        log_->warn("TaskManager {}: cannot register with the JobManager at {} (attempt {}): {}; retrying in {}{}",
                   info_.taskmanager_id(), address, attempt, error, config::FormatDuration(wait),
                   suppressed > 0 ? absl::StrCat(" (", suppressed, " such retries not logged)") : "");
      }
      if (WaitBeforeRetry(wait, address)) return;
    }
  });
}

std::string ResourceManagerConnection::NextAddress(const std::string& fallback) {
  if (!options_.find_leader) return fallback;
  absl::StatusOr<std::string> leader = options_.find_leader();
  if (leader.ok()) {
    last_lookup_error_.clear();
    return *leader;
  }
  // Logged when it changes, not at every try of an outage.
  if (leader.status().ToString() != last_lookup_error_) {
    log_->warn("TaskManager {}: cannot find the leading JobManager ({}); trying {}", info_.taskmanager_id(),
               leader.status().message(), fallback);
    last_lookup_error_ = leader.status().ToString();
  }
  return fallback;
}

bool ResourceManagerConnection::WaitBeforeRetry(absl::Duration wait, const std::string& failed) {
  const absl::Time until = absl::Now() + wait;
  auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
  while (true) {
    absl::Duration step = until - absl::Now();
    // A new leader is usually elected while the TaskManager waits: look
    // every kLeaderPoll, and go at once when it is another JobManager.
    if (options_.find_leader) step = std::min(step, kLeaderPoll);
    {
      absl::MutexLock lock(&mu_);
      if (step <= absl::ZeroDuration()) return stopping_;
      if (mu_.AwaitWithTimeout(absl::Condition(&stop), step)) return true;
    }
    if (absl::Now() >= until) return false;
    absl::StatusOr<std::string> leader = options_.find_leader();
    if (leader.ok() && *leader != failed) return false;
  }
}

void ResourceManagerConnection::Stop(const std::string& reason) {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    stop_reason_ = reason;
    // A session still waiting to be accepted has nothing to deregister.
    if (session_context_ != nullptr && jobmanager_session_id_.empty()) session_context_->TryCancel();
  }
  if (thread_.joinable()) thread_.join();
}

std::string ResourceManagerConnection::jobmanager_session_id() const {
  absl::MutexLock lock(&mu_);
  return jobmanager_session_id_;
}

bool ResourceManagerConnection::RunSession(const std::string& address, std::string* error,
                                           std::optional<std::string>* standby) {
  auto channel = rpc::CreateChannel(address);
  auto stub = v1::ResourceManagerService::NewStub(channel);
  grpc::ClientContext context;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return false;
    session_context_ = &context;
    session_done_ = false;
  }
  auto stream = stub->Connect(&context);

  v1::TaskManagerMessage hello;
  *hello.mutable_register_()->mutable_info() = info_;
  *hello.mutable_register_()->mutable_slots() = slots_();
  hello.mutable_register_()->set_takes_checkpoint_messages(on_checkpoint_message_ != nullptr);
  v1::JobManagerMessage reply;
  bool registered = false;
  if (stream->Write(hello) && stream->Read(&reply)) {
    if (reply.has_accepted()) {
      registered = true;
    } else if (reply.has_rejected()) {
      *error = absl::StrCat("registration rejected: ", reply.rejected().reason());
    }
  }
  if (!registered) {
    // The JobManager ended the stream (or it broke): Finish has its reason.
    grpc::Status status = stream->Finish();
    if (error->empty()) *error = status.ok() ? "session closed before registration" : status.error_message();
    // A standby names the leader.
    const auto& trailers = context.GetServerTrailingMetadata();
    if (auto leader = trailers.find(kLeaderMetadataKey); leader != trailers.end()) {
      *standby = std::string(leader->second.data(), leader->second.size());
    }
    absl::MutexLock lock(&mu_);
    session_context_ = nullptr;
    return false;
  }

  const auto& accepted = reply.accepted();
  // The JobManager's heartbeat settings govern the whole cluster.
  const absl::Duration interval = accepted.heartbeat_interval_ms() > 0
                                      ? absl::Milliseconds(accepted.heartbeat_interval_ms())
                                      : options_.heartbeat_interval;
  const absl::Duration timeout = accepted.heartbeat_timeout_ms() > 0
                                     ? absl::Milliseconds(accepted.heartbeat_timeout_ms())
                                     : options_.heartbeat_timeout;
  {
    absl::MutexLock lock(&mu_);
    jobmanager_session_id_ = accepted.jobmanager_session_id();
    last_ack_ = absl::Now();
  }
  log_->info("TaskManager {} registered with JobManager {} (leader epoch {}) at {} ({} slots, heartbeat every {})",
             info_.taskmanager_id(), accepted.jobmanager_session_id(), accepted.leader_epoch(), address,
             info_.slots_total(), config::FormatDuration(interval));
  on_registered_(accepted.jobmanager_session_id(), accepted.leader_epoch(), address);

  std::thread reader([&] {
    v1::JobManagerMessage message;
    while (stream->Read(&message)) {
      if (message.has_heartbeat_ack()) {
        absl::MutexLock lock(&mu_);
        last_ack_ = absl::Now();
      } else if ((message.has_trigger_checkpoints() || message.has_notify_checkpoint()) && on_checkpoint_message_) {
        on_checkpoint_message_(message);
      }
    }
    absl::MutexLock lock(&mu_);
    session_done_ = true;
  });

  int64_t sequence = 0;
  bool deregistering = false;
  while (true) {
    absl::MutexLock lock(&mu_);
    auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || session_done_; };
    mu_.AwaitWithTimeout(absl::Condition(&wake), interval);
    if (stopping_) {
      deregistering = true;
      break;
    }
    if (session_done_) break;
    if (absl::Now() - last_ack_ > timeout) {
      log_->warn("TaskManager {}: no heartbeat acknowledgement from JobManager {} for {:.1f} s; reconnecting",
                 info_.taskmanager_id(), jobmanager_session_id_, absl::ToDoubleSeconds(absl::Now() - last_ack_));
      context.TryCancel();
      break;
    }
    v1::TaskManagerMessage heartbeat;
    heartbeat.mutable_heartbeat()->set_sequence(sequence++);
    mu_.Unlock();
    *heartbeat.mutable_heartbeat()->mutable_slots() = slots_();
    bool ok = stream->Write(heartbeat);
    mu_.Lock();
    if (!ok) break;
  }

  if (deregistering) {
    std::string reason;
    {
      absl::MutexLock lock(&mu_);
      reason = stop_reason_;
    }
    v1::TaskManagerMessage bye;
    bye.mutable_deregister()->set_reason(reason);
    if (stream->Write(bye)) stream->WritesDone();
    // Give the JobManager a moment to close the session, then cut it.
    absl::MutexLock lock(&mu_);
    auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return session_done_; };
    if (!mu_.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(2))) context.TryCancel();
  }
  reader.join();
  grpc::Status status = stream->Finish();
  absl::MutexLock lock(&mu_);
  session_context_ = nullptr;
  if (deregistering) {
    log_->info("TaskManager {} deregistered from JobManager {}", info_.taskmanager_id(), jobmanager_session_id_);
  } else {
    *error = absl::StrCat("session with JobManager ", jobmanager_session_id_, " ended: ",
                          status.ok() ? "closed by the JobManager" : status.error_message());
  }
  jobmanager_session_id_.clear();
  return true;
}

}  // namespace weir::taskmanager
