// The daemons' HTTP endpoint: routes with parameters, JSON errors, the
// shared secret (probes exempt), and clear refusals at start.
#include "common/http/http_server.h"

#include <stdexcept>

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
