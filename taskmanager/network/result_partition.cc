#include "taskmanager/network/result_partition.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/logging/logging.h"

namespace weir::taskmanager::network {

ResultPartition::ResultPartition(std::string id, int num_subpartitions, int capacity)
    : id_(std::move(id)), num_subpartitions_(num_subpartitions), capacity_(capacity) {
  WEIR_CHECK(num_subpartitions >= 1, absl::StrCat("partition ", id_, ": needs at least one subpartition"));
  WEIR_CHECK(capacity >= 1, absl::StrCat("partition ", id_, ": subpartition capacity must be >= 1"));
  absl::MutexLock lock(&mu_);
  subpartitions_.resize(num_subpartitions);
}

void ResultPartition::CheckIndex(int subpartition) const {
  WEIR_CHECK(subpartition >= 0 && subpartition < num_subpartitions_,
             absl::StrCat("partition ", id_, ": no subpartition ", subpartition, " (has ", num_subpartitions_, ")"));
}

bool ResultPartition::Add(int subpartition, Buffer buffer, bool over_capacity) {
  CheckIndex(subpartition);
  std::shared_ptr<const AvailabilityListener> listener;
  {
    absl::MutexLock lock(&mu_);
    Subpartition& sub = subpartitions_[subpartition];
    auto has_room = [this, &sub, over_capacity]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return released_ || over_capacity || admit_over_capacity_ || static_cast<int>(sub.queue.size()) < capacity_;
    };
    if (!has_room()) {
      // Only the slow path reads the clock.
      const absl::Time since = absl::Now();
      if (blocked_producers_++ == 0) blocked_since_ = since;
      mu_.Await(absl::Condition(&has_room));
      if (--blocked_producers_ == 0) blocked_time_ += absl::Now() - blocked_since_;
    }
    if (released_) return false;
    sub.queue.push_back(std::move(buffer));
    if (sub.queue.size() == 1) listener = sub.listener;
  }
  if (listener != nullptr) (*listener)();
  return true;
}

void ResultPartition::AdmitOverCapacity(bool admit) {
  absl::MutexLock lock(&mu_);  // a blocked Add sees it when the lock is released
  admit_over_capacity_ = admit;
}

std::optional<Buffer> ResultPartition::Poll(int subpartition) {
  CheckIndex(subpartition);
  absl::MutexLock lock(&mu_);
  std::deque<Buffer>& queue = subpartitions_[subpartition].queue;
  if (released_ || queue.empty()) return std::nullopt;
  Buffer buffer = std::move(queue.front());
  queue.pop_front();
  return buffer;
}

absl::Status ResultPartition::AttachConsumer(int subpartition, AvailabilityListener listener) {
  CheckIndex(subpartition);
  absl::MutexLock lock(&mu_);
  Subpartition& sub = subpartitions_[subpartition];
  if (sub.listener != nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("subpartition ", subpartition, " of partition ", id_, " already has a consumer"));
  }
  sub.listener = std::make_shared<const AvailabilityListener>(std::move(listener));
  return absl::OkStatus();
}

void ResultPartition::DetachConsumer(int subpartition) {
  CheckIndex(subpartition);
  absl::MutexLock lock(&mu_);
  subpartitions_[subpartition].listener.reset();
}

void ResultPartition::Release() {
  std::vector<std::shared_ptr<const AvailabilityListener>> listeners;
  {
    absl::MutexLock lock(&mu_);
    if (released_) return;
    released_ = true;
    for (Subpartition& sub : subpartitions_) {
      sub.queue.clear();
      if (sub.listener != nullptr) listeners.push_back(sub.listener);
    }
  }
  logging::Get("network")->debug("released result partition {}", id_);
  for (const auto& listener : listeners) (*listener)();
}

bool ResultPartition::released() const {
  absl::MutexLock lock(&mu_);
  return released_;
}

int ResultPartition::buffered(int subpartition) const {
  CheckIndex(subpartition);
  absl::MutexLock lock(&mu_);
  return static_cast<int>(subpartitions_[subpartition].queue.size());
}

absl::Duration ResultPartition::backpressured_time() const {
  absl::MutexLock lock(&mu_);
  return blocked_producers_ > 0 ? blocked_time_ + (absl::Now() - blocked_since_) : blocked_time_;
}

bool ResultPartition::backpressured() const {
  absl::MutexLock lock(&mu_);
  return blocked_producers_ > 0;
}

absl::Status PartitionManager::Register(std::shared_ptr<ResultPartition> partition) {
  WEIR_CHECK(partition != nullptr, "registering a null partition");
  const std::string id = partition->id();
  std::vector<std::function<void()>> to_notify;
  {
    absl::MutexLock lock(&mu_);
    if (!partitions_.emplace(id, std::move(partition)).second) {
      return absl::AlreadyExistsError(absl::StrCat("result partition ", id, " is already registered"));
    }
    for (auto it = listeners_.begin(); it != listeners_.end();) {
      if (it->second.partition_id == id) {
        to_notify.push_back(std::move(it->second.fn));
        listeners_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  logging::Get("network")->debug("registered result partition {}", id);
  for (const auto& fn : to_notify) fn();
  return absl::OkStatus();
}

std::shared_ptr<ResultPartition> PartitionManager::Unregister(const std::string& id) {
  std::shared_ptr<ResultPartition> partition;
  {
    absl::MutexLock lock(&mu_);
    auto it = partitions_.find(id);
    if (it == partitions_.end()) return nullptr;
    partition = std::move(it->second);
    partitions_.erase(it);
  }
  logging::Get("network")->debug("unregistered result partition {}", id);
  return partition;
}

std::shared_ptr<ResultPartition> PartitionManager::Lookup(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = partitions_.find(id);
  return it == partitions_.end() ? nullptr : it->second;
}

absl::StatusOr<std::shared_ptr<ResultPartition>> PartitionManager::WaitFor(const std::string& id,
                                                                           absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  auto registered = [this, &id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return partitions_.contains(id); };
  if (!mu_.AwaitWithDeadline(absl::Condition(&registered), deadline)) {
    return absl::NotFoundError(absl::StrCat("result partition ", id, " is not registered on this TaskManager"));
  }
  return partitions_.at(id);
}

PartitionManager::ListenerId PartitionManager::AddRegistrationListener(const std::string& id,
                                                                       std::function<void()> listener) {
  absl::MutexLock lock(&mu_);
  ListenerId listener_id = next_listener_id_++;
  listeners_.emplace(listener_id, RegistrationListener{id, std::move(listener)});
  return listener_id;
}

void PartitionManager::RemoveRegistrationListener(ListenerId listener_id) {
  absl::MutexLock lock(&mu_);
  listeners_.erase(listener_id);
}

size_t PartitionManager::size() const {
  absl::MutexLock lock(&mu_);
  return partitions_.size();
}

}  // namespace weir::taskmanager::network
