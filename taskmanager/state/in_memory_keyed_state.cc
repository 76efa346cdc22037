#include "taskmanager/state/in_memory_keyed_state.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "weir/serializer.h"

namespace weir::taskmanager {
namespace {

// Record tags of the serialized key-group format.
constexpr char kValueRecord = 'v';  // slot, value
constexpr char kEntryRecord = 'm';  // slot, user key, value

void WriteBytes(std::string_view bytes, std::string& out) {
  weir::internal::WriteVarint(bytes.size(), out);
  out.append(bytes);
}

// The asynchronous part is trivial: the bytes were taken on the task thread.
class SerializedSnapshot final : public KeyedStateSnapshot {
 public:
  explicit SerializedSnapshot(std::map<int, std::string> groups) : groups_(std::move(groups)) {}
  absl::Status WriteInto(const std::string&, const std::string&, v1::OperatorSnapshotProto* out,
                         io::DurableBatch*) override {
    for (auto& [group, bytes] : groups_) {
      v1::KeyGroupSnapshotProto* g = out->add_key_groups();
      g->set_key_group(group);
      g->set_data(std::move(bytes));
    }
    groups_.clear();
    return absl::OkStatus();
  }

 private:
  std::map<int, std::string> groups_;
};

}  // namespace

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

std::string_view InMemoryKeyedState::current_key() const {
  if (current_ == nullptr) throw std::logic_error("keyed state used before a key was set");
  return current_key_;
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
  auto it = current_->values.find(slot);
  if (it == current_->values.end()) return std::nullopt;
  return it->second;
}

void InMemoryKeyedState::Put(std::string_view state_name, std::string_view value) {
  const std::string& slot = Slot(state_name);
  current_->values[slot] = std::string(value);
}

void InMemoryKeyedState::Append(std::string_view state_name, std::string_view bytes) {
  const std::string& slot = Slot(state_name);
  current_->values[slot].append(bytes);
}

void InMemoryKeyedState::Remove(std::string_view state_name) {
  const std::string& slot = Slot(state_name);
  current_->values.erase(slot);
}

std::optional<std::string> InMemoryKeyedState::GetEntry(std::string_view state_name, std::string_view user_key) {
  const std::string& slot = Slot(state_name);
  auto map = current_->maps.find(slot);
  if (map == current_->maps.end()) return std::nullopt;
  auto it = map->second.find(std::string(user_key));
  if (it == map->second.end()) return std::nullopt;
  return it->second;
}

void InMemoryKeyedState::PutEntry(std::string_view state_name, std::string_view user_key, std::string_view value) {
  const std::string& slot = Slot(state_name);
  current_->maps[slot][std::string(user_key)] = std::string(value);
}

void InMemoryKeyedState::RemoveEntry(std::string_view state_name, std::string_view user_key) {
  const std::string& slot = Slot(state_name);
  auto map = current_->maps.find(slot);
  if (map == current_->maps.end()) return;
  map->second.erase(std::string(user_key));
  if (map->second.empty()) current_->maps.erase(map);
}

void InMemoryKeyedState::ForEachEntry(
    std::string_view state_name, absl::FunctionRef<void(std::string_view, std::string_view, std::string_view)> fn) {
  std::string prefix;
  weir::internal::WriteVarint(state_name.size(), prefix);
  prefix.append(state_name);
  for (const Group& group : groups_) {
    for (const auto& [slot, entries] : group.maps) {
      if (slot.size() < prefix.size() || std::string_view(slot).substr(0, prefix.size()) != prefix) continue;
      const std::string_view key = std::string_view(slot).substr(prefix.size());
      for (const auto& [user_key, value] : entries) fn(key, user_key, value);
    }
  }
}

std::vector<std::pair<std::string, std::string>> InMemoryKeyedState::Entries(std::string_view state_name) {
  const std::string& slot = Slot(state_name);
  std::vector<std::pair<std::string, std::string>> out;
  auto map = current_->maps.find(slot);
  if (map == current_->maps.end()) return out;
  out.assign(map->second.begin(), map->second.end());
  return out;
}

void InMemoryKeyedState::ClearEntries(std::string_view state_name) {
  const std::string& slot = Slot(state_name);
  current_->maps.erase(slot);
}

std::string InMemoryKeyedState::SnapshotKeyGroup(int key_group) const {
  const Group& group = groups_.at(key_group - range_.start);
  std::vector<const std::pair<const std::string, std::string>*> values;
  values.reserve(group.values.size());
  for (const auto& entry : group.values) values.push_back(&entry);
  std::sort(values.begin(), values.end(), [](auto* a, auto* b) { return a->first < b->first; });
  std::vector<const std::pair<const std::string, std::map<std::string, std::string>>*> maps;
  maps.reserve(group.maps.size());
  for (const auto& entry : group.maps) maps.push_back(&entry);
  std::sort(maps.begin(), maps.end(), [](auto* a, auto* b) { return a->first < b->first; });
  std::string out;
  for (const auto* entry : values) {
    out.push_back(kValueRecord);
    WriteBytes(entry->first, out);
    WriteBytes(entry->second, out);
  }
  for (const auto* map : maps) {
    for (const auto& [user_key, value] : map->second) {
      out.push_back(kEntryRecord);
      WriteBytes(map->first, out);
      WriteBytes(user_key, out);
      WriteBytes(value, out);
    }
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
      const char tag = in[pos++];
      std::string_view slot = weir::internal::ReadField(in, &pos);
      if (tag == kValueRecord) {
        std::string_view value = weir::internal::ReadField(in, &pos);
        group.values[std::string(slot)] = std::string(value);
      } else if (tag == kEntryRecord) {
        std::string_view user_key = weir::internal::ReadField(in, &pos);
        std::string_view value = weir::internal::ReadField(in, &pos);
        group.maps[std::string(slot)][std::string(user_key)] = std::string(value);
      } else {
        throw std::runtime_error(absl::StrCat("unknown record tag ", static_cast<int>(tag)));
      }
    }
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("keyed state of key group ", key_group, " is corrupt at byte ", pos,
                                            ": ", e.what()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<KeyedStateSnapshot>> InMemoryKeyedState::TakeSnapshot(int64_t) {
  std::map<int, std::string> groups;
  for (int group = range_.start; group < range_.end; ++group) {
    std::string bytes = SnapshotKeyGroup(group);
    if (!bytes.empty()) groups.emplace(group, std::move(bytes));
  }
  return std::make_unique<SerializedSnapshot>(std::move(groups));
}

absl::Status InMemoryKeyedState::RestoreState(const std::vector<KeyedStateRestore>& parts) {
  for (const KeyedStateRestore& part : parts) {
    if (!part.snapshot.keyed_files().backend().empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the checkpoint holds this operator's keyed state from the '", part.snapshot.keyed_files().backend(),
          "' state backend, but the job now runs with 'hashmap'; set state.backend.type back to '",
          part.snapshot.keyed_files().backend(), "' to restore it"));
    }
    for (const v1::KeyGroupSnapshotProto& g : part.snapshot.key_groups()) {
      if (!range_.Contains(g.key_group())) continue;  // another subtask's share
      RETURN_IF_ERROR(RestoreKeyGroup(g.key_group(), g.data()));
    }
  }
  return absl::OkStatus();
}

size_t InMemoryKeyedState::size() const {
  size_t n = 0;
  for (const Group& group : groups_) {
    n += group.values.size();
    for (const auto& [slot, map] : group.maps) n += map.size();
  }
  return n;
}

}  // namespace weir::taskmanager
