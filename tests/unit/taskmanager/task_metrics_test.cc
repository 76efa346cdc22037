// Operator metrics (weir/metrics.h) as the runtime keeps and exports them.
#include "taskmanager/metrics/task_metrics.h"

#include <stdexcept>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace weir::taskmanager {
namespace {

std::string Text(const TaskMetrics& metrics) {
  http::MetricFamilies out;
  metrics.Export(out, {{"job_id", "j1"}, {"subtask", "0"}});
  return out.Text();
}

TEST(TaskMetricsTest, OperatorsGetTheirOwnLabelledMetrics) {
  TaskMetrics metrics;
  std::unique_ptr<MetricGroup> source = metrics.ForOperator("Kafka Source");
  std::unique_ptr<MetricGroup> map = metrics.ForOperator("Parse");
  Counter& late = map->counter("myjob_late_events_total", "Late events.");
  late.Inc();
  late.Inc(4);
  // The same name and labels: the same object.
  EXPECT_EQ(&map->counter("myjob_late_events_total", "Late events."), &late);
  source->gauge("myjob_lag_records", "Lag.", {{"partition", "3"}}).Set(17);
  source->gauge("myjob_lag_records", "Lag.", {{"partition", "4"}}).Set(0);

  const std::string text = Text(metrics);
  EXPECT_TRUE(absl::StrContains(text, "# TYPE myjob_late_events_total counter\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "myjob_late_events_total{job_id=\"j1\",subtask=\"0\",operator=\"Parse\"} 5\n"))
      << text;
  EXPECT_TRUE(absl::StrContains(
      text, "myjob_lag_records{job_id=\"j1\",subtask=\"0\",operator=\"Kafka Source\",partition=\"3\"} 17\n"))
      << text;
  EXPECT_TRUE(absl::StrContains(
      text, "myjob_lag_records{job_id=\"j1\",subtask=\"0\",operator=\"Kafka Source\",partition=\"4\"} 0\n"))
      << text;
}

TEST(TaskMetricsTest, BadNamesAndLabelsAreRefusedWithTheReason) {
  TaskMetrics metrics;
  std::unique_ptr<MetricGroup> group = metrics.ForOperator("op");
  group->counter("events_total", "Events.");
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  EXPECT_TRUE(absl::StrContains(message([&] { group->counter("9lives", ""); }), "not allowed")) << "leading digit";
  EXPECT_TRUE(absl::StrContains(message([&] { group->counter("a-b", ""); }), "not allowed"));
  EXPECT_TRUE(absl::StrContains(message([&] { group->gauge("weir_task_records_in_total", ""); }), "runtime's"));
  EXPECT_TRUE(absl::StrContains(message([&] { group->gauge("events_total", ""); }), "already a counter"));
  EXPECT_TRUE(absl::StrContains(message([&] { group->counter("x_total", "", {{"job_id", "j"}}); }),
                                "the runtime sets those"));
  EXPECT_TRUE(absl::StrContains(message([&] { group->counter("x_total", "", {{"bad label", "v"}}); }), "not allowed"));
}

}  // namespace
}  // namespace weir::taskmanager
