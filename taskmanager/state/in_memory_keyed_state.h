// InMemoryKeyedState: keyed state of one operator instance, kept in a hash
// map on the heap. The RocksDB backend with snapshots replaces it when
// checkpoints arrive; both implement weir::KeyedStateStore.
//
// Thread-safety: not thread-safe; used by its task thread only.
#pragma once

#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "weir/operator.h"

namespace weir::taskmanager {

class InMemoryKeyedState final : public KeyedStateStore {
 public:
  void SetCurrentKey(std::string_view key) { current_key_.assign(key.data(), key.size()); }

  std::optional<std::string> Get(std::string_view state_name) override;
  void Put(std::string_view state_name, std::string_view value) override;
  void Remove(std::string_view state_name) override;

  size_t size() const { return values_.size(); }

 private:
  // "<name length><name><key>": names and keys may hold any bytes.
  const std::string& Slot(std::string_view state_name);

  std::string current_key_;
  std::string slot_;
  absl::flat_hash_map<std::string, std::string> values_;
};

}  // namespace weir::taskmanager
