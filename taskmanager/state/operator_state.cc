#include "taskmanager/state/operator_state.h"

#include <stdexcept>
#include <utility>

#include "absl/strings/str_cat.h"

namespace weir::taskmanager {

class OperatorStateBackend::ListState final : public OperatorListState {
 public:
  ListState(bool is_union, std::vector<std::string> entries) : is_union_(is_union), entries_(std::move(entries)) {}
  const std::vector<std::string>& Get() const override { return entries_; }
  void Update(std::vector<std::string> entries) override { entries_ = std::move(entries); }
  void Add(std::string entry) override { entries_.push_back(std::move(entry)); }
  void Clear() override { entries_.clear(); }
  bool is_union() const { return is_union_; }

 private:
  const bool is_union_;
  std::vector<std::string> entries_;
};

OperatorStateBackend::OperatorStateBackend(OperatorStateSnapshot restored) : restored_(std::move(restored)) {}

OperatorStateBackend::~OperatorStateBackend() = default;

OperatorListState* OperatorStateBackend::GetListState(std::string_view name) { return Get(name, false); }

OperatorListState* OperatorStateBackend::GetUnionListState(std::string_view name) { return Get(name, true); }

OperatorListState* OperatorStateBackend::Get(std::string_view name, bool is_union) {
  auto mode = [](bool u) { return u ? "a union list state" : "a list state"; };
  const absl::string_view label(name.data(), name.size());
  if (auto it = states_.find(name); it != states_.end()) {
    if (it->second->is_union() != is_union) {
      throw std::invalid_argument(absl::StrCat("operator state '", label, "' is ", mode(it->second->is_union()),
                                               ", not ", mode(is_union)));
    }
    return it->second.get();
  }
  std::vector<std::string> entries;
  if (auto it = restored_.find(std::string(name)); it != restored_.end()) {
    if (it->second.is_union != is_union) {
      throw std::invalid_argument(absl::StrCat("operator state '", label, "' was checkpointed as ",
                                               mode(it->second.is_union), " but the job now asks for ", mode(is_union)));
    }
    entries = std::move(it->second.entries);
    restored_.erase(it);
  }
  auto [it, inserted] = states_.emplace(std::string(name), std::make_unique<ListState>(is_union, std::move(entries)));
  return it->second.get();
}

OperatorStateSnapshot OperatorStateBackend::Snapshot() const {
  OperatorStateSnapshot out;
  for (const auto& [name, state] : states_) out[name] = ListStateSnapshot{state->is_union(), state->Get()};
  // Restored state the job did not ask for this time is kept, not dropped.
  for (const auto& [name, state] : restored_) out.emplace(name, state);
  return out;
}

std::vector<OperatorStateSnapshot> RedistributeOperatorState(const std::vector<OperatorStateSnapshot>& old_subtasks,
                                                             int new_parallelism) {
  if (static_cast<int>(old_subtasks.size()) == new_parallelism) return old_subtasks;
  std::vector<OperatorStateSnapshot> out(new_parallelism);
  std::map<std::string, int> next_subtask;  // per split state: where its next entry goes
  for (const OperatorStateSnapshot& old : old_subtasks) {
    for (const auto& [name, state] : old) {
      for (OperatorStateSnapshot& target : out) {
        ListStateSnapshot& list = target[name];
        list.is_union = state.is_union;
      }
      if (state.is_union) {
        for (OperatorStateSnapshot& target : out) {
          auto& entries = target[name].entries;
          entries.insert(entries.end(), state.entries.begin(), state.entries.end());
        }
        continue;
      }
      int& next = next_subtask[name];
      for (const std::string& entry : state.entries) {
        out[next][name].entries.push_back(entry);
        next = (next + 1) % new_parallelism;
      }
    }
  }
  return out;
}

}  // namespace weir::taskmanager
