#include "taskmanager/state/in_memory_keyed_state.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "absl/strings/str_cat.h"
#include "weir/serializer.h"

namespace weir::taskmanager {

InMemoryKeyedState::InMemoryKeyedState(state::KeyGroupRange range, int max_parallelism)
    : range_(range), max_parallelism_(max_parallelism), groups_(std::max(range.size(), 0)) {}

void InMemoryKeyedState::SetCurrentKey(std::string_view key) {
  const int group = state::KeyGroupForKey(absl::string_view(key.data(), key.size()), max_parallelism_);
  if (!range_.Contains(group)) {
    throw std::logic_error(absl::StrCat("a record with key group ", group, " reached the subtask owning key groups ",
                                        range_.DebugString(), "; the job's max parallelism differs between its "
                                        "producer and consumer"));
  }
  current_ = &groups_[group - range_.start];
  current_key_.assign(key.data(), key.size());
}

const std::string& InMemoryKeyedState::Slot(std::string_view state_name) {
  if (current_ == nullptr) throw std::logic_error("keyed state used before a key was set");
  slot_.clear();
  weir::internal::WriteVarint(state_name.size(), slot_);
  slot_.append(state_name);
  slot_.append(current_key_);
  return slot_;
}

std::optional<std::string> InMemoryKeyedState::Get(std::string_view state_name) {
  const std::string& slot = Slot(state_name);
  auto it = current_->find(slot);
  if (it == current_->end()) return std::nullopt;
  return it->second;
}

void InMemoryKeyedState::Put(std::string_view state_name, std::string_view value) {
  const std::string& slot = Slot(state_name);
  (*current_)[slot] = std::string(value);
}

void InMemoryKeyedState::Remove(std::string_view state_name) {
  const std::string& slot = Slot(state_name);
  current_->erase(slot);
}

std::string InMemoryKeyedState::SnapshotKeyGroup(int key_group) const {
  const Group& group = groups_.at(key_group - range_.start);
  std::vector<const std::pair<const std::string, std::string>*> entries;
  entries.reserve(group.size());
  for (const auto& entry : group) entries.push_back(&entry);
  std::sort(entries.begin(), entries.end(), [](auto* a, auto* b) { return a->first < b->first; });
  std::string out;
  for (const auto* entry : entries) {
    weir::internal::WriteVarint(entry->first.size(), out);
    out.append(entry->first);
    weir::internal::WriteVarint(entry->second.size(), out);
    out.append(entry->second);
  }
  return out;
}

absl::Status InMemoryKeyedState::RestoreKeyGroup(int key_group, absl::string_view bytes) {
  if (!range_.Contains(key_group)) {
    return absl::InvalidArgumentError(absl::StrCat("key group ", key_group, " is not in this subtask's range ",
                                                   range_.DebugString()));
  }
  Group& group = groups_[key_group - range_.start];
  const std::string_view in(bytes.data(), bytes.size());
  size_t pos = 0;
  try {
    while (pos < in.size()) {
      std::string_view slot = weir::internal::ReadField(in, &pos);
      std::string_view value = weir::internal::ReadField(in, &pos);
      group[std::string(slot)] = std::string(value);
    }
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("keyed state of key group ", key_group, " is corrupt at byte ", pos,
                                            ": ", e.what()));
  }
  return absl::OkStatus();
}

size_t InMemoryKeyedState::size() const {
  size_t n = 0;
  for (const Group& group : groups_) n += group.size();
  return n;
}

}  // namespace weir::taskmanager
