// Log lines in the json format: one object per line, the message escaped,
// and the fields of the ScopedFields alive on the logging thread as keys of
// their own (nested ones added to outer ones, gone with their scope).
#include "common/logging/logging.h"

#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace weir::logging {
namespace {

std::vector<nlohmann::json> Lines(const std::string& captured) {
  std::vector<nlohmann::json> out;
  std::istringstream in(captured);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));  // throws (fails the test) if not JSON
  }
  return out;
}

TEST(LoggingTest, JsonLinesCarryTheScopedFields) {
  ASSERT_TRUE(Init("info", "json").ok());
  auto log = Get("logging-test");
  ::testing::internal::CaptureStderr();
  {
    ScopedFields outer({{"job", "j-1"}, {"checkpoint_id", int64_t{7}}});
    {
      ScopedFields inner({{"reason", "task \"a\" declined\n"}, {"ratio", 0.5}});
      log->warn("checkpoint {} aborted", 7);
    }
    log->info("checkpoint {} \"quoted\"", 8);
  }
  log->info("no fields");
  const std::vector<nlohmann::json> lines = Lines(::testing::internal::GetCapturedStderr());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["job"], "j-1");
  EXPECT_EQ(lines[0]["checkpoint_id"], 7);
  EXPECT_EQ(lines[0]["reason"], "task \"a\" declined\n");
  EXPECT_EQ(lines[0]["ratio"], 0.5);
  EXPECT_EQ(lines[0]["level"], "warn");  // as log.level spells it
  EXPECT_EQ(lines[0]["msg"], "checkpoint 7 aborted");
  EXPECT_EQ(lines[1]["job"], "j-1");
  EXPECT_FALSE(lines[1].contains("reason"));
  EXPECT_EQ(lines[1]["msg"], "checkpoint 8 \"quoted\"");
  EXPECT_FALSE(lines[2].contains("job"));
  EXPECT_EQ(lines[2]["logger"], "logging-test");

  // The text format says it in the message only.
  ASSERT_TRUE(Init("info", "text").ok());
  ::testing::internal::CaptureStderr();
  {
    ScopedFields fields({{"job", "j-2"}});
    log->info("job {} started", "j-2");
  }
  const std::string text = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(text.find("[logging-test] job j-2 started"), std::string::npos) << text;
  EXPECT_EQ(text.find("{"), std::string::npos) << text;
}

// One line per interval; what it held back is counted into the next one.
TEST(RateLimiterTest, AdmitsOneLinePerIntervalAndCountsTheRest) {
  RateLimiter limiter(std::chrono::hours(1));
  int64_t suppressed = -1;
  EXPECT_TRUE(limiter.ShouldLog(&suppressed));
  EXPECT_EQ(suppressed, 0);
  EXPECT_FALSE(limiter.ShouldLog(&suppressed));
  EXPECT_FALSE(limiter.ShouldLog(&suppressed));
  RateLimiter every_time(std::chrono::nanoseconds(0));
  EXPECT_TRUE(every_time.ShouldLog(&suppressed));
  EXPECT_TRUE(every_time.ShouldLog(&suppressed));
  EXPECT_EQ(suppressed, 0);
}

// After the interval, the next line carries the count of those held back.
TEST(RateLimiterTest, TheNextLineCarriesTheCount) {
  RateLimiter limiter(std::chrono::milliseconds(50));
  int64_t suppressed = 0;
  ASSERT_TRUE(limiter.ShouldLog(&suppressed));
  int held = 0;
  while (!limiter.ShouldLog(&suppressed)) ++held;
  EXPECT_EQ(suppressed, held);
  EXPECT_GT(held, 0);
}

}  // namespace
}  // namespace weir::logging
