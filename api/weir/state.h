// Keyed state: values kept per key by operators that follow a key_by.
//
//   auto count = ctx.State<int64_t>("count");          // ValueState
//   int64_t n = count.Get().value_or(0) + 1;
//   count.Set(n);
//   auto seen = ctx.ListState<std::string>("seen");    // ListState
//   seen.Add(record.value);
//   auto last = ctx.MapState<std::string, int64_t>("last");  // MapState
//   last.Put(record.topic, record.offset);
//   auto sum = ctx.ReducingState<int64_t>("sum", [](int64_t a, int64_t b) { return a + b; });
//   sum.Add(record.amount);
//
// State is scoped to the key of the record being processed. Values are
// stored through the TaskManager's state backend (bytes, via the value
// type's Serializer; `state.backend.type`: RocksDB by default, or the heap);
// with checkpoints they are snapshotted and restored. Each name holds one
// kind of state.
#pragma once

#include <functional>
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

// A list of values per key. Add does not read the list (cheap with RocksDB).
template <typename V, typename S = Serializer<V>>
class ListState {
 public:
  ListState(KeyedStateStore* store, std::string name) : store_(store), name_(std::move(name)) {}

  // The values in the order they were added; empty when none.
  std::vector<V> Get() const {
    std::vector<V> out;
    std::optional<std::string> bytes = store_->Get(name_);
    if (!bytes.has_value()) return out;
    const std::string_view in(*bytes);
    size_t pos = 0;
    while (pos < in.size()) out.push_back(S::Read(internal::ReadField(in, &pos)));
    return out;
  }

  void Add(const V& value) {
    std::string framed;
    Frame(value, framed);
    store_->Append(name_, framed);
  }

  // Replaces the list.
  void Update(const std::vector<V>& values) {
    if (values.empty()) return Clear();
    std::string all;
    for (const V& value : values) Frame(value, all);
    store_->Put(name_, all);
  }

  void Clear() { store_->Remove(name_); }

 private:
  static void Frame(const V& value, std::string& out) {
    std::string bytes;
    S::Write(value, bytes);
    internal::WriteVarint(bytes.size(), out);
    out.append(bytes);
  }

  KeyedStateStore* store_;
  std::string name_;
};

// A map from user keys to values, per key. Entries are stored one by one
// (with RocksDB a Put touches one entry, not the whole map).
template <typename UK, typename UV, typename KS = Serializer<UK>, typename VS = Serializer<UV>>
class MapState {
 public:
  MapState(KeyedStateStore* store, std::string name) : store_(store), name_(std::move(name)) {}

  std::optional<UV> Get(const UK& user_key) const {
    std::optional<std::string> bytes = store_->GetEntry(name_, KeyBytes(user_key));
    if (!bytes.has_value()) return std::nullopt;
    return VS::Read(*bytes);
  }
  bool Contains(const UK& user_key) const { return store_->GetEntry(name_, KeyBytes(user_key)).has_value(); }

  void Put(const UK& user_key, const UV& value) {
    std::string bytes;
    VS::Write(value, bytes);
    store_->PutEntry(name_, KeyBytes(user_key), bytes);
  }

  void Remove(const UK& user_key) { store_->RemoveEntry(name_, KeyBytes(user_key)); }

  // Every entry, ordered by the user key's serialized bytes.
  std::vector<std::pair<UK, UV>> Entries() const {
    std::vector<std::pair<UK, UV>> out;
    for (auto& [k, v] : store_->Entries(name_)) out.emplace_back(KS::Read(k), VS::Read(v));
    return out;
  }

  void Clear() { store_->ClearEntries(name_); }

 private:
  static std::string KeyBytes(const UK& user_key) {
    std::string bytes;
    KS::Write(user_key, bytes);
    return bytes;
  }

  KeyedStateStore* store_;
  std::string name_;
};

// One value per key that folds in every added value with `reduce`.
template <typename V, typename S = Serializer<V>>
class ReducingState {
 public:
  using ReduceFunction = std::function<V(const V& accumulated, const V& added)>;

  ReducingState(KeyedStateStore* store, std::string name, ReduceFunction reduce)
      : value_(store, std::move(name)), reduce_(std::move(reduce)) {}

  std::optional<V> Get() const { return value_.Get(); }
  void Add(const V& value) {
    std::optional<V> current = value_.Get();
    value_.Set(current.has_value() ? reduce_(*current, value) : value);
  }
  void Clear() { value_.Clear(); }

 private:
  ValueState<V, S> value_;
  ReduceFunction reduce_;
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
