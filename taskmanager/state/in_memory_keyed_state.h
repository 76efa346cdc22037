// InMemoryKeyedState: keyed state of one operator instance, kept in hash maps
// on the heap, one per key group of the subtask's range (the `hashmap` state
// backend). A snapshot and a restore work per key group, so that state can be
// handed to subtasks of another parallelism by key-group range.
//
// Thread-safety: not thread-safe; used by its task thread only.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/state/key_groups.h"
#include "weir/operator.h"

namespace weir::taskmanager {

class InMemoryKeyedState final : public KeyedStateStore {
 public:
  // State for the key groups `range` of `max_parallelism`.
  InMemoryKeyedState(state::KeyGroupRange range, int max_parallelism);

  // Sets the key that Get/Put/Remove address. Throws std::logic_error when
  // the key's group is outside the range: a record reached the wrong subtask.
  void SetCurrentKey(std::string_view key);

  std::optional<std::string> Get(std::string_view state_name) override;
  void Put(std::string_view state_name, std::string_view value) override;
  void Remove(std::string_view state_name) override;

  // Every value of `key_group` (in the range), serialized deterministically.
  std::string SnapshotKeyGroup(int key_group) const;
  // Adds the values of a SnapshotKeyGroup to `key_group`; kDataLoss when the
  // bytes are corrupt, kInvalidArgument for a group outside the range.
  absl::Status RestoreKeyGroup(int key_group, absl::string_view bytes);

  const state::KeyGroupRange& range() const { return range_; }
  // Values stored, over all key groups.
  size_t size() const;

 private:
  using Group = absl::flat_hash_map<std::string, std::string>;

  // "<name length><name><key>": names and keys may hold any bytes.
  const std::string& Slot(std::string_view state_name);

  const state::KeyGroupRange range_;
  const int max_parallelism_;
  std::vector<Group> groups_;  // [key group - range_.start]
  Group* current_ = nullptr;
  std::string current_key_;
  std::string slot_;
};

}  // namespace weir::taskmanager
