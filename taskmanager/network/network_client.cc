#include "taskmanager/network/network_client.h"

#include <utility>

#include "common/rpc/rpc.h"

namespace weir::taskmanager::network {

std::shared_ptr<NetworkClient> NetworkClient::Create(int threads) {
  return std::shared_ptr<NetworkClient>(
      new NetworkClient(NetworkThreads::WithNewQueues("weir-net-cli", threads < 1 ? 1 : threads)));
}

NetworkClient::~NetworkClient() {
  // Every gate that used the client has been closed: no stream is left on
  // the queues.
  threads_->Stop();
}

v1::DataExchangeService::Stub* NetworkClient::StubFor(const std::string& address) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<v1::DataExchangeService::Stub>& stub = stubs_[address];
  if (stub == nullptr) stub = v1::DataExchangeService::NewStub(rpc::CreateChannel(address));
  return stub.get();
}

int NetworkClient::connections() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(stubs_.size());
}

}  // namespace weir::taskmanager::network
