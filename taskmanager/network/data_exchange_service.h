// DataExchangeServiceImpl: the producer side of remote input channels. Every
// TaskManager serves it; a consumer task on another TaskManager opens one
// Subscribe stream per (result partition, subpartition) it reads and receives
// that subpartition's buffers, in order, while it has credit for them. All
// streams from one TaskManager share its one connection (HTTP/2 streams).
//
// The service is asynchronous: a fixed number of server network threads
// (taskmanager.network.netty.server.numThreads), each serving one of the
// server's completion queues, drive every stream, however many there are. A
// stream sends when it has credit and its subpartition has a buffer, and is
// woken by the partition (a buffer added, the partition released) or by a
// credit message. The partition's bounded subpartition plus the consumer's
// credit bound the memory of a channel: a consumer that withholds credit
// leaves buffers in the subpartition, which blocks the producer
// (backpressure) and no other channel.
//
// Subscriptions that wait for their partition to be registered are bounded
// (max_waiting_streams); beyond that a subscription is refused with
// RESOURCE_EXHAUSTED, which consumers retry like NOT_FOUND.
//
// Lifecycle: construct; register with the server (rpc::ServerOptions::services,
// with completion_queues = the thread count); Start with the server's
// queues. Shutdown order: Shutdown() (ends open streams, refuses new ones),
// the grpc::Server's Shutdown (with a deadline), Stop() (waits for the
// streams to end and joins the threads), destroy the server, then this
// service.
#pragma once

#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "taskmanager/network/buffer.h"
#include "taskmanager/network/network_threads.h"
#include "taskmanager/network/result_partition.h"
#include "weir/v1/data.grpc.pb.h"

namespace weir::taskmanager::network {

// The wire form of a buffer; moves the data.
v1::DataBuffer ToProto(Buffer buffer);
// Fails (kInvalidArgument) for an unknown kind or a negative record count,
// and (kUnimplemented) for checkpoint barriers, which are not sent yet.
absl::StatusOr<Buffer> FromProto(v1::DataBuffer message);

struct DataExchangeServiceOptions {
  // How long a stream may take to subscribe and find its partition
  // registered (default 5 s): then it ends with DEADLINE_EXCEEDED (never
  // subscribed) or NOT_FOUND (consumers retry with their own deadline).
  absl::Duration partition_wait = absl::Seconds(5);
  // After END_OF_INPUT, how long to wait for the consumer to half-close
  // before ending the stream (default 10 s).
  absl::Duration close_grace = absl::Seconds(10);
  // Largest initial credit a consumer may ask for (default 1024).
  int max_initial_credit = 1024;
  // Streams that may wait at once for their subscription or for their
  // partition (default 16384).
  int max_waiting_streams = 16384;
};

// Thread-safety: the streams run on the network threads; Start, Shutdown,
// Stop and the accessors are safe from any other thread.
class DataExchangeServiceImpl final : public v1::DataExchangeService::AsyncService {
 public:
  // `partitions` must outlive the service.
  explicit DataExchangeServiceImpl(PartitionManager* partitions, DataExchangeServiceOptions options = {});
  ~DataExchangeServiceImpl() override;

  // Starts serving on the server's completion queues (at least one), one
  // network thread each. Once.
  void Start(std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues) ABSL_LOCKS_EXCLUDED(mu_);

  // Ends every open stream (the consumers see UNAVAILABLE) and refuses new
  // ones, so that the server's Shutdown can finish. Idempotent.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

  // After the server's Shutdown: waits until every stream has ended, then
  // stops the network threads. Idempotent; the destructor calls it.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // Subscribe streams currently being served (accepted and not yet ended).
  int active_streams() const ABSL_LOCKS_EXCLUDED(mu_);
  // Of those, the ones waiting for their partition.
  int waiting_streams() const ABSL_LOCKS_EXCLUDED(mu_);
  int network_threads() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  class Stream;
  friend class Stream;

  // Offers one more call on `queue` (after Start and after each accept).
  void Accept(grpc::ServerCompletionQueue* queue) ABSL_LOCKS_EXCLUDED(mu_);

  PartitionManager* const partitions_;
  const DataExchangeServiceOptions options_;
  std::unique_ptr<NetworkThreads> threads_;

  mutable absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  // Stream objects alive, accepted or still offered to the server.
  int live_ ABSL_GUARDED_BY(mu_) = 0;
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_set<Stream*> active_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weir::taskmanager::network
