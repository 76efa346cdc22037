#include "jobmanager/ha/in_memory_leader_election.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace weir::jobmanager::ha {

absl::Status InMemoryLeaderElection::Start(LeadershipListener* listener) {
  absl::MutexLock lock(&mu_);
  if (listener_ != nullptr) return absl::FailedPreconditionError("leader election already started");
  listener_ = listener;
  return absl::OkStatus();
}

void InMemoryLeaderElection::Stop() {
  LeadershipListener* listener = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (leading_) {
      leading_ = false;
      leader_.reset();
      listener = listener_;
    }
    listener_ = nullptr;
  }
  if (listener != nullptr) listener->Revoked();
}

absl::StatusOr<Epoch> InMemoryLeaderElection::Grant() {
  LeadershipListener* listener;
  Epoch epoch;
  {
    absl::MutexLock lock(&mu_);
    if (listener_ == nullptr) return absl::FailedPreconditionError("leader election not started");
    if (leading_) return absl::FailedPreconditionError(absl::StrCat("already leading, epoch ", leader_->epoch));
    epoch = ++last_epoch_;
    leading_ = true;
    leader_ = LeaderInfo{address_, epoch};
    listener = listener_;
  }
  listener->Granted(epoch);
  return epoch;
}

absl::Status InMemoryLeaderElection::Revoke() {
  LeadershipListener* listener;
  {
    absl::MutexLock lock(&mu_);
    if (!leading_) return absl::FailedPreconditionError("not leading");
    leading_ = false;
    leader_.reset();
    listener = listener_;
  }
  listener->Revoked();
  return absl::OkStatus();
}

absl::StatusOr<Epoch> InMemoryLeaderElection::GrantElsewhere(std::string leader) {
  bool was_leading;
  {
    absl::MutexLock lock(&mu_);
    was_leading = leading_;
  }
  if (was_leading) {
    absl::Status revoked = Revoke();
    if (!revoked.ok()) return revoked;
  }
  absl::MutexLock lock(&mu_);
  Epoch epoch = ++last_epoch_;
  leader_ = LeaderInfo{std::move(leader), epoch};
  return epoch;
}

absl::StatusOr<std::optional<LeaderInfo>> InMemoryLeaderElection::GetLeader() {
  absl::MutexLock lock(&mu_);
  return leader_;
}

absl::Status InMemoryLeaderElection::FencedPut(Epoch epoch, absl::string_view key, absl::string_view value) {
  absl::MutexLock lock(&mu_);
  if (!leader_.has_value() || leader_->epoch != epoch) {
    return absl::AbortedError(absl::StrCat("write of ", key, " fenced: epoch ", epoch, " no longer leads"));
  }
  store_.insert_or_assign(std::string(key), std::string(value));
  return absl::OkStatus();
}

absl::Status InMemoryLeaderElection::FencedDelete(Epoch epoch, absl::string_view key) {
  absl::MutexLock lock(&mu_);
  if (!leader_.has_value() || leader_->epoch != epoch) {
    return absl::AbortedError(absl::StrCat("delete of ", key, " fenced: epoch ", epoch, " no longer leads"));
  }
  if (auto it = store_.find(key); it != store_.end()) store_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string>> InMemoryLeaderElection::Get(absl::string_view key) {
  absl::MutexLock lock(&mu_);
  auto it = store_.find(key);
  if (it == store_.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> InMemoryLeaderElection::GetPrefix(
    absl::string_view prefix, size_t max_keys) {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<std::string, std::string>> found;
  for (auto it = store_.lower_bound(prefix); it != store_.end() && absl::StartsWith(it->first, prefix); ++it) {
    if (found.size() == max_keys) {
      return absl::ResourceExhaustedError(absl::StrCat("more than ", max_keys, " keys under ", prefix));
    }
    found.emplace_back(it->first, it->second);
  }
  return found;
}

absl::Time InMemoryLeaderElection::LeadingUntil() const {
  absl::MutexLock lock(&mu_);
  return leading_ ? absl::InfiniteFuture() : absl::InfinitePast();
}

}  // namespace weir::jobmanager::ha
