// HttpServer: the HTTP endpoint of a Weir daemon (health probes, Prometheus
// metrics, the JobManager's read-only REST API), on cpp-httplib.
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

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/rpc/tls.h"

namespace httplib {
class Server;
}

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
};

// Sets the TLS files of `options` from security.ssl.rest.* when HTTPS is on
// (reading no file: Start does); kInvalidArgument when one is not set.
absl::Status TlsFromConfig(const config::Configuration& config, HttpServerOptions* options);

class HttpServer {
 public:
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(HttpServerOptions options);
  bool https() const { return https_; }
  ~HttpServer();

  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Stops accepting and joins the listener. Idempotent.
  void Stop();

  int port() const { return port_; }

 private:
  HttpServer() = default;

  // Before server_: the server's TLS handshakes call into it.
  std::unique_ptr<CertificateReloader> reloader_;
  std::unique_ptr<httplib::Server> server_;
  bool https_ = false;
  std::thread listener_;
  int port_ = 0;
};

}  // namespace weir::http
