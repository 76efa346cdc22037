#include "taskmanager/checkpointing/snapshot_uploader.h"

#include <utility>

namespace weir::taskmanager {

SnapshotUploader::SnapshotUploader(std::function<void()> on_idle)
    : on_idle_(std::move(on_idle)), thread_([this] { Loop(); }) {}

SnapshotUploader::~SnapshotUploader() { Stop(); }

bool SnapshotUploader::Submit(std::function<void()> work) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return false;
  queue_.push_back(std::move(work));
  return true;
}

void SnapshotUploader::Stop() {
  std::deque<std::function<void()>> dropped;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    dropped.swap(queue_);
  }
  if (thread_.joinable()) thread_.join();
}

void SnapshotUploader::Loop() {
  bool ran_since_idle = false;
  while (true) {
    std::function<void()> work;
    bool idle = false;
    {
      absl::MutexLock lock(&mu_);
      idle = queue_.empty();
    }
    if (idle && ran_since_idle && on_idle_) {
      on_idle_();
      ran_since_idle = false;
    }
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      work = std::move(queue_.front());
      queue_.pop_front();
    }
    work();
    ran_since_idle = true;
  }
}

}  // namespace weir::taskmanager
