// An OperatorContext for tests that drive an operator's hooks in-process:
// its operator state is the runtime's own OperatorStateBackend, starting
// from a snapshot (a restore) or empty (a fresh start), and Snapshot() is
// what a checkpoint would store. Link weir_taskmanager.
//
// Thread-safety: not thread-safe, like the task thread it stands in for.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "taskmanager/metrics/task_metrics.h"
#include "taskmanager/state/operator_state.h"
#include "weir/operator.h"

namespace weir::testing {

class FakeOperatorContext : public OperatorContext {
 public:
  explicit FakeOperatorContext(taskmanager::OperatorStateSnapshot restored = {}, int subtask = 0, int parallelism = 1,
                               std::string name = "test-operator")
      : name_(std::move(name)),
        restored_(!restored.empty()),
        state_(std::move(restored)),
        subtask_(subtask),
        parallelism_(parallelism) {}

  const std::string& operator_name() const override { return name_; }
  int subtask_index() const override { return subtask_; }
  int parallelism() const override { return parallelism_; }
  KeyedStateStore* keyed_state() override { return nullptr; }
  void SetCurrentKey(std::string_view) override {}
  std::string JobConfig(std::string_view, std::string_view fallback) const override { return std::string(fallback); }
  OperatorStateStore* operator_state() override { return &state_; }
  bool is_restored() const override { return restored_; }
  MetricGroup& metrics() override { return *metric_group_; }

  taskmanager::OperatorStateSnapshot Snapshot() const { return state_.Snapshot(); }
  // What the operator registered, as /metrics would show it (no task labels).
  std::string MetricsText() const {
    http::MetricFamilies out;
    metrics_.Export(out, {});
    return out.Text();
  }

 private:
  const std::string name_;
  const bool restored_;
  taskmanager::OperatorStateBackend state_;
  const int subtask_;
  const int parallelism_;
  taskmanager::TaskMetrics metrics_;
  const std::unique_ptr<MetricGroup> metric_group_ = metrics_.ForOperator(name_);
};

}  // namespace weir::testing
