#include "common/rpc/rpc.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include "common/rpc/auth.h"
#include "common/rpc/tls.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/support/client_interceptor.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace weir::rpc {
namespace {

// What a channel accepts and sends: a data-exchange buffer of the largest
// segment size (64 MiB) with its framing.
constexpr int kMaxMessageBytes = (64 << 20) + (1 << 20);

// Attaches the cluster's shared secret to every outgoing call.
class AuthInterceptor final : public grpc::experimental::Interceptor {
 public:
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({"authorization", "Bearer " + AuthToken()});
    }
    methods->Proceed();
  }
};

class AuthInterceptorFactory final : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateClientInterceptor(grpc::experimental::ClientRpcInfo*) override {
    return new AuthInterceptor();
  }
};

}  // namespace

std::string JoinHostPort(const std::string& host, int port) {
  if (host.find(':') != std::string::npos && !absl::StartsWith(host, "[")) {
    return absl::StrCat("[", host, "]:", port);
  }
  return absl::StrCat(host, ":", port);
}

bool IsLoopbackHost(const std::string& host) {
  if (host == "localhost") return true;
  // Only address literals count otherwise: a name such as 127.example.com
  // may resolve anywhere.
  std::string literal = host;
  if (literal.size() > 2 && literal.front() == '[' && literal.back() == ']') literal = literal.substr(1, literal.size() - 2);
  in_addr v4{};
  if (inet_pton(AF_INET, literal.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, literal.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

absl::StatusOr<StartedServer> StartServer(const ServerOptions& options) {
  grpc::ServerBuilder builder;
  StartedServer started;
  std::string address = JoinHostPort(options.bind_host, options.port);
  // Plaintext, or mutual TLS when security.ssl.internal.enabled is set (see
  // tls.h): for every Weir server at once.
  builder.AddListeningPort(address, ServerCredentialsForCluster(), &started.port);
  builder.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  if (options.memory_quota_bytes > 0) {
    grpc::ResourceQuota quota("weir-server");
    quota.Resize(static_cast<size_t>(options.memory_quota_bytes));
    builder.SetResourceQuota(quota);
  }
  if (options.max_concurrent_streams > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, options.max_concurrent_streams);
  }
  // Let clients keep idle streams alive with pings (membership sessions).
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Two processes on one port would split connections between them.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  for (grpc::Service* service : options.services) builder.RegisterService(service);
  for (int i = 0; i < options.completion_queues; ++i) started.completion_queues.push_back(builder.AddCompletionQueue());
  started.server = builder.BuildAndStart();
  if (started.server == nullptr || started.port == 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", address, " (address in use or not available on this host)"));
  }
  return started;
}

std::shared_ptr<grpc::Channel> CreateChannel(const std::string& target, int connect_timeout_ms) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Reconnect quickly after a peer restarts; the callers do their own backoff.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Despite its name, gRPC takes GRPC_ARG_MIN_RECONNECT_BACKOFF_MS as the
  // least time a connection attempt gets before it is abandoned. At 100 ms a
  // peer busy starting tens of tasks missed it, the channel went into
  // TRANSIENT_FAILURE, and every call on it failed UNAVAILABLE. A refused
  // connection (a restarted peer's port not open yet) still fails at once
  // and is retried after the backoff above.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, connect_timeout_ms);
  std::shared_ptr<grpc::ChannelCredentials> credentials = ChannelCredentialsForCluster();
  if (!AuthEnabled()) return grpc::CreateCustomChannel(target, credentials, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<AuthInterceptorFactory>());
  return grpc::experimental::CreateCustomChannelWithInterceptors(target, credentials, args, std::move(interceptors));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

}  // namespace weir::rpc
