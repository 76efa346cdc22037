// InMemoryLeaderElection: a LeaderElection whose leadership a test (or the
// in-process MiniCluster) grants and revokes by hand, with a store in memory
// fenced exactly like etcd's: a write for an epoch other than the current
// leadership's fails with kAborted.
//
// Threading: as LeaderElection; Grant and Revoke run the listener on the
// caller's thread, so call them from one thread at a time (the test's).
#pragma once

#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "jobmanager/ha/leader_election.h"

namespace weir::jobmanager::ha {

class InMemoryLeaderElection : public LeaderElection {
 public:
  explicit InMemoryLeaderElection(std::string address) : address_(std::move(address)) {}

  absl::Status Start(LeadershipListener* listener) override;
  void Stop() override;
  absl::StatusOr<std::optional<LeaderInfo>> GetLeader() override;
  absl::Time LeadingUntil() const override;
  absl::Status FencedPut(Epoch epoch, absl::string_view key, absl::string_view value) override;
  absl::Status FencedDelete(Epoch epoch, absl::string_view key) override;
  absl::StatusOr<std::optional<std::string>> Get(absl::string_view key) override;
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> GetPrefix(absl::string_view prefix,
                                                                             size_t max_keys) override;

  // Makes this process the leader with a new epoch, above every earlier one,
  // and tells the listener; kFailedPrecondition when not started or already
  // leading.
  absl::StatusOr<Epoch> Grant();
  // Ends the leadership and tells the listener; kFailedPrecondition when not
  // leading.
  absl::Status Revoke();

  // Another process leads (`leader`, with an epoch above every earlier one):
  // this one's leadership, if any, is revoked first.
  absl::StatusOr<Epoch> GrantElsewhere(std::string leader);

 private:
  const std::string address_;

  mutable absl::Mutex mu_;
  LeadershipListener* listener_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool leading_ ABSL_GUARDED_BY(mu_) = false;
  Epoch last_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  // The current leadership (epoch 0: none), this process's or another's.
  std::optional<LeaderInfo> leader_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string, std::less<>> store_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weir::jobmanager::ha
