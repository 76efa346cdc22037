// RpcFanOut: one unary call to each of many TaskManagers at once, so that a
// step that must reach every TaskManager (deploy, trigger, notify, cancel)
// takes about one round trip and the slowest TaskManager's time, not the
// sum of them all.
//
//   RpcFanOut<v1::NotifyCheckpointResponse> fan_out;
//   for (address : addresses) {
//     fan_out.Add(absl::Seconds(2), [&](grpc::ClientContext* c, grpc::CompletionQueue* cq) {
//       return StubFor(address)->PrepareAsyncNotifyCheckpoint(c, request, cq);
//     });
//   }
//   for (const auto& call : fan_out.Wait()) ... call.status, call.response
//
// At most `max_in_flight` calls are outstanding; the rest start (their
// `start` runs, serializing the request) as earlier ones finish, so what a
// `start` refers to must stay valid until Wait returns.
//
// Thread-safety: none; one thread adds and waits. No lock should be held
// across Wait (it blocks for up to the longest deadline).
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace weir::jobmanager {

template <typename Response>
class RpcFanOut {
 public:
  using Start = std::function<std::unique_ptr<grpc::ClientAsyncResponseReader<Response>>(grpc::ClientContext*,
                                                                                        grpc::CompletionQueue*)>;
  struct Call {
    grpc::Status status;
    Response response;
  };

  explicit RpcFanOut(size_t max_in_flight = 256) : max_in_flight_(max_in_flight == 0 ? 1 : max_in_flight) {}
  ~RpcFanOut() {
    if (!waited_) Wait();
  }
  RpcFanOut(const RpcFanOut&) = delete;
  RpcFanOut& operator=(const RpcFanOut&) = delete;

  // Queues a call with `timeout` from when it starts; starts it at once when
  // fewer than max_in_flight are outstanding. `wait_for_ready`: a call whose
  // connection is not up yet (or failed for a moment) waits for it until
  // the timeout instead of failing at once — for calls that must reach a
  // TaskManager known to be alive, while hundreds of connections open at
  // once.
  void Add(absl::Duration timeout, Start start, bool wait_for_ready = false) {
    calls_.push_back(std::make_unique<Pending>());
    calls_.back()->timeout = timeout;
    calls_.back()->wait_for_ready = wait_for_ready;
    calls_.back()->start = std::move(start);
    queued_.push_back(calls_.size() - 1);
    StartQueued();
  }

  // Waits for every call; the results in the order of Add.
  std::vector<Call> Wait() {
    waited_ = true;
    while (finished_ < calls_.size()) {
      void* tag = nullptr;
      bool ok = false;
      if (!cq_.Next(&tag, &ok)) break;
      --in_flight_;
      ++finished_;
      StartQueued();
    }
    cq_.Shutdown();
    void* tag = nullptr;
    bool ok = false;
    while (cq_.Next(&tag, &ok)) {
    }
    std::vector<Call> out;
    out.reserve(calls_.size());
    for (auto& call : calls_) out.push_back({std::move(call->status), std::move(call->response)});
    return out;
  }

 private:
  struct Pending {
    absl::Duration timeout;
    bool wait_for_ready = false;
    Start start;
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientAsyncResponseReader<Response>> reader;
    grpc::Status status;
    Response response;
  };

  void StartQueued() {
    while (in_flight_ < max_in_flight_ && !queued_.empty()) {
      Pending& call = *calls_[queued_.front()];
      void* tag = reinterpret_cast<void*>(queued_.front());
      queued_.pop_front();
      call.context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(call.timeout));
      call.context.set_wait_for_ready(call.wait_for_ready);
      call.reader = call.start(&call.context, &cq_);
      call.reader->StartCall();
      call.reader->Finish(&call.response, &call.status, tag);
      ++in_flight_;
    }
  }

  const size_t max_in_flight_;
  grpc::CompletionQueue cq_;
  std::vector<std::unique_ptr<Pending>> calls_;
  std::deque<size_t> queued_;
  size_t in_flight_ = 0;
  size_t finished_ = 0;
  bool waited_ = false;
};

}  // namespace weir::jobmanager
