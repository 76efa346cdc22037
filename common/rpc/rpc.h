// The one place where Weir creates gRPC servers and channels, and converts
// between grpc::Status and absl::Status. Transport security and
// authentication are switched on here, for every server and channel at once.
//
// Thread-safety: free functions, safe from any thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

namespace weir::rpc {

// The largest control-plane message a server accepts by default.
inline constexpr int kControlPlaneMaxMessageBytes = 4 << 20;

// The metadata key of the JobManager's fencing token (its leader epoch, a
// decimal number) on every call it makes to a TaskManager.
inline constexpr char kLeaderEpochMetadata[] = "weir-leader-epoch";

// How long a channel's connection attempt may take (TCP and the HTTP/2
// handshake) before gRPC abandons it, unless the caller says otherwise:
// gRPC's own default.
inline constexpr int kDefaultConnectTimeoutMs = 20000;

struct ServerOptions {
  // Address to bind, e.g. "127.0.0.1" or "0.0.0.0".
  std::string bind_host = "127.0.0.1";
  // 0 picks a free port.
  int port = 0;
  std::vector<grpc::Service*> services;
  // The largest message the server takes: gRPC refuses a bigger one while
  // receiving it, before any handler sees it. The control plane's messages
  // are small (uploads go in 1 MiB chunks). With a token, a call without it
  // is refused on its metadata, before its message (see auth.h).
  int max_receive_message_bytes = kControlPlaneMaxMessageBytes;
  // Caps the memory gRPC itself may use for this server: connections' read
  // buffers, calls, messages being received (0: no cap). Near the cap gRPC
  // shrinks its flow-control windows, then resets streams, whichever
  // connection they are on.
  int64_t memory_quota_bytes = 0;
  // Streams one connection may have open at once (HTTP/2
  // SETTINGS_MAX_CONCURRENT_STREAMS; 0: gRPC's default, no limit). A gRPC
  // client queues calls beyond it; a peer that opens more has them reset.
  int max_concurrent_streams = 0;
  // Completion queues for the asynchronous services among `services`.
  int completion_queues = 0;
};

struct StartedServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  // ServerOptions::completion_queues of them; shut down after the server.
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> completion_queues;
};

// Builds and starts a server; fails (kUnavailable) when the address cannot be
// bound, with the address in the message.
absl::StatusOr<StartedServer> StartServer(const ServerOptions& options);

// A channel to `target` ("host:port") with Weir's standard settings
// (keepalive, message size limits). `connect_timeout_ms`: how long one
// connection attempt may take before it is abandoned and the calls waiting
// for it fail UNAVAILABLE.
std::shared_ptr<grpc::Channel> CreateChannel(const std::string& target,
                                            int connect_timeout_ms = kDefaultConnectTimeoutMs);

// "host:port", with IPv6 hosts bracketed.
std::string JoinHostPort(const std::string& host, int port);

// True for 127.0.0.0/8, ::1 and "localhost".
bool IsLoopbackHost(const std::string& host);

absl::Status FromGrpcStatus(const grpc::Status& status);
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace weir::rpc
