// Mailbox: the one way for other threads to get something done on a task
// thread.
//
// A task thread runs records through its operator chain; checkpoint
// triggers (sources), checkpoint barriers, notifications that a checkpoint
// completed or was aborted, and the completion of a snapshot's asynchronous
// part must run on that same thread, between two records, never concurrently
// with user code. Other threads Put them here as mails; the task's loop runs
// every pending mail before it takes the next record or buffer, and the
// task's Wakeup (shared with its input gate) makes a waiting loop notice a
// new mail at once.
//
// Mails run in the order they were put. A mail may put further mails; they
// run in the same RunPending call. After Close, Put refuses new mails (the
// task is ending) and the pending ones are dropped unrun.
//
// Thread-safety: Put and Close from any thread; RunPending and HasMail from
// the task thread.
#ifndef WEIR_TASKMANAGER_MAILBOX_MAILBOX_H_
#define WEIR_TASKMANAGER_MAILBOX_MAILBOX_H_

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "taskmanager/mailbox/wakeup.h"

namespace weir::taskmanager {

class Mailbox {
 public:
  // A mail; its status fails the task when not OK.
  using Mail = std::function<absl::Status()>;

  explicit Mailbox(std::shared_ptr<Wakeup> wakeup);

  Mailbox(const Mailbox&) = delete;
  Mailbox& operator=(const Mailbox&) = delete;

  // Queues `mail` under `description` (for errors and logs, e.g. "trigger
  // checkpoint 7") and wakes the task thread. Returns false, dropping it,
  // once the mailbox is closed.
  bool Put(std::string description, Mail mail) ABSL_LOCKS_EXCLUDED(mu_);

  // Runs every pending mail, in order, including mails they put. Stops at
  // the first mail that fails and returns its error, annotated with its
  // description; the mails after it stay queued.
  absl::Status RunPending() ABSL_LOCKS_EXCLUDED(mu_);

  // Whether a mail is waiting (cheap: no lock).
  bool HasMail() const { return pending_.load(std::memory_order_acquire) > 0; }

  // Refuses further mails and drops the pending ones. Idempotent.
  void Close() ABSL_LOCKS_EXCLUDED(mu_);

  const std::shared_ptr<Wakeup>& wakeup() const { return wakeup_; }

 private:
  struct Entry {
    std::string description;
    Mail mail;
  };

  const std::shared_ptr<Wakeup> wakeup_;
  std::atomic<int> pending_{0};
  absl::Mutex mu_;
  std::deque<Entry> queue_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace weir::taskmanager

#endif  // WEIR_TASKMANAGER_MAILBOX_MAILBOX_H_
