// Leader retrieval: where the leading JobManager of a cluster is, as etcd
// holds it (the key /weir/<cluster-id>/leader that EtcdLeaderElection puts
// on its lease, jobmanager/ha/etcd_leader_election.h). For standbys (to
// point callers at the leader) and for TaskManagers started with
// high-availability.type etcd (to register with the leader).
//
// Thread-safety: free functions and an immutable object, safe from any
// thread (EtcdClient is thread-safe).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/config/configuration.h"
#include "common/etcd/etcd_client.h"

namespace weir::etcd {

// /weir/<cluster_id>/leader.
std::string LeaderKey(absl::string_view cluster_id);

// The value of `leader_key` (the leader's address); nullopt when no leader
// holds it. Errors are the client's (kUnavailable: etcd unreachable until
// `deadline`).
absl::StatusOr<std::optional<std::string>> ReadLeaderAddress(EtcdClient& client,
                                                             const std::string& leader_key, absl::Time deadline);

class EtcdLeaderRetrieval {
 public:
  // high-availability.cluster-id and high-availability.etcd.* of `config`
  // (kInvalidArgument naming a bad key).
  static absl::StatusOr<std::unique_ptr<EtcdLeaderRetrieval>> FromConfig(const config::Configuration& config);

  // The leader's address now; kNotFound while none leads.
  absl::StatusOr<std::string> LeaderAddress(absl::Duration timeout) const;

  const std::string& cluster_id() const { return cluster_id_; }

 private:
  EtcdLeaderRetrieval(std::unique_ptr<EtcdClient> client, std::string cluster_id)
      : client_(std::move(client)), cluster_id_(std::move(cluster_id)), leader_key_(LeaderKey(cluster_id_)) {}

  const std::unique_ptr<EtcdClient> client_;
  const std::string cluster_id_;
  const std::string leader_key_;
};

}  // namespace weir::etcd
