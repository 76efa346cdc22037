#include "jobmanager/leadership_gate.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace weir::jobmanager {

void LeadershipGate::Configure(std::string own_address, std::function<std::string()> find_leader) {
  absl::MutexLock lock(&mu_);
  own_address_ = std::move(own_address);
  find_leader_ = std::move(find_leader);
}

void LeadershipGate::SetLeading(bool leading) {
  absl::MutexLock lock(&mu_);
  leading_ = leading;
  // Whatever was looked up belongs to the last leadership.
  cached_at_ = absl::InfinitePast();
  cached_leader_.clear();
}

bool LeadershipGate::leading() const {
  absl::MutexLock lock(&mu_);
  return leading_;
}

std::string LeadershipGate::own_address() const {
  absl::MutexLock lock(&mu_);
  return own_address_;
}

std::string LeadershipGate::LeaderAddress() {
  std::function<std::string()> find_leader;
  {
    absl::MutexLock lock(&mu_);
    if (leading_) return own_address_;
    if (looking_up_ || absl::Now() - cached_at_ < kLeaderCacheTime || find_leader_ == nullptr) {
      return cached_leader_;
    }
    looking_up_ = true;
    find_leader = find_leader_;
  }
  std::string leader = find_leader();
  absl::MutexLock lock(&mu_);
  looking_up_ = false;
  if (leading_) return own_address_;
  cached_leader_ = std::move(leader);
  cached_at_ = absl::Now();
  return cached_leader_;
}

grpc::Status LeadershipGate::Check(grpc::ServerContextBase* context, absl::string_view what) {
  if (leading()) return grpc::Status::OK;
  const std::string leader = LeaderAddress();
  const std::string own = own_address();
  if (leader.empty() || leader == own) {
    // Empty: a standby that knows no leader (a TaskManager asks it again
    // soon rather than backing off as from a dead address).
    if (context != nullptr) context->AddTrailingMetadata(kLeaderMetadataKey, "");
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        absl::StrCat("JobManager ", own, " is a standby and no leader is elected yet; ", what,
                                     " waits for one: retry shortly"));
  }
  if (context != nullptr) context->AddTrailingMetadata(kLeaderMetadataKey, leader);
  return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                      absl::StrCat("JobManager ", own, " is a standby; ", what, " goes to the leader at ", leader));
}

std::string LeadershipGate::NotReadyReason() {
  if (leading()) return "";
  const std::string leader = LeaderAddress();
  if (leader.empty() || leader == own_address()) return "standby; no leader elected yet";
  return absl::StrCat("standby; leader ", leader);
}

}  // namespace weir::jobmanager
