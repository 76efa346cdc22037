#include "taskmanager/network/network_threads.h"

#include <pthread.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace weir::taskmanager::network {

NetworkThreads::NetworkThreads(std::string name, std::vector<std::unique_ptr<grpc::CompletionQueue>> queues)
    : name_(std::move(name)), queues_(std::move(queues)) {
  WEIR_CHECK(!queues_.empty(), absl::StrCat(name_, ": network threads need at least one completion queue"));
  for (int i = 0; i < size(); ++i) threads_.emplace_back([this, i] { Run(i); });
}

std::unique_ptr<NetworkThreads> NetworkThreads::WithNewQueues(std::string name, int threads) {
  std::vector<std::unique_ptr<grpc::CompletionQueue>> queues;
  for (int i = 0; i < threads; ++i) queues.push_back(std::make_unique<grpc::CompletionQueue>());
  return std::make_unique<NetworkThreads>(std::move(name), std::move(queues));
}

NetworkThreads::~NetworkThreads() { Stop(); }

grpc::CompletionQueue* NetworkThreads::NextQueue() {
  return queues_[next_.fetch_add(1, std::memory_order_relaxed) % queues_.size()].get();
}

void NetworkThreads::Run(int index) {
  std::string thread_name = absl::StrCat(name_, "-", index).substr(0, 15);
  pthread_setname_np(pthread_self(), thread_name.c_str());
  grpc::CompletionQueue* queue = queues_[index].get();
  void* tag = nullptr;
  bool ok = false;
  while (queue->Next(&tag, &ok)) static_cast<Completion*>(tag)->Done(ok);
}

void NetworkThreads::Stop() {
  if (stopped_) return;
  stopped_ = true;
  for (auto& queue : queues_) queue->Shutdown();
  for (auto& thread : threads_) thread.join();
}

}  // namespace weir::taskmanager::network
