#include "taskmanager/metrics/task_metrics.h"

#include <stdexcept>

#include "absl/strings/str_cat.h"

namespace weir::taskmanager {
namespace {

bool ValidName(std::string_view name, bool allow_colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (allow_colon && c == ':');
    const bool digit = c >= '0' && c <= '9';
    if (!letter && !(digit && i > 0)) return false;
  }
  return true;
}

bool Reserved(std::string_view label) {
  return label == "job_id" || label == "task" || label == "subtask" || label == "attempt" || label == "operator";
}

class OperatorGroup final : public MetricGroup {
 public:
  OperatorGroup(TaskMetrics* metrics, std::string operator_name)
      : metrics_(metrics), operator_name_(std::move(operator_name)) {}

  Counter& counter(std::string_view name, std::string_view help, const MetricLabels& labels) override {
    return metrics_->GetCounter(name, help, WithOperator(labels));
  }
  Gauge& gauge(std::string_view name, std::string_view help, const MetricLabels& labels) override {
    return metrics_->GetGauge(name, help, WithOperator(labels));
  }

 private:
  MetricLabels WithOperator(const MetricLabels& labels) const {
    for (const auto& [label, value] : labels) {
      if (!ValidName(label, false) || Reserved(label)) {
        throw std::invalid_argument(absl::StrCat("metric label '", label, "' of operator '", operator_name_,
                                                 "' is not allowed: use [a-zA-Z_][a-zA-Z0-9_]*, and none of "
                                                 "job_id, task, subtask, attempt, operator (the runtime sets those)"));
      }
    }
    MetricLabels out = {{"operator", operator_name_}};
    out.insert(out.end(), labels.begin(), labels.end());
    return out;
  }

  TaskMetrics* const metrics_;
  const std::string operator_name_;
};

}  // namespace

std::unique_ptr<MetricGroup> TaskMetrics::ForOperator(std::string operator_name) {
  return std::make_unique<OperatorGroup>(this, std::move(operator_name));
}

TaskMetrics::Entry& TaskMetrics::Find(std::string_view name, std::string_view help, const MetricLabels& labels,
                                      bool counter) {
  if (!ValidName(name, true) || name.starts_with("weir_task")) {
    throw std::invalid_argument(absl::StrCat("metric name '", std::string(name),
                                             "' is not allowed: use [a-zA-Z_:][a-zA-Z0-9_:]*, e.g. "
                                             "myjob_late_events_total (names starting with weir_task are the "
                                             "runtime's)"));
  }
  auto type = is_counter_.find(name);
  if (type == is_counter_.end()) {
    is_counter_.emplace(std::string(name), counter);
  } else if (type->second != counter) {
    throw std::invalid_argument(absl::StrCat("metric '", std::string(name), "' is already a ", type->second ? "counter" : "gauge",
                                             "; a name has one type"));
  }
  Entry& entry = entries_[{std::string(name), labels}];
  if (entry.name.empty()) {
    entry.name = std::string(name);
    entry.help = std::string(help);
    entry.labels = labels;
    if (counter) {
      entry.counter = std::make_unique<Counter>();
    } else {
      entry.gauge = std::make_unique<Gauge>();
    }
  }
  return entry;
}

Counter& TaskMetrics::GetCounter(std::string_view name, std::string_view help, const MetricLabels& labels) {
  absl::MutexLock lock(&mu_);
  return *Find(name, help, labels, true).counter;
}

Gauge& TaskMetrics::GetGauge(std::string_view name, std::string_view help, const MetricLabels& labels) {
  absl::MutexLock lock(&mu_);
  return *Find(name, help, labels, false).gauge;
}

void TaskMetrics::Export(http::MetricFamilies& out, const http::MetricLabels& task_labels) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [key, entry] : entries_) {
    http::MetricLabels labels = task_labels;
    for (const auto& [label, value] : entry.labels) labels.push_back({label, value});
    if (entry.counter != nullptr) {
      out.Counter(entry.name, entry.help, std::move(labels), static_cast<double>(entry.counter->value()));
    } else {
      out.Gauge(entry.name, entry.help, std::move(labels), entry.gauge->value());
    }
  }
}

}  // namespace weir::taskmanager
