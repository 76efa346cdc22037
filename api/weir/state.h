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
#include <utility>
#include <vector>

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

// Typed view of an operator list state (operator.h): values of T written
// with S. Get it in InitializeState, e.g. for a source's position:
//
//   void InitializeState(OperatorContext& ctx) override {
//     position_ = OperatorList<int64_t>(ctx.operator_state()->GetListState("position"));
//     for (int64_t p : position_.Get()) next_ = p;
//   }
//   void SnapshotState(const CheckpointInfo&) override { position_.Update({next_}); }
template <typename T, typename S = Serializer<T>>
class OperatorList {
 public:
  OperatorList() = default;
  explicit OperatorList(OperatorListState* state) : state_(state) {}

  std::vector<T> Get() const {
    std::vector<T> out;
    for (const std::string& bytes : state_->Get()) out.push_back(S::Read(bytes));
    return out;
  }

  void Update(const std::vector<T>& values) {
    std::vector<std::string> entries;
    entries.reserve(values.size());
    for (const T& value : values) {
      std::string bytes;
      S::Write(value, bytes);
      entries.push_back(std::move(bytes));
    }
    state_->Update(std::move(entries));
  }

  void Add(const T& value) {
    std::string bytes;
    S::Write(value, bytes);
    state_->Add(std::move(bytes));
  }

  void Clear() { state_->Clear(); }

 private:
  OperatorListState* state_ = nullptr;
};

}  // namespace weir
