// Metrics an operator exports: counters and gauges that its TaskManager
// serves on /metrics (Prometheus text format), each labelled with the job,
// the task, the subtask and the operator, plus the labels given here.
//
//   weir::Counter& late = context.metrics().counter(
//       "myjob_late_events_total", "Events that arrived after their window closed.");
//   ...
//   late.Inc();
//
// Ask for a metric once (in Open) and keep the reference: it stays valid
// until the operator is closed (not longer: never keep it in a static). Updating one is a relaxed atomic operation,
// safe from any thread; asking again with the same name and labels returns
// the same object.
//
// Names follow Prometheus' conventions: [a-zA-Z_:][a-zA-Z0-9_:]*, base units
// (seconds, bytes), counters ending in _total. Label names are
// [a-zA-Z_][a-zA-Z0-9_]* and may not be one the runtime sets (job_id, task,
// subtask, attempt, operator). A bad name, or a name used for both a counter
// and a gauge, throws std::invalid_argument.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace weir {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  void Inc(int64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  int64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> value_{0};
};

class Gauge {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class MetricGroup {
 public:
  virtual ~MetricGroup() = default;
  virtual Counter& counter(std::string_view name, std::string_view help, const MetricLabels& labels = {}) = 0;
  virtual Gauge& gauge(std::string_view name, std::string_view help, const MetricLabels& labels = {}) = 0;
};

}  // namespace weir
