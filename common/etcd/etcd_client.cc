#include "common/etcd/etcd_client.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging/logging.h"
#include "common/rpc/rpc.h"
#include "common/rpc/tls.h"
#include "common/status_macros.h"

namespace weir::etcd {
namespace {

std::shared_ptr<spdlog::logger> Log() {
  static const auto log = logging::Get("etcd");
  return log;
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& what, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("etcd ", what, " ", path, ": cannot be read"));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// etcd answers a token it does not know (expired, or issued by another member)
// with UNAUTHENTICATED "etcdserver: invalid auth token".
bool IsStaleToken(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::UNAUTHENTICATED &&
         absl::StrContains(status.error_message(), "invalid auth token");
}

bool IsRetryable(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status) || absl::IsAborted(status);
}

}  // namespace

// The channel and stubs of one endpoint. Replaced as a whole (Reconnect);
// a call holds the one it started with.
struct Connection {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<etcdserverpb::KV::Stub> kv;
  std::unique_ptr<etcdserverpb::Lease::Stub> lease;
  std::unique_ptr<etcdserverpb::Watch::Stub> watch;
  std::unique_ptr<etcdserverpb::Auth::Stub> auth;
};

struct EtcdClient::Endpoint {
  std::string address;
  std::shared_ptr<grpc::ChannelCredentials> credentials;

  absl::Mutex mu;
  std::shared_ptr<Connection> connection ABSL_GUARDED_BY(mu);
  absl::Time connected_at ABSL_GUARDED_BY(mu);

  std::shared_ptr<Connection> Get() {
    absl::MutexLock lock(&mu);
    if (connection == nullptr) Connect();
    return connection;
  }

  // A new channel, unless the current one is younger than `min_age`. Debian's
  // gRPC 1.51 does not always reconnect a channel whose server went away and
  // came back on the same address (its reconnection attempts time out); a
  // fresh channel, with a subchannel of its own, connects at once.
  void Reconnect(absl::Duration min_age) {
    absl::MutexLock lock(&mu);
    if (connection != nullptr && absl::Now() - connected_at < min_age) return;
    Connect();
  }

 private:
  void Connect() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    auto fresh = std::make_shared<Connection>();
    fresh->channel = grpc::CreateCustomChannel(address, credentials, args);
    fresh->kv = etcdserverpb::KV::NewStub(fresh->channel);
    fresh->lease = etcdserverpb::Lease::NewStub(fresh->channel);
    fresh->watch = etcdserverpb::Watch::NewStub(fresh->channel);
    fresh->auth = etcdserverpb::Auth::NewStub(fresh->channel);
    connection = std::move(fresh);
    connected_at = absl::Now();
  }
};

absl::Status EtcdClientOptions::Validate() const {
  if (endpoints.empty()) return absl::InvalidArgumentError("etcd: no endpoint given");
  for (const std::string& e : endpoints) {
    if (e.empty() || e.find(':') == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("etcd endpoint '", e, "' is not host:port"));
    }
  }
  if (cert_file.empty() != key_file.empty()) {
    return absl::InvalidArgumentError("etcd TLS: a client certificate needs its key, and a key its certificate");
  }
  if (!cert_file.empty() && ca_file.empty()) {
    return absl::InvalidArgumentError("etcd TLS: a client certificate needs the CA file too (TLS is on with a CA)");
  }
  if (call_timeout <= absl::ZeroDuration()) return absl::InvalidArgumentError("etcd: call timeout must be positive");
  return backoff.Validate();
}

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(EtcdClientOptions options) {
  RETURN_IF_ERROR(options.Validate());
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (options.ca_file.empty()) {
    credentials = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions ssl;
    ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadWholeFile("CA file", options.ca_file));
    if (!options.cert_file.empty()) {
      // The same checks as the cluster's own certificates: readable, matching
      // key, valid today, chains to the CA.
      rpc::TlsFiles files{.cert_file = options.cert_file,
                          .key_file = options.key_file,
                          .ca_file = options.ca_file,
                          .cert_key = "etcd client certificate",
                          .key_key = "etcd client key",
                          .ca_key = "etcd CA",
                          .server = false,
                          .client = true};
      RETURN_IF_ERROR(rpc::CheckTlsFiles(files));
      ASSIGN_OR_RETURN(ssl.pem_cert_chain, ReadWholeFile("client certificate", options.cert_file));
      ASSIGN_OR_RETURN(ssl.pem_private_key, ReadWholeFile("client key", options.key_file));
    }
    credentials = grpc::SslCredentials(ssl);
  }
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(options), std::move(credentials)));
}

EtcdClient::EtcdClient(EtcdClientOptions options, std::shared_ptr<grpc::ChannelCredentials> credentials)
    : options_(std::move(options)) {
  for (const std::string& address : options_.endpoints) {
    auto endpoint = std::make_unique<Endpoint>();
    endpoint->address = address;
    endpoint->credentials = credentials;
    endpoints_.push_back(std::move(endpoint));
  }
}

EtcdClient::~EtcdClient() = default;

EtcdClient::Endpoint& EtcdClient::CurrentEndpoint() {
  absl::MutexLock lock(&mu_);
  return *endpoints_[current_];
}

void EtcdClient::FailOver(Endpoint& failed) {
  failed.Reconnect(absl::Seconds(1));
  absl::MutexLock lock(&mu_);
  // Only the first of several calls that failed on the same endpoint moves on.
  if (endpoints_[current_].get() == &failed && endpoints_.size() > 1) {
    current_ = (current_ + 1) % endpoints_.size();
    Log()->info("etcd: {} failed; switching to {}", failed.address, endpoints_[current_]->address);
  }
}

absl::StatusOr<std::string> EtcdClient::Token(Endpoint& endpoint, absl::Time deadline, const std::string& stale) {
  if (options_.username.empty()) return std::string();
  {
    absl::MutexLock lock(&mu_);
    if (!stale.empty() && token_ == stale) token_.clear();
    if (!token_.empty()) return token_;
  }
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(std::min(deadline, absl::Now() + options_.call_timeout)));
  etcdserverpb::AuthenticateRequest request;
  request.set_name(options_.username);
  request.set_password(options_.password);
  etcdserverpb::AuthenticateResponse response;
  grpc::Status status = endpoint.Get()->auth->Authenticate(&context, request, &response);
  if (!status.ok()) {
    absl::Status error = rpc::FromGrpcStatus(status);
    std::string context_text = absl::StrCat("authenticating to etcd at ", endpoint.address, " as user '",
                                            options_.username, "'");
    // A wrong user or password (InvalidArgument "authentication failed"), or
    // auth not enabled on the server: no retry fixes either.
    if (status.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
        status.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
      return absl::UnauthenticatedError(absl::StrCat(context_text, ": ", status.error_message()));
    }
    return Annotate(error, context_text);
  }
  absl::MutexLock lock(&mu_);
  token_ = response.token();
  Log()->info("etcd: authenticated to {} as user '{}'", endpoint.address, options_.username);
  return token_;
}

absl::StatusOr<std::unique_ptr<grpc::ClientContext>> EtcdClient::NewContext(Endpoint& endpoint, absl::Time deadline,
                                                                          const std::string& stale_token) {
  ASSIGN_OR_RETURN(std::string token, Token(endpoint, deadline, stale_token));
  auto context = std::make_unique<grpc::ClientContext>();
  if (deadline != absl::InfiniteFuture()) context->set_deadline(absl::ToChronoTime(deadline));
  if (!token.empty()) context->AddMetadata("token", token);
  return context;
}

template <typename Response, typename Attempt>
absl::StatusOr<Response> EtcdClient::Call(const char* what, absl::Time deadline, Attempt attempt) {
  retry::RetryPolicy policy;
  policy.backoff = options_.backoff;
  policy.deadline = deadline;
  Response response;
  std::string stale_token;
  retry::RetryOutcome outcome = retry::Retry(
      policy,
      [&]() -> absl::Status {
        Endpoint& endpoint = CurrentEndpoint();
        absl::Time try_deadline = std::min(deadline, absl::Now() + options_.call_timeout);
        auto context = NewContext(endpoint, try_deadline, stale_token);
        if (!context.ok()) {
          if (IsRetryable(context.status())) FailOver(endpoint);
          return context.status();
        }
        stale_token.clear();
        response.Clear();
        std::shared_ptr<Connection> connection = endpoint.Get();
        grpc::Status status = attempt(endpoint.address, *connection, **context, &response);
        if (status.ok()) return absl::OkStatus();
        if (IsStaleToken(status)) {
          // Authenticate again on the next try.
          absl::MutexLock lock(&mu_);
          stale_token = token_;
          return absl::AbortedError(absl::StrCat(endpoint.address, ": ", status.error_message()));
        }
        absl::Status error = rpc::FromGrpcStatus(status);
        if (IsRetryable(error)) FailOver(endpoint);
        return Annotate(error, endpoint.address);
      },
      IsRetryable,
      [&](const absl::Status& error, absl::Duration wait) {
        Log()->debug("etcd {}: {}; trying again in {}", what, error, absl::FormatDuration(wait));
      });
  if (outcome.status.ok()) return response;
  return Annotate(outcome.status, absl::StrCat("etcd ", what, " (endpoints ", absl::StrJoin(options_.endpoints, ","),
                                               "; ", outcome.Summary(), ")"));
}

absl::StatusOr<etcdserverpb::RangeResponse> EtcdClient::Range(const etcdserverpb::RangeRequest& request,
                                                              absl::Time deadline) {
  return Call<etcdserverpb::RangeResponse>("Range", deadline, [&](const std::string&, Connection& e, grpc::ClientContext& c, auto* r) {
    return e.kv->Range(&c, request, r);
  });
}

absl::StatusOr<etcdserverpb::PutResponse> EtcdClient::Put(const etcdserverpb::PutRequest& request,
                                                          absl::Time deadline) {
  return Call<etcdserverpb::PutResponse>("Put", deadline, [&](const std::string&, Connection& e, grpc::ClientContext& c, auto* r) {
    return e.kv->Put(&c, request, r);
  });
}

absl::StatusOr<etcdserverpb::DeleteRangeResponse> EtcdClient::DeleteRange(
    const etcdserverpb::DeleteRangeRequest& request, absl::Time deadline) {
  return Call<etcdserverpb::DeleteRangeResponse>(
      "DeleteRange", deadline,
      [&](const std::string&, Connection& e, grpc::ClientContext& c, auto* r) { return e.kv->DeleteRange(&c, request, r); });
}

absl::StatusOr<etcdserverpb::TxnResponse> EtcdClient::Txn(const etcdserverpb::TxnRequest& request,
                                                          absl::Time deadline) {
  return Call<etcdserverpb::TxnResponse>("Txn", deadline, [&](const std::string&, Connection& e, grpc::ClientContext& c, auto* r) {
    return e.kv->Txn(&c, request, r);
  });
}

absl::StatusOr<etcdserverpb::LeaseGrantResponse> EtcdClient::LeaseGrant(
    const etcdserverpb::LeaseGrantRequest& request, absl::Time deadline) {
  return Call<etcdserverpb::LeaseGrantResponse>(
      "LeaseGrant", deadline,
      [&](const std::string&, Connection& e, grpc::ClientContext& c, auto* r) { return e.lease->LeaseGrant(&c, request, r); });
}

absl::StatusOr<etcdserverpb::LeaseRevokeResponse> EtcdClient::LeaseRevoke(
    const etcdserverpb::LeaseRevokeRequest& request, absl::Time deadline) {
  return Call<etcdserverpb::LeaseRevokeResponse>(
      "LeaseRevoke", deadline,
      [&](const std::string&, Connection& e, grpc::ClientContext& c, auto* r) { return e.lease->LeaseRevoke(&c, request, r); });
}

absl::StatusOr<etcdserverpb::LeaseKeepAliveResponse> EtcdClient::KeepAliveOnce(int64_t id, absl::Time deadline) {
  return Call<etcdserverpb::LeaseKeepAliveResponse>(
      "LeaseKeepAlive", deadline, [&](const std::string&, Connection& e, grpc::ClientContext& c, auto* response) {
        auto stream = e.lease->LeaseKeepAlive(&c);
        etcdserverpb::LeaseKeepAliveRequest request;
        request.set_id(id);
        if (stream->Write(request) && stream->Read(response)) {
          // One renewal is all this stream is for.
          c.TryCancel();
          stream->Finish().IgnoreError();
          return grpc::Status::OK;
        }
        grpc::Status status = stream->Finish();
        if (status.ok()) status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "keep-alive stream closed");
        return status;
      });
}

absl::StatusOr<std::unique_ptr<EtcdClient::WatchStream>> EtcdClient::Watch(
    const etcdserverpb::WatchCreateRequest& request, absl::Time deadline) {
  std::unique_ptr<WatchStream> watch;
  auto opened = Call<etcdserverpb::WatchResponse>(
      "Watch", deadline, [&](const std::string& address, Connection& e, grpc::ClientContext&, auto*) {
        // The stream outlives this try: it gets a context of its own, with the
        // token but no deadline.
        auto stream = std::unique_ptr<WatchStream>(new WatchStream());
        stream->endpoint_ = address;
        stream->connection_ = e.channel;
        stream->context_ = std::make_unique<grpc::ClientContext>();
        {
          absl::MutexLock lock(&mu_);
          if (!token_.empty()) stream->context_->AddMetadata("token", token_);
        }
        stream->stream_ = e.watch->Watch(stream->context_.get());
        etcdserverpb::WatchRequest create;
        *create.mutable_create_request() = request;
        if (!stream->stream_->Write(create)) {
          grpc::Status status = stream->stream_->Finish();
          if (status.ok()) status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "watch stream closed");
          return status;
        }
        watch = std::move(stream);
        return grpc::Status::OK;
      });
  if (!opened.ok()) return opened.status();
  return watch;
}

EtcdClient::WatchStream::~WatchStream() {
  if (stream_ != nullptr) {
    context_->TryCancel();
    stream_->Finish().IgnoreError();
  }
}

absl::StatusOr<etcdserverpb::WatchResponse> EtcdClient::WatchStream::Next() {
  if (stream_ == nullptr) return absl::UnavailableError(absl::StrCat("etcd watch at ", endpoint_, ": stream ended"));
  etcdserverpb::WatchResponse response;
  if (stream_->Read(&response)) return response;
  grpc::Status status = stream_->Finish();
  stream_.reset();
  if (status.ok()) return absl::UnavailableError(absl::StrCat("etcd watch at ", endpoint_, ": stream ended"));
  return Annotate(rpc::FromGrpcStatus(status), absl::StrCat("etcd watch at ", endpoint_));
}

void EtcdClient::WatchStream::Cancel() { context_->TryCancel(); }

}  // namespace weir::etcd
