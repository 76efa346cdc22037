// DataExchangeServiceImpl: the producer side of remote input channels. Every
// TaskManager serves it; a consumer task on another TaskManager opens one
// Subscribe stream per (result partition, subpartition) it reads and receives
// that subpartition's buffers, in order, while it has credit for them.
//
// Per stream the service uses the gRPC handler thread (the only one that
// writes) and one thread that reads the consumer's credit messages. The
// partition's bounded subpartition plus the consumer's credit bound the
// memory of a channel: a consumer that withholds credit leaves buffers in the
// subpartition, which blocks the producer (backpressure).
//
// Shutdown order: DataExchangeServiceImpl::Shutdown(), then the
// grpc::Server's Shutdown (with a deadline, as a backstop against a client
// that connected but never subscribed), then destroy the server, then this
// service.
#pragma once

#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "taskmanager/network/buffer.h"
#include "taskmanager/network/result_partition.h"
#include "weir/v1/data.grpc.pb.h"

namespace weir::taskmanager::network {

// The wire form of a buffer; moves the data.
v1::DataBuffer ToProto(Buffer buffer);
// Fails (kInvalidArgument) for an unknown kind or a negative record count,
// and (kUnimplemented) for checkpoint barriers, which are not sent yet.
absl::StatusOr<Buffer> FromProto(v1::DataBuffer message);

struct DataExchangeServiceOptions {
  // How long a Subscribe waits for its partition to be registered before it
  // answers NOT_FOUND (default 5 s); consumers retry with their own deadline.
  absl::Duration partition_wait = absl::Seconds(5);
  // After END_OF_INPUT, how long to wait for the consumer to half-close
  // before cancelling the stream (default 10 s).
  absl::Duration close_grace = absl::Seconds(10);
  // Largest initial credit a consumer may ask for (default 1024).
  int max_initial_credit = 1024;
};

// Thread-safety: gRPC calls Subscribe from its thread pool; Shutdown and
// active_streams are safe from any thread.
class DataExchangeServiceImpl final : public v1::DataExchangeService::Service {
 public:
  // `partitions` must outlive the service.
  explicit DataExchangeServiceImpl(PartitionManager* partitions, DataExchangeServiceOptions options = {});
  ~DataExchangeServiceImpl() override;

  grpc::Status Subscribe(grpc::ServerContext* context,
                         grpc::ServerReaderWriter<v1::DataBuffer, v1::SubscribeRequest>* stream) override;

  // Ends every open stream (the consumers see them cancelled) and refuses new
  // ones (UNAVAILABLE), so that the server's Shutdown can finish. Idempotent.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

  // Subscribe streams currently being served.
  int active_streams() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct StreamState;

  // Serves an attached subpartition until END_OF_INPUT was sent or the stream
  // has to end.
  grpc::Status Serve(grpc::ServerContext* context,
                     grpc::ServerReaderWriter<v1::DataBuffer, v1::SubscribeRequest>* stream,
                     const v1::Subscription& subscription, ResultPartition& partition, StreamState& state);
  // Waits (bounded by partition_wait) for the subscribed partition.
  absl::StatusOr<std::shared_ptr<ResultPartition>> AwaitPartition(grpc::ServerContext* context,
                                                                  const std::string& partition_id,
                                                                  const std::shared_ptr<StreamState>& state);

  PartitionManager* const partitions_;
  const DataExchangeServiceOptions options_;

  mutable absl::Mutex mu_;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_set<std::shared_ptr<StreamState>> streams_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weir::taskmanager::network
