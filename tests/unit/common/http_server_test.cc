// The daemons' HTTP endpoint: routes with parameters, JSON errors, the
// shared secret (probes exempt), clear refusals at start, and the bounds a
// peer without credentials meets (head size and field count, body size,
// the per-request deadline, slow and many connections).
#include "common/http/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "absl/strings/match.h"
#include "common/http/metric_families.h"
#include "common/rpc/auth.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/http_get.h"

namespace weir::http {
namespace {

using testing::HttpGet;

std::vector<Route> TestRoutes() {
  return {
      {.pattern = "/healthz",
       .handler = [](const Request&) { return Response{.content_type = "text/plain", .body = "ok\n"}; },
       .probe = true},
      {.pattern = "/jobs/([^/]+)/checkpoints",
       .handler = [](const Request& r) { return Response{.body = nlohmann::json{{"job", r.params.at(0)}}.dump()}; }},
      {.pattern = "/boom", .handler = [](const Request&) -> Response { throw std::runtime_error("kaput"); }},
  };
}

class HttpServerTest : public ::testing::Test {
 protected:
  void TearDown() override { rpc::SetAuthToken(""); }
};

TEST_F(HttpServerTest, ServesRoutesWithParametersAndJsonErrors) {
  auto server = HttpServer::Start({.name = "test", .bind_host = "127.0.0.1", .port = 0, .routes = TestRoutes()});
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  ASSERT_GT(port, 0);

  testing::HttpResult health = HttpGet(port, "/healthz");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.body, "ok\n");

  testing::HttpResult job = HttpGet(port, "/jobs/abc123/checkpoints");
  ASSERT_EQ(job.status, 200);
  EXPECT_EQ(nlohmann::json::parse(job.body)["job"], "abc123");
  EXPECT_TRUE(absl::StartsWith(job.content_type, "application/json")) << job.content_type;

  // The whole path must match: no prefix matches.
  testing::HttpResult missing = HttpGet(port, "/jobs/abc123/checkpoints/7");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(nlohmann::json::parse(missing.body)["errors"][0], "no such resource: /jobs/abc123/checkpoints/7");

  testing::HttpResult boom = HttpGet(port, "/boom");
  EXPECT_EQ(boom.status, 500);
  EXPECT_TRUE(absl::StrContains(boom.body, "kaput")) << boom.body;

  (*server)->Stop();
  EXPECT_EQ(HttpGet(port, "/healthz").status, 0);
}

TEST_F(HttpServerTest, RequiresTheSharedSecretExceptForProbes) {
  rpc::SetAuthToken("s3cret");
  auto server = HttpServer::Start({.name = "test", .bind_host = "127.0.0.1", .port = 0, .routes = TestRoutes()});
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();

  EXPECT_EQ(HttpGet(port, "/healthz").status, 200);
  testing::HttpResult without = HttpGet(port, "/jobs/j/checkpoints");
  EXPECT_EQ(without.status, 401);
  EXPECT_TRUE(absl::StrContains(without.body, "none was given")) << without.body;
  testing::HttpResult wrong = HttpGet(port, "/jobs/j/checkpoints", "guess");
  EXPECT_EQ(wrong.status, 401);
  EXPECT_TRUE(absl::StrContains(wrong.body, "does not match")) << wrong.body;
  // Unknown paths are refused before they are looked up: no probing.
  EXPECT_EQ(HttpGet(port, "/no/such/thing").status, 401);
  EXPECT_EQ(HttpGet(port, "/jobs/j/checkpoints", "s3cret").status, 200);
}

TEST_F(HttpServerTest, RefusesToListenBeyondLoopbackWithoutASecret) {
  auto server = HttpServer::Start(
      {.name = "test", .bind_host = "0.0.0.0", .port = 0, .bind_key = "rest.address", .routes = TestRoutes()});
  ASSERT_FALSE(server.ok());
  EXPECT_TRUE(absl::StrContains(server.status().message(), "rest.address '0.0.0.0'")) << server.status();
  EXPECT_TRUE(absl::StrContains(server.status().message(), "security.auth.token-file")) << server.status();
}

TEST_F(HttpServerTest, ATakenPortIsAClearError) {
  auto first = HttpServer::Start({.name = "first", .bind_host = "127.0.0.1", .port = 0, .routes = TestRoutes()});
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = HttpServer::Start(
      {.name = "JobManager REST", .bind_host = "127.0.0.1", .port = (*first)->port(), .routes = TestRoutes()});
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::StrContains(second.status().message(),
                                absl::StrCat("JobManager REST endpoint cannot listen on 127.0.0.1:", (*first)->port())))
      << second.status();
}

// A raw TCP connection to the server, for requests no HTTP client sends.
class RawConnection {
 public:
  explicit RawConnection(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
      throw std::runtime_error("cannot connect");
    }
  }
  ~RawConnection() { close(fd_); }
  // Sends what the server takes; false once it no longer does.
  bool Send(const std::string& bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }
  // Everything until the server closes (or `wait` passes): the answer.
  std::string ReadAll(std::chrono::milliseconds wait = std::chrono::seconds(20)) {
    std::string in;
    const auto end = std::chrono::steady_clock::now() + wait;
    char buffer[4096];
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now()).count();
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(std::clamp<int64_t>(left, 0, 100))) > 0) {
        const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
        if (n <= 0) break;
        in.append(buffer, static_cast<size_t>(n));
      } else if (left <= 0) {
        break;
      }
    }
    return in;
  }

 private:
  int fd_ = -1;
};

std::unique_ptr<HttpServer> StartTestServer(std::chrono::milliseconds deadline = std::chrono::seconds(10)) {
  auto server = HttpServer::Start(
      {.name = "test", .bind_host = "127.0.0.1", .port = 0, .routes = TestRoutes(), .request_deadline = deadline});
  if (!server.ok()) throw std::runtime_error(std::string(server.status().message()));
  return std::move(*server);
}

TEST_F(HttpServerTest, AHugeHeaderIsRefusedAfterTheLimitNotBuffered) {
  auto server = StartTestServer();
  RawConnection c(server->port());
  ASSERT_TRUE(c.Send("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: "));
  // 8 MiB of one header line: the server answers once it has 16 KiB and
  // drops the rest unread, so sending may stop early.
  const std::string chunk(64 << 10, 'a');
  for (int i = 0; i < 128 && c.Send(chunk); ++i) {
  }
  const std::string answer = c.ReadAll();
  EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 431 ")) << answer.substr(0, 200);
  EXPECT_TRUE(absl::StrContains(answer, "exceed 16384 bytes")) << answer.substr(0, 400);
  EXPECT_EQ(HttpGet(server->port(), "/healthz").status, 200);
}

TEST_F(HttpServerTest, TooManyHeaderFieldsAreRefused) {
  auto server = StartTestServer();
  RawConnection c(server->port());
  std::string request = "GET /healthz HTTP/1.1\r\n";
  for (int i = 0; i < 65; ++i) request += absl::StrCat("X-", i, ": 1\r\n");
  ASSERT_TRUE(c.Send(request + "\r\n"));
  const std::string answer = c.ReadAll();
  EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 431 ")) << answer;
  EXPECT_TRUE(absl::StrContains(answer, "more than 64 header fields")) << answer;
}

TEST_F(HttpServerTest, MalformedAndUnservedRequestsGetClearStatuses) {
  auto server = StartTestServer();
  struct Case {
    std::string request;
    std::string status_line;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"POST /healthz HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", "HTTP/1.1 405 ", "serves GET"},
      {"GET /healthz HTTP/1.1\r\nContent-Length: 70000\r\n\r\n", "HTTP/1.1 413 ", "exceeds 65536 bytes"},
      {"GET /healthz HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", "HTTP/1.1 501 ", "not accepted"},
      {"GET /healthz\r\n\r\n", "HTTP/1.1 400 ", "malformed request line"},
      {"GET /healthz HTTP/2.0\r\n\r\n", "HTTP/1.1 505 ", "HTTP/1.1"},
      {"GET /jobs/%00/checkpoints HTTP/1.1\r\n\r\n", "HTTP/1.1 400 ", "malformed path"},
      {"GET /healthz HTTP/1.1\r\nno colon here\r\n\r\n", "HTTP/1.1 400 ", "malformed header"},
      {"GET /jobs/a%62c/checkpoints?x=1 HTTP/1.1\r\n\r\n", "HTTP/1.1 200 ", "\"abc\""},
  };
  for (const Case& test : cases) {
    RawConnection c(server->port());
    ASSERT_TRUE(c.Send(test.request));
    const std::string answer = c.ReadAll();
    EXPECT_TRUE(absl::StartsWith(answer, test.status_line)) << test.request << " -> " << answer;
    EXPECT_TRUE(absl::StrContains(answer, test.says)) << test.request << " -> " << answer;
  }
}

TEST_F(HttpServerTest, ARequestMustArriveWithinTheDeadlineNotPerRead) {
  auto server = StartTestServer(std::chrono::milliseconds(1500));
  RawConnection c(server->port());
  ASSERT_TRUE(c.Send("GET /healthz HTTP/1.1\r\n"));
  // One header byte every 100 ms never completes the request: each read is
  // quick, the whole request is not.
  std::string answer;
  for (int i = 0; i < 100 && answer.empty(); ++i) {
    if (!c.Send("a")) break;
    answer = c.ReadAll(std::chrono::milliseconds(100));
  }
  if (answer.empty()) answer = c.ReadAll(std::chrono::seconds(5));
  EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 408 ")) << answer;
}

TEST_F(HttpServerTest, SlowAndIdleConnectionsDoNotStarveProbes) {
  auto server = StartTestServer();
  // Far more silent, half-sent requests than worker threads, and then more
  // than the connection limit: each holds a connection, none a worker, and
  // at the limit the oldest gives way. The probe is answered while all of
  // them are still within their 10 s deadline.
  std::vector<std::unique_ptr<RawConnection>> slow;
  for (int i = 0; i < HttpServer::kMaxConnections + 20; ++i) {
    slow.push_back(std::make_unique<RawConnection>(server->port()));
    ASSERT_TRUE(slow.back()->Send("GET /healthz HTTP/1.1\r\nX-Slow: "));
  }
  testing::HttpResult health = HttpGet(server->port(), "/healthz");
  EXPECT_EQ(health.status, 200);
  // The newest slow request is still waiting, unanswered: the probe did not
  // queue behind it (it would have had its 408 first).
  EXPECT_EQ(slow.back()->ReadAll(std::chrono::milliseconds(0)), "");
  // The oldest were dropped with a 503 to make room.
  EXPECT_TRUE(absl::StartsWith(slow.front()->ReadAll(std::chrono::seconds(2)), "HTTP/1.1 503 "));
}

TEST(HealthHandlerTest, StuckMeans503) {
  EXPECT_EQ(HealthHandler(nullptr)(Request{}).status, 200);
  EXPECT_EQ(HealthHandler([] { return true; })(Request{}).status, 200);
  EXPECT_EQ(HealthHandler([] { return false; })(Request{}).status, 503);
}

TEST(MetricFamiliesTest, WritesThePrometheusTextFormat) {
  MetricFamilies metrics;
  metrics.Gauge("weir_slots", "Slots.", {}, 4);
  metrics.Counter("weir_task_records_in_total", "Records in.", {{"job_id", "j1"}, {"task", "Source \"k\""}}, 12);
  metrics.Counter("weir_task_records_in_total", "Records in.", {{"job_id", "j2"}, {"task", "Map"}}, 3);
  const std::string text = metrics.Text();
  EXPECT_TRUE(absl::StrContains(text, "# TYPE weir_slots gauge\nweir_slots 4\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "# TYPE weir_task_records_in_total counter\n")) << text;
  // One family, both samples, label values escaped.
  EXPECT_TRUE(absl::StrContains(text, "weir_task_records_in_total{job_id=\"j1\",task=\"Source \\\"k\\\"\"} 12\n"))
      << text;
  EXPECT_TRUE(absl::StrContains(text, "weir_task_records_in_total{job_id=\"j2\",task=\"Map\"} 3\n")) << text;
  EXPECT_EQ(text.find("# TYPE weir_task_records_in_total"), text.rfind("# TYPE weir_task_records_in_total"));
}

}  // namespace
}  // namespace weir::http
