#include "common/executor/serial_executor.h"

#include <utility>
#include <vector>

#include "common/check.h"

namespace weir {

SerialExecutor::SerialExecutor(std::string name, time::Clock& clock, Liveness* liveness, absl::Duration idle_tick)
    : name_(std::move(name)), clock_(clock), liveness_(liveness), idle_tick_(idle_tick) {}

SerialExecutor::~SerialExecutor() {
  Shutdown();
  Join();
}

void SerialExecutor::Start() {
  absl::MutexLock lock(&join_mu_);
  WEIR_CHECK(!thread_.joinable(), "SerialExecutor " + name_ + " started twice");
  thread_ = std::thread([this] { Run(); });
}

bool SerialExecutor::Queue::Push(absl::AnyInvocable<void()> task) {
  absl::MutexLock lock(&mu);
  if (shutdown) return false;
  tasks.push_back(std::move(task));
  return true;
}

bool SerialExecutor::Post(absl::AnyInvocable<void()> task) { return queue_->Push(std::move(task)); }

bool SerialExecutor::PostAndWait(absl::AnyInvocable<void()> task, absl::Duration max_wait) {
  WEIR_CHECK(!InExecutor(), "SerialExecutor " + name_ + ": PostAndWait from its own thread would never return");
  struct Outcome {
    absl::Mutex mu;
    bool finished ABSL_GUARDED_BY(mu) = false;
    bool ran ABSL_GUARDED_BY(mu) = false;
  };
  // Marks the outcome finished when the posted task goes, run or dropped.
  struct Finish {
    std::shared_ptr<Outcome> outcome;
    explicit Finish(std::shared_ptr<Outcome> o) : outcome(std::move(o)) {}
    Finish(Finish&& other) noexcept : outcome(std::move(other.outcome)) {}
    Finish(const Finish&) = delete;
    ~Finish() {
      if (outcome == nullptr) return;
      absl::MutexLock lock(&outcome->mu);
      outcome->finished = true;
    }
  };
  auto outcome = std::make_shared<Outcome>();
  Post([task = std::move(task), finish = Finish(outcome)]() mutable {
    task();
    absl::MutexLock lock(&finish.outcome->mu);
    finish.outcome->ran = true;
  });
  absl::MutexLock lock(&outcome->mu);
  outcome->mu.AwaitWithTimeout(absl::Condition(&outcome->finished), max_wait);
  return outcome->ran;
}

time::TimerHandle SerialExecutor::PostAt(absl::Time when, absl::AnyInvocable<void()> task) {
  // The id is known only once scheduled; the timer looks itself up by a
  // slot filled in right after.
  auto id = std::make_shared<std::atomic<uint64_t>>(0);
  const time::TimerHandle timer =
      clock_.Schedule(when, [queue = queue_, id, task = std::move(task)]() mutable {
        {
          absl::MutexLock lock(&queue->mu);
          queue->timers.erase(id->load());
        }
        queue->Push(std::move(task));
      });
  id->store(timer.id);
  absl::MutexLock lock(&queue_->mu);
  if (queue_->shutdown) {
    clock_.Cancel(timer);
    return time::TimerHandle{};
  }
  queue_->timers.insert(timer.id);
  return timer;
}

bool SerialExecutor::CancelTimer(time::TimerHandle timer) {
  if (timer.id == 0) return false;
  {
    absl::MutexLock lock(&queue_->mu);
    queue_->timers.erase(timer.id);
  }
  return clock_.Cancel(timer);
}

void SerialExecutor::Shutdown(bool drain) {
  std::vector<uint64_t> timers;
  std::deque<absl::AnyInvocable<void()>> dropped;
  {
    absl::MutexLock lock(&queue_->mu);
    if (queue_->shutdown) return;
    queue_->shutdown = true;
    queue_->drain = drain;
    timers.assign(queue_->timers.begin(), queue_->timers.end());
    queue_->timers.clear();
    if (!drain) dropped.swap(queue_->tasks);
  }
  for (uint64_t id : timers) clock_.Cancel(time::TimerHandle{id});
  // `dropped` goes here, outside the lock: a task's captures may post.
}

void SerialExecutor::Join() {
  WEIR_CHECK(!InExecutor(), "SerialExecutor " + name_ + " joined from its own thread");
  absl::MutexLock lock(&join_mu_);
  if (thread_.joinable()) thread_.join();
}

void SerialExecutor::AssertInExecutor() const {
#ifndef NDEBUG
  WEIR_CHECK(InExecutor(), "not on the executor " + name_);
#endif
}

void SerialExecutor::Run() {
  thread_id_.store(std::this_thread::get_id());
  if (liveness_ != nullptr) live_ = liveness_->Register(name_);
  Queue& queue = *queue_;
  while (true) {
    if (live_ != nullptr) live_->Tick();
    absl::AnyInvocable<void()> task;
    {
      absl::MutexLock lock(&queue.mu);
      auto ready = [&queue]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue.mu) {
        return queue.shutdown || !queue.tasks.empty();
      };
      if (!ready()) clock_.AwaitWithDeadline(&queue.mu, absl::Condition(&ready), clock_.Now() + idle_tick_);
      if (queue.shutdown && (!queue.drain || queue.tasks.empty())) break;
      if (queue.tasks.empty()) continue;  // the idle tick
      task = std::move(queue.tasks.front());
      queue.tasks.pop_front();
    }
    task();
  }
  live_.reset();
  std::deque<absl::AnyInvocable<void()>> dropped;
  {
    absl::MutexLock lock(&queue.mu);
    dropped.swap(queue.tasks);
  }
}

}  // namespace weir
