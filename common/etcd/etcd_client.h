// EtcdClient: the calls Weir makes to an etcd v3 cluster (KV, Lease, Watch),
// over etcd's own gRPC API (proto/etcd), with the cluster's endpoints, TLS and
// user/password authentication.
//
// Every unary call has a deadline of its own (call_timeout) and is retried,
// with backoff and jitter (common/retry), on errors a retry can fix: the
// endpoint is down (kUnavailable), the call timed out (kDeadlineExceeded), or
// the auth token expired (then the client authenticates again first). After a
// failure the next try goes to the next endpoint, so a cluster with one member
// down keeps serving. A call's retries end at its `deadline` argument.
//
// Retried writes are safe only when they are idempotent or guarded: a Txn
// whose compare fails on a second application (a campaign), or a Put of the
// same value. Callers write nothing else through this client.
//
// Wrong credentials are kUnauthenticated and not retried; the message names
// the user and the endpoint. An unreachable cluster ends a call with
// kUnavailable naming every endpoint tried.
//
// Thread-safety: every method may be called from any thread at once; the
// streams it hands out (KeepAliveOnce, WatchStream) belong to their caller.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/retry/backoff.h"
#include "etcd/rpc.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace weir::etcd {

struct EtcdClientOptions {
  // "host:port" of each member; calls go to one, and to the next after a failure.
  std::vector<std::string> endpoints;
  // TLS: on when ca_file is set. cert_file and key_file (both or neither) are
  // this client's certificate for servers that ask for one.
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  // User/password authentication: on when username is set.
  std::string username;
  std::string password;
  // How long one try of a call may take.
  absl::Duration call_timeout = absl::Seconds(2);
  // The waits between tries of a call.
  retry::BackoffOptions backoff{.initial = absl::Milliseconds(50), .max = absl::Seconds(1), .jitter = 0.5};

  // kInvalidArgument when an option cannot work (no endpoint, a cert without
  // its key, a non-positive timeout).
  absl::Status Validate() const;
};

class EtcdClient {
 public:
  // Checks the options and reads the TLS files; connects lazily (the first
  // call dials), so an unreachable cluster is reported by the calls.
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(EtcdClientOptions options);

  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;
  ~EtcdClient();

  // Unary calls, tried until one succeeds, fails for good, or `deadline`.
  absl::StatusOr<etcdserverpb::RangeResponse> Range(const etcdserverpb::RangeRequest& request, absl::Time deadline);
  absl::StatusOr<etcdserverpb::PutResponse> Put(const etcdserverpb::PutRequest& request, absl::Time deadline);
  absl::StatusOr<etcdserverpb::DeleteRangeResponse> DeleteRange(const etcdserverpb::DeleteRangeRequest& request,
                                                                absl::Time deadline);
  absl::StatusOr<etcdserverpb::TxnResponse> Txn(const etcdserverpb::TxnRequest& request, absl::Time deadline);
  absl::StatusOr<etcdserverpb::LeaseGrantResponse> LeaseGrant(const etcdserverpb::LeaseGrantRequest& request,
                                                              absl::Time deadline);
  absl::StatusOr<etcdserverpb::LeaseRevokeResponse> LeaseRevoke(const etcdserverpb::LeaseRevokeRequest& request,
                                                                absl::Time deadline);

  // One renewal of lease `id` on a keep-alive stream of its own that ends with
  // it, tried until `deadline`. The response's TTL is 0 or less when the lease
  // no longer exists on the server.
  absl::StatusOr<etcdserverpb::LeaseKeepAliveResponse> KeepAliveOnce(int64_t id, absl::Time deadline);

  // A watch: the responses of one WatchCreateRequest, read one at a time on
  // the caller's thread. Cancel may be called from any thread and makes a
  // blocked Next return kCancelled.
  class WatchStream {
   public:
    ~WatchStream();
    // The next response (the first one has created = true); an error when the
    // stream broke (kUnavailable: watch again) or was cancelled.
    absl::StatusOr<etcdserverpb::WatchResponse> Next();
    void Cancel();

   private:
    friend class EtcdClient;
    WatchStream() = default;
    std::shared_ptr<grpc::Channel> connection_;  // kept open while the stream lives
    std::unique_ptr<grpc::ClientContext> context_;
    std::unique_ptr<grpc::ClientReaderWriter<etcdserverpb::WatchRequest, etcdserverpb::WatchResponse>> stream_;
    std::string endpoint_;
  };
  // Opens a watch on the next endpoint that takes it, until `deadline`; the
  // stream itself has no deadline.
  absl::StatusOr<std::unique_ptr<WatchStream>> Watch(const etcdserverpb::WatchCreateRequest& request,
                                                     absl::Time deadline);

  const EtcdClientOptions& options() const { return options_; }

 private:
  struct Endpoint;

  EtcdClient(EtcdClientOptions options, std::shared_ptr<grpc::ChannelCredentials> credentials);

  // Runs `attempt` with a fresh context (deadline, token) against one endpoint
  // per try, retrying as the class comment says; `what` names the call in errors.
  template <typename Response, typename Attempt>
  absl::StatusOr<Response> Call(const char* what, absl::Time deadline, Attempt attempt);

  // The endpoint the next try uses, and moving on after a failure.
  Endpoint& CurrentEndpoint() ABSL_LOCKS_EXCLUDED(mu_);
  void FailOver(Endpoint& failed) ABSL_LOCKS_EXCLUDED(mu_);

  // The token to send (empty without auth), authenticating when there is none;
  // `stale` is a token the server refused, dropped first.
  absl::StatusOr<std::string> Token(Endpoint& endpoint, absl::Time deadline, const std::string& stale = "")
      ABSL_LOCKS_EXCLUDED(mu_);

  // A context with the try's deadline and the token.
  absl::StatusOr<std::unique_ptr<grpc::ClientContext>> NewContext(Endpoint& endpoint, absl::Time deadline,
                                                                  const std::string& stale_token);

  const EtcdClientOptions options_;
  std::vector<std::unique_ptr<Endpoint>> endpoints_;

  mutable absl::Mutex mu_;
  size_t current_ ABSL_GUARDED_BY(mu_) = 0;
  std::string token_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weir::etcd
