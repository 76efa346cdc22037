// NetworkThreads: the fixed set of threads that drive the data exchange's
// asynchronous gRPC operations. Each thread serves one completion queue;
// every stream is bound to one queue, so a stream's completions run on one
// thread, one at a time. How many streams or channels there are does not
// change how many threads there are.
//
// Completion is the tag type on these queues: every operation started on
// them passes a Completion*, whose Done(ok) the queue's thread calls when the
// operation ends.
//
// Thread-safety: queue(), NextQueue() and size() from any thread; Stop (and
// the destructor) from one thread that is not one of these threads, once
// every operation on the queues has ended or is about to (its call finished
// or cancelled, its alarm fired or cancelled) and nothing new will be started.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "grpcpp/completion_queue.h"

namespace weir::taskmanager::network {

class Completion {
 public:
  // `ok`: whether the operation succeeded (gRPC's meaning for each kind).
  virtual void Done(bool ok) = 0;

 protected:
  ~Completion() = default;
};

// A Completion that forwards to `owner->OnCompletion(op, ok)`; a stream keeps
// one per kind of operation it can have in flight.
template <typename Owner, typename Op>
class OpCompletion final : public Completion {
 public:
  OpCompletion(Owner* owner, Op op) : owner_(owner), op_(op) {}
  void Done(bool ok) override { owner_->OnCompletion(op_, ok); }

 private:
  Owner* const owner_;
  const Op op_;
};

class NetworkThreads {
 public:
  // Serves `queues` (at least one) with one thread each, named
  // "<name>-<index>" (at most 15 characters are kept).
  NetworkThreads(std::string name, std::vector<std::unique_ptr<grpc::CompletionQueue>> queues);
  // `threads` new completion queues (for client calls).
  static std::unique_ptr<NetworkThreads> WithNewQueues(std::string name, int threads);
  ~NetworkThreads();

  NetworkThreads(const NetworkThreads&) = delete;
  NetworkThreads& operator=(const NetworkThreads&) = delete;

  int size() const { return static_cast<int>(queues_.size()); }
  grpc::CompletionQueue* queue(int index) const { return queues_.at(index).get(); }
  // The queues in turn, to spread streams over the threads.
  grpc::CompletionQueue* NextQueue();

  // Shuts the queues down, lets the threads deliver what is left and joins
  // them. Idempotent.
  void Stop();

 private:
  void Run(int index);

  const std::string name_;
  std::vector<std::unique_ptr<grpc::CompletionQueue>> queues_;
  std::vector<std::thread> threads_;
  std::atomic<uint64_t> next_{0};
  bool stopped_ = false;
};

}  // namespace weir::taskmanager::network
