// NetworkClient: the consumer side of the data exchange that a TaskManager
// shares among all its input gates: the client network threads
// (taskmanager.network.netty.client.numThreads) that drive every remote
// input channel's stream, and one gRPC channel per producer TaskManager, so
// that every stream to one TaskManager is multiplexed over one connection
// (one HTTP/2 stream per input channel).
//
// Thread-safety: all methods are thread-safe. Owned through shared_ptr by the
// TaskManager and by the input gates using it; the last owner must not be a
// network thread (gates are closed and dropped by their task threads).
#pragma once

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "taskmanager/network/network_threads.h"
#include "weir/v1/data.grpc.pb.h"

namespace weir::taskmanager::network {

class NetworkClient {
 public:
  // `threads` >= 1.
  static std::shared_ptr<NetworkClient> Create(int threads);
  ~NetworkClient();

  NetworkClient(const NetworkClient&) = delete;
  NetworkClient& operator=(const NetworkClient&) = delete;

  // The DataExchangeService of the TaskManager at `address` (host:port):
  // one connection per address, kept for the client's life (an idle one
  // costs no traffic and little memory).
  v1::DataExchangeService::Stub* StubFor(const std::string& address) ABSL_LOCKS_EXCLUDED(mu_);
  // The completion queue for a new stream (the threads take turns).
  grpc::CompletionQueue* NextQueue() { return threads_->NextQueue(); }

  int threads() const { return threads_->size(); }
  // TaskManagers this client has a connection to.
  int connections() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  explicit NetworkClient(std::unique_ptr<NetworkThreads> threads) : threads_(std::move(threads)) {}

  std::unique_ptr<NetworkThreads> threads_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<v1::DataExchangeService::Stub>> stubs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weir::taskmanager::network
