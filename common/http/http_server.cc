#include "common/http/http_server.h"

#include <sys/socket.h>

#include <chrono>
#include <exception>
#include <regex>

#include "absl/strings/str_cat.h"
#include "common/config/configuration.h"
#include "common/http/certificate_reloader.h"
#include "common/logging/logging.h"
#include "common/rpc/auth.h"
#include "common/rpc/rpc.h"
#include "common/rpc/tls.h"
#include "common/status_macros.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace weir::http {
namespace {

// Probes and scrapes are small and rare: a few workers are plenty, and a
// slow client cannot hold one for long.
constexpr int kWorkerThreads = 3;
constexpr time_t kIoTimeoutSeconds = 5;
constexpr size_t kMaxRequestBodyBytes = 64 << 10;

void Send(const Response& response, httplib::Response& out) {
  out.status = response.status;
  out.set_content(response.body, response.content_type.c_str());
}

}  // namespace

Response ErrorResponse(int status, const std::string& message) {
  return Response{.status = status,
                  .content_type = "application/json",
                  .body = nlohmann::json{{"errors", nlohmann::json::array({message})}}.dump()};
}

std::function<Response(const Request&)> HealthHandler(std::function<bool()> alive) {
  return [alive = std::move(alive)](const Request&) {
    if (alive == nullptr || alive()) return Response{.content_type = "text/plain", .body = "ok\n"};
    return Response{.status = 503, .content_type = "text/plain", .body = "a main loop is stuck\n"};
  };
}

std::function<Response(const Request&)> ReadyHandler(std::function<bool()> ready, std::string not_ready) {
  return [ready = std::move(ready), not_ready = std::move(not_ready)](const Request&) {
    if (ready()) return Response{.content_type = "text/plain", .body = "ready\n"};
    return Response{.status = 503, .content_type = "text/plain", .body = not_ready + "\n"};
  };
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(HttpServerOptions options) {
  if (absl::Status exposed = rpc::CheckExposure(options.bind_host, options.bind_key); !exposed.ok()) {
    return exposed;
  }
  std::unique_ptr<HttpServer> server(new HttpServer());
  const bool https = options.tls.has_value();
  if (https) {
    // The reloader is the one source of the certificate: it reads the files
    // here and hands the pair to every handshake.
    server->reloader_ = std::make_unique<CertificateReloader>(*options.tls);
    RETURN_IF_ERROR(server->reloader_->Load());
    auto secure = std::make_unique<httplib::SSLServer>([reloader = server->reloader_.get()](SSL_CTX& ctx) {
      SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION);
      SSL_CTX_set_options(&ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_SESSION_RESUMPTION_ON_RENEGOTIATION);
      reloader->Install(&ctx);
      return true;
    });
    if (!secure->is_valid()) {
      return absl::InternalError(absl::StrCat("the ", options.name, " endpoint cannot set up TLS"));
    }
    server->server_ = std::move(secure);
  } else {
    server->server_ = std::make_unique<httplib::Server>();
  }
  httplib::Server& http = *server->server_;
  http.new_task_queue = [] { return new httplib::ThreadPool(kWorkerThreads); };
  http.set_read_timeout(kIoTimeoutSeconds, 0);
  http.set_write_timeout(kIoTimeoutSeconds, 0);
  http.set_payload_max_length(kMaxRequestBodyBytes);
  // httplib's default also sets SO_REUSEPORT, which lets a second daemon
  // bind the same port and take half the requests: only SO_REUSEADDR.
  http.set_socket_options([](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });

  auto probes = std::make_shared<std::vector<std::regex>>();
  for (const Route& route : options.routes) {
    if (route.probe) probes->emplace_back(route.pattern);
  }
  http.set_pre_routing_handler([probes](const httplib::Request& req, httplib::Response& res) {
    if (!rpc::AuthEnabled()) return httplib::Server::HandlerResponse::Unhandled;
    for (const std::regex& probe : *probes) {
      if (std::regex_match(req.path, probe)) return httplib::Server::HandlerResponse::Unhandled;
    }
    const bool sent = req.has_header("Authorization");
    const std::string value = req.get_header_value("Authorization");
    const rpc::Credential credential = rpc::CheckAuthorization(sent ? &value : nullptr);
    if (credential == rpc::Credential::kAccepted) return httplib::Server::HandlerResponse::Unhandled;
    rpc::LogRefusal(absl::StrCat(req.remote_addr, ":", req.remote_port, " (HTTP)"), credential);
    Send(ErrorResponse(401, rpc::RefusalMessage(credential)), res);
    res.set_header("WWW-Authenticate", "Bearer");
    return httplib::Server::HandlerResponse::Handled;
  });
  for (Route& route : options.routes) {
    http.Get(route.pattern, [handler = std::move(route.handler)](const httplib::Request& req, httplib::Response& res) {
      Request request{.path = req.path, .params = {}};
      for (size_t i = 1; i < req.matches.size(); ++i) request.params.push_back(req.matches[i].str());
      try {
        Send(handler(request), res);
      } catch (const std::exception& e) {
        Send(ErrorResponse(500, absl::StrCat("internal error: ", e.what())), res);
      }
    });
  }
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    // Only the statuses httplib sets itself (no route, bad request) land
    // here without a body.
    if (!res.body.empty()) return;
    Send(ErrorResponse(res.status, res.status == 404 ? absl::StrCat("no such resource: ", req.path)
                                                     : absl::StrCat("HTTP ", res.status)),
         res);
  });

  int port = options.port;
  bool bound = false;
  if (port == 0) {
    port = http.bind_to_any_port(options.bind_host);
    bound = port > 0;
  } else {
    bound = http.bind_to_port(options.bind_host, port);
  }
  if (!bound) {
    return absl::UnavailableError(absl::StrCat("the ", options.name, " endpoint cannot listen on ",
                                               rpc::JoinHostPort(options.bind_host, options.port),
                                               ": the port is taken or the address is not this host's"));
  }
  server->port_ = port;
  server->https_ = https;
  server->listener_ = std::thread([s = server.get()] { s->server_->listen_after_bind(); });
  // httplib's stop() does nothing until the listener runs: wait for it, so
  // that a Stop right after Start cannot leave the listener behind.
  for (int waited_ms = 0; !http.is_running() && waited_ms < 5000; ++waited_ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  logging::Get("http")->info("{} listening on {}://{}", options.name, https ? "https" : "http",
                             rpc::JoinHostPort(options.bind_host, port));
  return server;
}

absl::Status TlsFromConfig(const config::Configuration& config, HttpServerOptions* options) {
  ASSIGN_OR_RETURN(options->tls, rpc::RestTlsFiles(config));
  return absl::OkStatus();
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Stop() {
  if (server_ != nullptr) server_->stop();
  if (listener_.joinable()) listener_.join();
}

}  // namespace weir::http
