// Keyed state: values kept per key by operators that follow a key_by.
//
//   auto count = ctx.State<int64_t>("count");
//   int64_t n = count.Get().value_or(0) + 1;
//   count.Set(n);
//
// State is scoped to the key of the record being processed. Values are
// stored through the TaskManager's state backend (bytes, via the value
// type's Serializer); with checkpoints they are snapshotted and restored.
#pragma once

#include <optional>
#include <string>

#include "weir/operator.h"
#include "weir/serializer.h"

namespace weir {

template <typename V, typename S = Serializer<V>>
class ValueState {
 public:
  ValueState(KeyedStateStore* store, std::string name) : store_(store), name_(std::move(name)) {}

  std::optional<V> Get() const {
    std::optional<std::string> bytes = store_->Get(name_);
    if (!bytes.has_value()) return std::nullopt;
    return S::Read(*bytes);
  }

  void Set(const V& value) {
    std::string bytes;
    S::Write(value, bytes);
    store_->Put(name_, bytes);
  }

  void Clear() { store_->Remove(name_); }

 private:
  KeyedStateStore* store_;
  std::string name_;
};

}  // namespace weir
