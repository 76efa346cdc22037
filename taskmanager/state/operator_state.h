// OperatorStateBackend: the operator (non-keyed) state of one operator
// instance — named list states — and how a snapshot of it is handed to the
// subtasks of a restored job.
//
// Thread-safety: not thread-safe; used by its task thread only. The
// snapshots are plain values.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "weir/operator.h"

namespace weir::taskmanager {

// One list state as a checkpoint holds it.
struct ListStateSnapshot {
  // Union list state (every subtask gets every entry on restore) or split.
  bool is_union = false;
  std::vector<std::string> entries;
  bool operator==(const ListStateSnapshot&) const = default;
};

// The operator state of one operator instance in one checkpoint, by name.
using OperatorStateSnapshot = std::map<std::string, ListStateSnapshot>;

class OperatorStateBackend final : public OperatorStateStore {
 public:
  // `restored`: what this subtask gets from a checkpoint (after
  // RedistributeOperatorState), or empty for a fresh start.
  explicit OperatorStateBackend(OperatorStateSnapshot restored = {});
  ~OperatorStateBackend() override;

  // Throw std::invalid_argument when `name` was restored (or is already
  // registered) in the other mode: a job changed a state's kind.
  OperatorListState* GetListState(std::string_view name) override;
  OperatorListState* GetUnionListState(std::string_view name) override;

  // What every registered list state holds now.
  OperatorStateSnapshot Snapshot() const;

 private:
  class ListState;
  OperatorListState* Get(std::string_view name, bool is_union);

  OperatorStateSnapshot restored_;
  std::map<std::string, std::unique_ptr<ListState>, std::less<>> states_;
};

// Hands the operator state of an operator's old subtasks (one snapshot per
// old subtask, in subtask order) to `new_parallelism` subtasks. At the same
// parallelism every subtask gets its own state back. Otherwise the entries of
// a split list state, in old subtask order, go round-robin to the new
// subtasks (each entry to exactly one), and a union list state goes whole to
// every subtask.
std::vector<OperatorStateSnapshot> RedistributeOperatorState(const std::vector<OperatorStateSnapshot>& old_subtasks,
                                                             int new_parallelism);

}  // namespace weir::taskmanager
