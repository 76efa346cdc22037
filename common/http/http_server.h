// HttpServer: the HTTP endpoint of a Weir daemon (health probes, Prometheus
// metrics, the JobManager's read-only REST API): HTTP/1.1 and HTTPS
// (OpenSSL), one request per connection.
//
// Bounded before anything is trusted, since it answers peers that have no
// credentials yet: the request line and headers at most 16 KiB and 64
// fields, a body at most 64 KiB, and the whole request (the TLS handshake
// included) within 10 s of the connection, not per read. One event-loop
// thread reads every connection without blocking and writes every answer,
// so a slow or silent peer holds a connection slot, never a thread; at 256
// connections the oldest one still sending its request is dropped for a new
// one. Complete requests go to a few worker threads that run the handlers,
// so /healthz answers while slow clients trickle. Refusals (408, 413, 431,
// ...) are logged at most every 10 s with the peer.
//
// Only GET is served. Authentication is the RPCs' (common/rpc/auth.h): when
// the cluster has a shared secret, every request must carry
// "Authorization: Bearer <secret>" except the routes marked `probe`
// (/healthz, /readyz), which kubelets and load balancers call without one;
// and like the RPC server it refuses to listen beyond loopback without a
// secret. Responses are small and computed per request; a few worker
// threads serve them.
//
// Lifecycle: Start (binds, or fails naming the address) -> Stop (or the
// destructor). Thread-safety: handlers run on the server's worker threads,
// concurrently; they must be thread-safe.
#pragma once

#include <openssl/ssl.h>

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/logging/logging.h"
#include "common/rpc/tls.h"

namespace weir::config {
class Configuration;
}

namespace weir::http {
class CertificateReloader;
}

namespace weir::http {

struct Request {
  std::string path;
  // The pattern's capture groups, in order (e.g. the job id of /jobs/([^/]+)).
  std::vector<std::string> params;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
};

// {"errors": ["message"]} with `status`, the shape Flink's REST API uses.
Response ErrorResponse(int status, const std::string& message);

// /healthz: 200 "ok" while `alive` holds (or when it is null), else 503 —
// a liveness probe then restarts the process, as systemd's watchdog would.
std::function<Response(const Request&)> HealthHandler(std::function<bool()> alive);

// /readyz: 200 "ready" once `ready` holds, else 503 with `not_ready`.
std::function<Response(const Request&)> ReadyHandler(std::function<bool()> ready, std::string not_ready);

struct Route {
  // An ECMAScript regular expression the whole path must match.
  std::string pattern;
  std::function<Response(const Request&)> handler;
  // Served without the shared secret (health probes only).
  bool probe = false;
};

struct HttpServerOptions {
  // For logs and errors: "JobManager REST", "TaskManager HTTP".
  std::string name;
  std::string bind_host = "127.0.0.1";
  // 0 picks a free port.
  int port = 0;
  // The configuration key that set bind_host, named when it is refused.
  std::string bind_key;
  std::vector<Route> routes;
  // Set: HTTPS with this certificate and key (PEM), re-read when the files
  // change.
  std::optional<rpc::TlsFiles> tls;
  // From the connection to the complete request (and again for writing the
  // answer). Tests shorten it.
  std::chrono::milliseconds request_deadline{10'000};
};

// Sets the TLS files of `options` from security.ssl.rest.* when HTTPS is on
// (reading no file: Start does); kInvalidArgument when one is not set.
absl::Status TlsFromConfig(const config::Configuration& config, HttpServerOptions* options);

class HttpServer {
 public:
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(HttpServerOptions options);
  bool https() const { return ssl_ctx_ != nullptr; }
  ~HttpServer();

  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Stops accepting, drops every connection and joins the threads.
  // Idempotent; not from a handler.
  void Stop();

  int port() const { return port_; }

  static constexpr size_t kMaxHeadBytes = 16 << 10;
  static constexpr int kMaxHeaderCount = 64;
  static constexpr size_t kMaxPathBytes = 8 << 10;
  static constexpr size_t kMaxRequestBodyBytes = 64 << 10;
  static constexpr int kMaxConnections = 256;
  // Probes and scrapes are small and rare: a few workers are plenty, and
  // they only ever run complete requests.
  static constexpr int kWorkerThreads = 3;

 private:
  struct Connection;
  struct CompiledRoute {
    std::regex pattern;
    std::function<Response(const Request&)> handler;
    bool probe = false;
  };
  struct PendingRequest {
    uint64_t connection = 0;
    Request request;
    std::string authorization;
    bool has_authorization = false;
    std::string peer;
  };
  enum class ParseStatus { kIncomplete, kComplete, kRefused };
  struct ParseResult {
    ParseStatus status = ParseStatus::kIncomplete;
    Request request;
    std::string authorization;
    bool has_authorization = false;
    int refusal_status = 0;
    std::string refusal;
  };
  enum class ReadState { kOpen, kEndOfInput, kFailed };
  static constexpr std::chrono::seconds kDrainTime{2};

  HttpServer() = default;
  // The event loop: accepts, reads, parses, writes answers, enforces
  // deadlines. Owns every Connection.
  void Loop();
  ReadState ReadSome(Connection& c);
  // 1: all written, 0: more to write later, -1: failed.
  int WriteSome(Connection& c);
  static ParseResult Parse(Connection& c);
  void WorkerLoop();
  bool HasWorkOrStopping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Authenticates, routes and runs the handler: the bytes of the answer.
  std::string Handle(PendingRequest& item);
  // Logs a refusal (rate-limited, with the peer).
  void Refuse(const Connection& c, int status, const std::string& why);
  // Refuses and sends the answer in one try, for a connection about to go.
  void LastWords(Connection& c, int status, const std::string& why);
  void Wake();

  std::string name_;
  std::shared_ptr<spdlog::logger> log_;
  logging::RateLimiter refusal_log_{std::chrono::seconds(10)};
  // Before ssl_ctx_'s use ends: handshakes call into it.
  std::unique_ptr<CertificateReloader> reloader_;
  SSL_CTX* ssl_ctx_ = nullptr;
  std::vector<CompiledRoute> routes_;  // read-only once started
  int listen_fd_ = -1;
  int wake_fd_ = -1;
  int port_ = 0;
  std::chrono::milliseconds request_deadline_{10'000};
  std::thread loop_;
  std::vector<std::thread> workers_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<PendingRequest> work_ ABSL_GUARDED_BY(mu_);
  // Connection id and the bytes to write, from the workers to the loop.
  std::deque<std::pair<uint64_t, std::string>> answers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weir::http
