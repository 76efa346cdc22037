#include "taskmanager/mailbox/mailbox.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace weir::taskmanager {

Mailbox::Mailbox(std::shared_ptr<Wakeup> wakeup) : wakeup_(std::move(wakeup)) {}

bool Mailbox::Put(std::string description, Mail mail) {
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return false;
    queue_.push_back(Entry{std::move(description), std::move(mail)});
    pending_.fetch_add(1, std::memory_order_release);
  }
  wakeup_->Notify();
  return true;
}

absl::Status Mailbox::RunPending() {
  while (HasMail()) {
    Entry entry;
    {
      absl::MutexLock lock(&mu_);
      if (queue_.empty()) return absl::OkStatus();
      entry = std::move(queue_.front());
      queue_.pop_front();
      pending_.fetch_sub(1, std::memory_order_release);
    }
    absl::Status status = entry.mail();
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat(entry.description, ": ", status.message()));
    }
  }
  return absl::OkStatus();
}

void Mailbox::Close() {
  std::deque<Entry> dropped;
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    dropped.swap(queue_);
    pending_.store(0, std::memory_order_release);
  }
  // Destroyed outside the lock: a mail's captures may do anything.
}

}  // namespace weir::taskmanager
