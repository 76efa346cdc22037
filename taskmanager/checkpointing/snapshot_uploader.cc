#include "taskmanager/checkpointing/snapshot_uploader.h"

#include <utility>

namespace weir::taskmanager {

SnapshotUploader::SnapshotUploader() : thread_([this] { Loop(); }) {}

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
  while (true) {
    std::function<void()> work;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      work = std::move(queue_.front());
      queue_.pop_front();
    }
    work();
  }
}

}  // namespace weir::taskmanager
