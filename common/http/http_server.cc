#include "common/http/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <regex>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "common/config/configuration.h"
#include "common/http/certificate_reloader.h"
#include "common/logging/logging.h"
#include "common/rpc/auth.h"
#include "common/rpc/rpc.h"
#include "common/rpc/tls.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace weir::http {
namespace {

using Clock = std::chrono::steady_clock;

const char* Reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Status";
  }
}

std::string Serialize(const Response& response, const std::vector<std::pair<std::string, std::string>>& headers) {
  std::string out = absl::StrCat("HTTP/1.1 ", response.status, " ", Reason(response.status), "\r\n",
                                 "Content-Type: ", response.content_type, "\r\n",
                                 "Content-Length: ", response.body.size(), "\r\n",
                                 // One request per connection: nothing is held between requests.
                                 "Connection: close\r\n",
                                 "Cache-Control: no-store\r\n",
                                 "X-Content-Type-Options: nosniff\r\n");
  for (const auto& [name, value] : headers) absl::StrAppend(&out, name, ": ", value, "\r\n");
  out += "\r\n";
  out += response.body;
  return out;
}

// %XX in a path; false when one is malformed or decodes to NUL.
bool DecodePath(absl::string_view in, std::string* out) {
  out->clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out->push_back(in[i]);
      continue;
    }
    if (i + 2 >= in.size() || !absl::ascii_isxdigit(in[i + 1]) || !absl::ascii_isxdigit(in[i + 2])) return false;
    const int value = std::stoi(std::string(in.substr(i + 1, 2)), nullptr, 16);
    if (value == 0) return false;
    out->push_back(static_cast<char>(value));
    i += 2;
  }
  return true;
}

bool SetNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  return flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

std::string PeerOf(const sockaddr_storage& address) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (address.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&address);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    port = ntohs(in->sin_port);
  } else if (address.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&address);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    port = ntohs(in6->sin6_port);
  }
  return rpc::JoinHostPort(host, port);
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

// One accepted connection. Owned by the event loop's thread; a worker sees
// only the parsed request and hands back the bytes to write.
struct HttpServer::Connection {
  int fd = -1;
  SSL* ssl = nullptr;
  std::string peer;
  Clock::time_point deadline;
  // kDraining: the answer is out and our side shut; what the peer still
  // sends is read and dropped for a moment, so that closing does not reset
  // the connection before the peer has read the answer.
  enum class Phase { kReading, kHandling, kWriting, kDraining } phase = Phase::kReading;
  // What SSL asked for last (a handshake may want to write while reading).
  bool want_write = false;
  std::string in;
  size_t head_size = 0;  // set once the blank line arrived
  size_t body_size = 0;
  std::string out;
  size_t written = 0;

  ~Connection() {
    if (ssl != nullptr) SSL_free(ssl);
    if (fd >= 0) close(fd);
  }
};

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(HttpServerOptions options) {
  if (absl::Status exposed = rpc::CheckExposure(options.bind_host, options.bind_key); !exposed.ok()) {
    return exposed;
  }
  std::unique_ptr<HttpServer> server(new HttpServer());
  server->name_ = options.name;
  if (options.request_deadline <= std::chrono::milliseconds(0)) {
    return absl::InvalidArgumentError(absl::StrCat("the ", options.name, " endpoint needs a positive request deadline"));
  }
  server->request_deadline_ = options.request_deadline;
  server->log_ = logging::Get("http");
  if (options.tls.has_value()) {
    // The reloader is the one source of the certificate: it reads the files
    // here and hands the pair to every handshake.
    server->reloader_ = std::make_unique<CertificateReloader>(*options.tls);
    RETURN_IF_ERROR(server->reloader_->Load());
    SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == nullptr) return absl::InternalError(absl::StrCat("the ", options.name, " endpoint cannot set up TLS"));
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_SESSION_RESUMPTION_ON_RENEGOTIATION |
                                 SSL_OP_NO_RENEGOTIATION);
    server->reloader_->Install(ctx);
    server->ssl_ctx_ = ctx;
  }
  for (Route& route : options.routes) {
    server->routes_.push_back(CompiledRoute{std::regex(route.pattern), std::move(route.handler), route.probe});
  }

  // Bind: the first address of bind_host that takes the port.
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* addresses = nullptr;
  const std::string service = std::to_string(options.port);
  const std::string where = rpc::JoinHostPort(options.bind_host, options.port);
  const absl::Status cannot_listen = absl::UnavailableError(
      absl::StrCat("the ", options.name, " endpoint cannot listen on ", where,
                   ": the port is taken or the address is not this host's"));
  if (getaddrinfo(options.bind_host.c_str(), service.c_str(), &hints, &addresses) != 0) return cannot_listen;
  for (addrinfo* a = addresses; a != nullptr && server->listen_fd_ < 0; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    // SO_REUSEADDR only: SO_REUSEPORT would let a second daemon bind the
    // same port and take half the requests.
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 128) != 0 || !SetNonBlocking(fd)) {
      close(fd);
      continue;
    }
    server->listen_fd_ = fd;
  }
  freeaddrinfo(addresses);
  if (server->listen_fd_ < 0) return cannot_listen;
  sockaddr_storage bound{};
  socklen_t bound_size = sizeof(bound);
  getsockname(server->listen_fd_, reinterpret_cast<sockaddr*>(&bound), &bound_size);
  server->port_ = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                              : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  server->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (server->wake_fd_ < 0) return absl::InternalError("cannot create an eventfd for the HTTP server");

  server->loop_ = std::thread([s = server.get()] { s->Loop(); });
  for (int i = 0; i < kWorkerThreads; ++i) server->workers_.emplace_back([s = server.get()] { s->WorkerLoop(); });
  server->log_->info("{} listening on {}://{}", options.name, server->https() ? "https" : "http",
                     rpc::JoinHostPort(options.bind_host, server->port_));
  return server;
}

absl::Status TlsFromConfig(const config::Configuration& config, HttpServerOptions* options) {
  ASSIGN_OR_RETURN(options->tls, rpc::RestTlsFiles(config));
  return absl::OkStatus();
}

HttpServer::~HttpServer() {
  Stop();
  if (ssl_ctx_ != nullptr) SSL_CTX_free(ssl_ctx_);
  if (listen_fd_ >= 0) close(listen_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

void HttpServer::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  Wake();
  if (loop_.joinable()) loop_.join();
  for (std::thread& worker : workers_) worker.join();
  workers_.clear();
  // Nothing listens any more: a connect is refused, not left hanging.
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    listen_fd_ = -1;
  }
}

void HttpServer::Wake() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
}

void HttpServer::LastWords(Connection& c, int status, const std::string& why) {
  Refuse(c, status, why);
  // What the peer sent is dropped first: closing a socket with unread input
  // resets it, and the peer might lose the answer.
  char sink[16384];
  while (recv(c.fd, sink, sizeof(sink), 0) > 0) {
  }
  c.out = Serialize(ErrorResponse(status, why), {});
  c.written = 0;
  WriteSome(c);
  if (c.ssl != nullptr) SSL_shutdown(c.ssl);
  shutdown(c.fd, SHUT_WR);
}

void HttpServer::Refuse(const Connection& c, int status, const std::string& why) {
  int64_t suppressed = 0;
  if (refusal_log_.ShouldLog(&suppressed)) {
    log_->warn("{}: refused a request from {} with HTTP {}: {}{}", name_, c.peer, status, why,
               suppressed > 0 ? absl::StrCat(" (", suppressed, " more refusals not logged)") : "");
  }
}

void HttpServer::Loop() {
  // Connection id -> connection; ids only grow, so the oldest is first.
  std::map<uint64_t, std::unique_ptr<Connection>> connections;
  uint64_t next_id = 0;
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;

  // Moves `c` to writing `response`.
  auto respond = [&](Connection& c, const Response& response,
                     const std::vector<std::pair<std::string, std::string>>& headers = {}) {
    c.out = Serialize(response, headers);
    c.written = 0;
    c.phase = Connection::Phase::kWriting;
    c.want_write = false;
  };
  auto refuse = [&](Connection& c, int status, const std::string& why) {
    Refuse(c, status, why);
    respond(c, ErrorResponse(status, why));
  };

  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
      // Answers from the workers.
      while (!answers_.empty()) {
        auto [id, bytes] = std::move(answers_.front());
        answers_.pop_front();
        auto it = connections.find(id);
        if (it == connections.end()) continue;
        it->second->out = std::move(bytes);
        it->second->written = 0;
        it->second->phase = Connection::Phase::kWriting;
        it->second->want_write = false;
        // Writing has a deadline of its own: a slow reader holds a
        // connection slot, never a worker.
        it->second->deadline = Clock::now() + request_deadline_;
      }
    }

    // Deadlines.
    const Clock::time_point now = Clock::now();
    Clock::time_point next_deadline = now + std::chrono::seconds(1);
    for (auto it = connections.begin(); it != connections.end();) {
      Connection& c = *it->second;
      if (c.phase != Connection::Phase::kHandling && now >= c.deadline) {
        if (c.phase == Connection::Phase::kReading && !c.in.empty()) {
          // Best effort: one write of the answer, then the connection goes.
          LastWords(c, 408,
                    absl::StrCat("the request did not arrive within ",
                                 absl::FormatDuration(absl::FromChrono(request_deadline_))));
        }
        it = connections.erase(it);
        continue;
      }
      if (c.phase != Connection::Phase::kHandling) next_deadline = std::min(next_deadline, c.deadline);
      ++it;
    }

    fds.clear();
    ids.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    ids.push_back(0);
    fds.push_back({listen_fd_, POLLIN, 0});
    ids.push_back(0);
    for (const auto& [id, c] : connections) {
      if (c->phase == Connection::Phase::kHandling) continue;
      const bool out = c->phase == Connection::Phase::kWriting || (c->phase == Connection::Phase::kReading && c->want_write);
      fds.push_back({c->fd, static_cast<short>(out ? POLLOUT : POLLIN), 0});
      ids.push_back(id);
    }
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_deadline - now).count() + 1;
    const int ready = poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(wait, 1)));
    if (ready < 0) {
      if (errno == EINTR) continue;
      log_->error("{}: poll failed: {}", name_, std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    if (fds[0].revents != 0) {
      uint64_t drained = 0;
      [[maybe_unused]] ssize_t n = read(wake_fd_, &drained, sizeof(drained));
    }

    // New connections: at capacity, the oldest one still sending its
    // request gives way, so slow or idle peers cannot keep probes out.
    if (fds[1].revents & POLLIN) {
      for (;;) {
        sockaddr_storage address{};
        socklen_t size = sizeof(address);
        const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&address), &size, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        if (static_cast<int>(connections.size()) >= kMaxConnections) {
          auto oldest = connections.end();
          for (auto it = connections.begin(); it != connections.end(); ++it) {
            if (it->second->phase == Connection::Phase::kReading) {
              oldest = it;
              break;
            }
          }
          if (oldest == connections.end()) {
            close(fd);  // every slot is answering: the peer retries
            continue;
          }
          LastWords(*oldest->second, 503, "too many connections: the oldest incomplete request was dropped");
          connections.erase(oldest);
        }
        int yes = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
        auto c = std::make_unique<Connection>();
        c->fd = fd;
        c->peer = PeerOf(address);
        c->deadline = Clock::now() + request_deadline_;
        if (ssl_ctx_ != nullptr) {
          c->ssl = SSL_new(ssl_ctx_);
          if (c->ssl == nullptr || SSL_set_fd(c->ssl, fd) != 1) continue;
          SSL_set_accept_state(c->ssl);
        }
        connections.emplace(++next_id, std::move(c));
      }
    }

    for (size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      auto it = connections.find(ids[i]);
      if (it == connections.end()) continue;
      Connection& c = *it->second;
      bool close_now = false;
      if (c.phase == Connection::Phase::kReading) {
        const ReadState state = ReadSome(c);
        close_now = state == ReadState::kFailed;
        if (!close_now) {
          // Parse what arrived: the head, then a body of Content-Length.
          ParseResult parsed = Parse(c);
          if (parsed.status == ParseStatus::kIncomplete) {
            close_now = state == ReadState::kEndOfInput;
          } else if (parsed.status == ParseStatus::kRefused) {
            refuse(c, parsed.refusal_status, parsed.refusal);
          } else {
            c.phase = Connection::Phase::kHandling;
            absl::MutexLock lock(&mu_);
            work_.push_back(PendingRequest{it->first, std::move(parsed.request), std::move(parsed.authorization),
                                           parsed.has_authorization, c.peer});
          }
        }
      }
      if (!close_now && c.phase == Connection::Phase::kWriting) {
        const int done = WriteSome(c);
        if (done < 0) {
          close_now = true;
        } else if (done > 0) {
          if (c.ssl != nullptr) SSL_shutdown(c.ssl);
          shutdown(c.fd, SHUT_WR);
          c.phase = Connection::Phase::kDraining;
          c.deadline = std::min(c.deadline, Clock::now() + kDrainTime);
          continue;
        }
      }
      if (!close_now && c.phase == Connection::Phase::kDraining) {
        char sink[16384];
        ssize_t n;
        while ((n = recv(c.fd, sink, sizeof(sink), 0)) > 0) {
        }
        close_now = n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
      }
      if (close_now) connections.erase(it);
    }
  }
  // Stopping: wake the workers, drop every connection.
  {
    absl::MutexLock lock(&mu_);
    work_.clear();
  }
  connections.clear();
}

HttpServer::ReadState HttpServer::ReadSome(Connection& c) {
  char buffer[4096];
  for (;;) {
    // Never read past what a request may hold: the rest waits in the kernel.
    const size_t limit = kMaxHeadBytes + kMaxRequestBodyBytes + 1;
    if (c.in.size() >= limit) return ReadState::kOpen;
    const size_t want = std::min(sizeof(buffer), limit - c.in.size());
    ssize_t n;
    if (c.ssl != nullptr) {
      ERR_clear_error();
      n = SSL_read(c.ssl, buffer, static_cast<int>(want));
      if (n <= 0) {
        const int error = SSL_get_error(c.ssl, static_cast<int>(n));
        if (error == SSL_ERROR_WANT_READ) {
          c.want_write = false;
          return ReadState::kOpen;
        }
        if (error == SSL_ERROR_WANT_WRITE) {
          c.want_write = true;
          return ReadState::kOpen;
        }
        // The peer's close_notify, or a failed handshake or a reset.
        return error == SSL_ERROR_ZERO_RETURN ? ReadState::kEndOfInput : ReadState::kFailed;
      }
      c.want_write = false;
    } else {
      n = recv(c.fd, buffer, want, 0);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return ReadState::kOpen;
      if (n == 0) return ReadState::kEndOfInput;
      if (n < 0) return ReadState::kFailed;
    }
    c.in.append(buffer, static_cast<size_t>(n));
  }
}

int HttpServer::WriteSome(Connection& c) {
  while (c.written < c.out.size()) {
    const size_t left = c.out.size() - c.written;
    ssize_t n;
    if (c.ssl != nullptr) {
      ERR_clear_error();
      n = SSL_write(c.ssl, c.out.data() + c.written, static_cast<int>(std::min<size_t>(left, 1 << 20)));
      if (n <= 0) {
        const int error = SSL_get_error(c.ssl, static_cast<int>(n));
        if (error == SSL_ERROR_WANT_WRITE || error == SSL_ERROR_WANT_READ) return 0;
        return -1;
      }
    } else {
      n = send(c.fd, c.out.data() + c.written, left, MSG_NOSIGNAL);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
      if (n <= 0) return -1;
    }
    c.written += static_cast<size_t>(n);
  }
  return 1;
}

HttpServer::ParseResult HttpServer::Parse(Connection& c) {
  ParseResult result;
  auto refuse = [&](int status, std::string why) {
    result.status = ParseStatus::kRefused;
    result.refusal_status = status;
    result.refusal = std::move(why);
    return std::move(result);
  };
  if (c.head_size == 0) {
    const size_t end = c.in.find("\r\n\r\n");
    if (end == std::string::npos) {
      if (c.in.size() > kMaxHeadBytes) {
        return refuse(431, absl::StrCat("the request line and headers exceed ", kMaxHeadBytes, " bytes"));
      }
      result.status = ParseStatus::kIncomplete;
      return result;
    }
    if (end + 4 > kMaxHeadBytes) {
      return refuse(431, absl::StrCat("the request line and headers exceed ", kMaxHeadBytes, " bytes"));
    }
    c.head_size = end + 4;
  }
  const absl::string_view head(c.in.data(), c.head_size - 4);
  std::vector<absl::string_view> lines = absl::StrSplit(head, "\r\n");
  if (lines.empty()) return refuse(400, "an empty request");
  if (lines.size() - 1 > static_cast<size_t>(kMaxHeaderCount)) {
    return refuse(431, absl::StrCat("more than ", kMaxHeaderCount, " header fields"));
  }
  std::vector<absl::string_view> parts = absl::StrSplit(lines[0], ' ');
  if (parts.size() != 3 || parts[1].empty()) return refuse(400, "a malformed request line");
  if (parts[2] != "HTTP/1.1" && parts[2] != "HTTP/1.0") {
    return refuse(absl::StartsWith(parts[2], "HTTP/") ? 505 : 400, "only HTTP/1.0 and HTTP/1.1 are served");
  }
  size_t content_length = 0;
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == absl::string_view::npos || colon == 0) return refuse(400, "a malformed header field");
    const std::string name = absl::AsciiStrToLower(std::string(lines[i].substr(0, colon)));
    if (name.find_first_of(" \t") != std::string::npos) return refuse(400, "a malformed header field");
    const absl::string_view value = absl::StripAsciiWhitespace(lines[i].substr(colon + 1));
    if (name == "authorization") {
      if (result.has_authorization) return refuse(400, "more than one Authorization header");
      result.has_authorization = true;
      result.authorization = std::string(value);
    } else if (name == "content-length") {
      if (!absl::SimpleAtoi(value, &content_length)) return refuse(400, "a malformed Content-Length");
      if (content_length > kMaxRequestBodyBytes) {
        return refuse(413, absl::StrCat("the request body exceeds ", kMaxRequestBodyBytes, " bytes"));
      }
    } else if (name == "transfer-encoding") {
      return refuse(501, "chunked or encoded request bodies are not accepted");
    }
  }
  if (c.in.size() < c.head_size + content_length) {
    result.status = ParseStatus::kIncomplete;
    return result;
  }
  if (parts[0] != "GET") {
    result.status = ParseStatus::kRefused;
    result.refusal_status = 405;
    result.refusal = absl::StrCat("method ", parts[0].substr(0, 16), " is not allowed: this endpoint serves GET");
    return result;
  }
  absl::string_view target = parts[1];
  if (const size_t query = target.find('?'); query != absl::string_view::npos) target = target.substr(0, query);
  if (target.size() > kMaxPathBytes) return refuse(414, absl::StrCat("the path exceeds ", kMaxPathBytes, " bytes"));
  if (target.empty() || target[0] != '/' || !DecodePath(target, &result.request.path)) {
    return refuse(400, "a malformed path");
  }
  result.status = ParseStatus::kComplete;
  return result;
}

bool HttpServer::HasWorkOrStopping() const { return stopping_ || !work_.empty(); }

void HttpServer::WorkerLoop() {
  for (;;) {
    PendingRequest item;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &HttpServer::HasWorkOrStopping));
      if (stopping_) return;
      item = std::move(work_.front());
      work_.pop_front();
    }
    std::string bytes = Handle(item);
    {
      absl::MutexLock lock(&mu_);
      answers_.emplace_back(item.connection, std::move(bytes));
    }
    Wake();
  }
}

std::string HttpServer::Handle(PendingRequest& item) {
  const CompiledRoute* route = nullptr;
  std::smatch match;
  for (const CompiledRoute& candidate : routes_) {
    if (std::regex_match(item.request.path, match, candidate.pattern)) {
      route = &candidate;
      break;
    }
  }
  // Only probes go without the secret, and unknown paths are refused before
  // they are looked up: no probing for what exists.
  if (rpc::AuthEnabled() && (route == nullptr || !route->probe)) {
    const rpc::Credential credential =
        rpc::CheckAuthorization(item.has_authorization ? &item.authorization : nullptr);
    if (credential != rpc::Credential::kAccepted) {
      rpc::LogRefusal(absl::StrCat(item.peer, " (HTTP)"), credential);
      return Serialize(ErrorResponse(401, rpc::RefusalMessage(credential)), {{"WWW-Authenticate", "Bearer"}});
    }
  }
  if (route == nullptr) return Serialize(ErrorResponse(404, absl::StrCat("no such resource: ", item.request.path)), {});
  for (size_t i = 1; i < match.size(); ++i) item.request.params.push_back(match[i].str());
  try {
    return Serialize(route->handler(item.request), {});
  } catch (const std::exception& e) {
    return Serialize(ErrorResponse(500, absl::StrCat("internal error: ", e.what())), {});
  }
}

}  // namespace weir::http
