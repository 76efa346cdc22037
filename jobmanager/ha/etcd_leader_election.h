// EtcdLeaderElection: leader election and fenced job-store writes on etcd v3.
//
// Keys, under /weir/<cluster id>/:
//   leader       the leader's address, attached to its lease
//   store/<key>  the job store (FencedPut, FencedDelete, Get)
//
// A campaign grants a lease (lease_ttl) and runs one transaction: "leader
// absent (create revision 0) -> put leader = my address with my lease, else
// read leader". The winner's epoch is the revision that created the leader
// key: it rises with every new leader. A loser watches the leader key and
// campaigns again the moment it is deleted (revoked or expired).
//
// The leader renews its lease every lease_ttl/3. When it has not renewed it
// for lease_ttl/2 it steps down (Revoked first, then anything else), well
// before the server can let the lease expire, and rejoins as a standby. Stop
// revokes the lease, so a standby takes over at once.
//
// A fenced write is a transaction "leader's create revision == epoch -> put
// (or delete) the key": etcd refuses a deposed leader's write however late it
// arrives.
//
// Threading: as LeaderElection. One thread of its own ("etcd-election")
// campaigns, renews, watches and calls the listener.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/etcd/etcd_client.h"
#include "common/etcd/leader_retrieval.h"
#include "common/retry/backoff.h"
#include "jobmanager/ha/leader_election.h"

namespace weir::jobmanager::ha {

struct EtcdLeaderElectionOptions {
  // high-availability.cluster-id: the key prefix /weir/<cluster_id>/.
  std::string cluster_id = "default";
  // What this process announces as the leader's address (GetLeader).
  std::string address;
  // high-availability.etcd.lease-ttl: rounded up to whole seconds (etcd's
  // unit); at least 1 s.
  absl::Duration lease_ttl = absl::Seconds(3);
  // How long a fenced write or a read may keep retrying.
  absl::Duration write_timeout = absl::Seconds(10);
  // Waits between campaigns after an error (etcd unreachable).
  retry::BackoffOptions backoff{.initial = absl::Milliseconds(100), .max = absl::Seconds(2), .jitter = 0.5};

  absl::Status Validate() const;
};

class EtcdLeaderElection : public LeaderElection {
 public:
  static absl::StatusOr<std::unique_ptr<EtcdLeaderElection>> Create(std::shared_ptr<etcd::EtcdClient> client,
                                                                    EtcdLeaderElectionOptions options);
  ~EtcdLeaderElection() override;

  absl::Status Start(LeadershipListener* listener) override;
  void Stop() override;
  absl::StatusOr<std::optional<LeaderInfo>> GetLeader() override;
  absl::Time LeadingUntil() const override;
  absl::Status FencedPut(Epoch epoch, absl::string_view key, absl::string_view value) override;
  absl::Status FencedDelete(Epoch epoch, absl::string_view key) override;
  absl::StatusOr<std::optional<std::string>> Get(absl::string_view key) override;
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> GetPrefix(absl::string_view prefix,
                                                                             size_t max_keys) override;

  // Cuts this election off from etcd as a network partition would: no
  // keep-alive, no revoke, no campaign is sent while it is on (fenced writes
  // and reads still are, so tests can show them refused).
  void SetCutOffForTesting(bool cut_off) ABSL_LOCKS_EXCLUDED(mu_);

  std::string leader_key() const { return etcd::LeaderKey(options_.cluster_id); }
  std::string store_key(absl::string_view key) const;

 private:
  EtcdLeaderElection(std::shared_ptr<etcd::EtcdClient> client, EtcdLeaderElectionOptions options);

  void Run();
  // One campaign; returns the epoch when won. Otherwise sets *watch_from (the
  // revision to watch the leader key from), or returns an error.
  absl::StatusOr<std::optional<Epoch>> Campaign(int64_t* lease_id, absl::Time* lease_sent, int64_t* watch_from);
  // Leads until the lease cannot be renewed or Stop; then Revoked.
  void Lead(int64_t lease_id, Epoch epoch, absl::Time lease_sent);
  // Watches the leader key from `revision` until it is deleted (OK), or an
  // error or Stop ends the watch.
  absl::Status WatchUntilDeleted(int64_t revision);
  // True when the lease is gone (revoked now or expired before).
  bool RevokeLease(int64_t lease_id, const char* why);

  // Waits until `until`, Stop or a change of cut_off_; false once stopping.
  bool WaitUntil(absl::Time until) ABSL_LOCKS_EXCLUDED(mu_);
  bool stopping() const ABSL_LOCKS_EXCLUDED(mu_);
  bool cut_off() const ABSL_LOCKS_EXCLUDED(mu_);

  absl::Status FencedWrite(Epoch epoch, absl::string_view what, absl::string_view key,
                           etcdserverpb::RequestOp op);

  const std::shared_ptr<etcd::EtcdClient> client_;
  const EtcdLeaderElectionOptions options_;
  const std::string prefix_;
  const absl::Duration ttl_;  // whole seconds

  mutable absl::Mutex mu_;
  absl::CondVar cv_;  // signalled when stopping_ or cut_off_ change
  LeadershipListener* listener_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool cut_off_ ABSL_GUARDED_BY(mu_) = false;
  // The standby's watch, so that Stop can end it.
  etcd::EtcdClient::WatchStream* watch_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::thread thread_;
  // The election thread's own: a lease of an ended leadership that etcd may
  // still hold.
  int64_t unrevoked_lease_ = 0;
  // LeadingUntil, in Unix nanoseconds (INT64_MIN: not leading); written by
  // the election thread.
  std::atomic<int64_t> leading_until_ns_{INT64_MIN};
};

}  // namespace weir::jobmanager::ha
