// LeadershipGate: whether this JobManager leads its cluster, and the answer
// a standby gives to the calls only the leader serves (job and cluster
// RPCs, TaskManager registrations and reports): kFailedPrecondition naming
// the leader's address, which also travels as the trailing metadata
// `weir-leader` so that TaskManagers and `weir` can follow it; kUnavailable
// while no leader is known (an election is under way), with `weir-leader`
// empty.
//
// With high-availability.type none the JobManager has no gate (null): it
// always leads.
//
// Thread-safety: thread-safe. Configure and SetLeading are called by the
// JobManager (SetLeading by its leadership listener); the others from
// gRPC's and the HTTP server's threads.
#pragma once

#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace weir::jobmanager {

// The trailing metadata key that carries the leader's address.
inline constexpr char kLeaderMetadataKey[] = "weir-leader";

class LeadershipGate {
 public:
  // A standby's gate, refusing everything until SetLeading(true).
  LeadershipGate() = default;

  // `own_address`: this JobManager's, for messages (known once its server
  // has a port). `find_leader`: the leader's address as the coordination
  // service knows it now ("" when none leads or the service cannot be
  // asked); called at most once per kLeaderCacheTime, never by two threads
  // at once, and should return within about a second.
  void Configure(std::string own_address, std::function<std::string()> find_leader) ABSL_LOCKS_EXCLUDED(mu_);

  void SetLeading(bool leading) ABSL_LOCKS_EXCLUDED(mu_);
  bool leading() const ABSL_LOCKS_EXCLUDED(mu_);

  // OK while leading. Otherwise the standby's answer to `what` (e.g. "job
  // submission"), with `weir-leader` added to `context`'s trailing metadata
  // (empty when no leader is known).
  grpc::Status Check(grpc::ServerContextBase* context, absl::string_view what) ABSL_LOCKS_EXCLUDED(mu_);

  // The leader's address: this JobManager's own while it leads, else the
  // last one looked up (at most kLeaderCacheTime old); "" when unknown.
  std::string LeaderAddress() ABSL_LOCKS_EXCLUDED(mu_);

  // /readyz: "" while leading, else "standby; leader <address>" (or
  // "standby; no leader elected yet").
  std::string NotReadyReason() ABSL_LOCKS_EXCLUDED(mu_);

  std::string own_address() const ABSL_LOCKS_EXCLUDED(mu_);

  static constexpr absl::Duration kLeaderCacheTime = absl::Seconds(1);

 private:
  mutable absl::Mutex mu_;
  std::string own_address_ ABSL_GUARDED_BY(mu_);
  std::function<std::string()> find_leader_ ABSL_GUARDED_BY(mu_);
  bool leading_ ABSL_GUARDED_BY(mu_) = false;
  std::string cached_leader_ ABSL_GUARDED_BY(mu_);
  absl::Time cached_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // One lookup at a time; the others use the cache.
  bool looking_up_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace weir::jobmanager

// Returns the standby's answer from a gRPC handler unless `gate` (may be
// null: no election) lets the call through.
#define WEIR_RPC_REQUIRE_LEADER(gate, context, what)                         \
  do {                                                                       \
    if ((gate) != nullptr) {                                                 \
      ::grpc::Status weir_leader_status_ = (gate)->Check((context), (what)); \
      if (!weir_leader_status_.ok()) return weir_leader_status_;            \
    }                                                                        \
  } while (false)
