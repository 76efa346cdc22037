// InMemoryKeyedState: keyed state of one operator instance, kept in hash maps
// on the heap, one per key group of the subtask's range (the `hashmap` state
// backend). A snapshot serializes the state per key group on the task thread
// (fast for small state; for large state use the rocksdb backend).
//
// Thread-safety: not thread-safe; used by its task thread only.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/state/key_groups.h"
#include "taskmanager/state/keyed_state_backend.h"

namespace weir::taskmanager {

class InMemoryKeyedState final : public KeyedStateBackend {
 public:
  // State for the key groups `range` of `max_parallelism`.
  InMemoryKeyedState(state::KeyGroupRange range, int max_parallelism);

  void SetCurrentKey(std::string_view key) override;
  const state::KeyGroupRange& range() const override { return range_; }
  int max_parallelism() const override { return max_parallelism_; }
  std::string_view current_key() const override;

  std::optional<std::string> Get(std::string_view state_name) override;
  void Put(std::string_view state_name, std::string_view value) override;
  void Append(std::string_view state_name, std::string_view bytes) override;
  void Remove(std::string_view state_name) override;
  std::optional<std::string> GetEntry(std::string_view state_name, std::string_view user_key) override;
  void PutEntry(std::string_view state_name, std::string_view user_key, std::string_view value) override;
  void RemoveEntry(std::string_view state_name, std::string_view user_key) override;
  std::vector<std::pair<std::string, std::string>> Entries(std::string_view state_name) override;
  void ClearEntries(std::string_view state_name) override;
  void ForEachEntry(std::string_view state_name,
                    absl::FunctionRef<void(std::string_view, std::string_view, std::string_view)> fn) override;


  // Every value of `key_group` (in the range), serialized deterministically;
  // empty when the group holds nothing.
  std::string SnapshotKeyGroup(int key_group) const;
  // Adds the values of a SnapshotKeyGroup to `key_group`; kDataLoss when the
  // bytes are corrupt, kInvalidArgument for a group outside the range.
  absl::Status RestoreKeyGroup(int key_group, absl::string_view bytes);

  // Values and map entries stored, over all key groups.
  size_t size() const;

 protected:
  absl::StatusOr<std::unique_ptr<KeyedStateSnapshot>> TakeSnapshot(int64_t checkpoint_id) override;
  absl::Status RestoreState(const std::vector<KeyedStateRestore>& parts) override;

 private:
  struct Group {
    absl::flat_hash_map<std::string, std::string> values;
    absl::flat_hash_map<std::string, std::map<std::string, std::string>> maps;
  };

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
