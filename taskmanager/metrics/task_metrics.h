// TaskMetrics: the counters and gauges the operators of one task registered
// (weir/metrics.h), and their export to the TaskManager's /metrics.
//
// Each operator gets a MetricGroup (ForOperator) that adds its name as the
// `operator` label; the TaskManager adds job_id, task, subtask and attempt
// when it exports. Registration takes a mutex; updates are the metric
// objects' relaxed atomics, never locked.
//
// Thread-safety: thread-safe. Metric objects live as long as this registry
// (the task's), longer than the operators that update them.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/http/metric_families.h"
#include "weir/metrics.h"

namespace weir::taskmanager {

class TaskMetrics {
 public:
  // The group operator `operator_name` registers its metrics in.
  std::unique_ptr<MetricGroup> ForOperator(std::string operator_name);

  // Adds every metric, with `task_labels` before its own labels.
  void Export(http::MetricFamilies& out, const http::MetricLabels& task_labels) const ABSL_LOCKS_EXCLUDED(mu_);

  // Registers (or finds) a metric; throws std::invalid_argument for a bad
  // name or label, a name already used for the other type, or a name the
  // runtime exports itself (weir_task*).
  Counter& GetCounter(std::string_view name, std::string_view help, const MetricLabels& labels)
      ABSL_LOCKS_EXCLUDED(mu_);
  Gauge& GetGauge(std::string_view name, std::string_view help, const MetricLabels& labels) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    std::string name;
    std::string help;
    MetricLabels labels;
    std::unique_ptr<Counter> counter;  // one of the two
    std::unique_ptr<Gauge> gauge;
  };

  Entry& Find(std::string_view name, std::string_view help, const MetricLabels& labels, bool counter)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  // By name and labels, so that one name's samples export together.
  std::map<std::pair<std::string, MetricLabels>, Entry> entries_ ABSL_GUARDED_BY(mu_);
  // The type each name was first registered with.
  std::map<std::string, bool, std::less<>> is_counter_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weir::taskmanager
