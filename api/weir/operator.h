// The runtime's view of an operator: the type-erased interfaces that the
// typed DataStream API (datastream.h) implements inside a job binary and the
// TaskManager drives. Job authors do not implement these directly.
//
// Records travel as `void*` pointing at a value of the edge's C++ type; the
// typed API guarantees that both ends agree on that type. A receiver may move
// from the value.
//
// Threading: one task thread calls every method of an operator instance.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace weir {

// Where an operator sends its output records.
class RecordOutput {
 public:
  virtual ~RecordOutput() = default;
  virtual void Emit(void* record) = 0;
};

// Keyed state of one operator instance, for the key of the record being
// processed. Values are bytes; ValueState<T> (state.h) adds the types.
class KeyedStateStore {
 public:
  virtual ~KeyedStateStore() = default;
  virtual std::optional<std::string> Get(std::string_view state_name) = 0;
  virtual void Put(std::string_view state_name, std::string_view value) = 0;
  virtual void Remove(std::string_view state_name) = 0;
};

// What the runtime tells an operator instance about itself.
class OperatorContext {
 public:
  virtual ~OperatorContext() = default;
  virtual const std::string& operator_name() const = 0;
  virtual int subtask_index() const = 0;
  virtual int parallelism() const = 0;
  // Keyed state; nullptr unless the operator follows a key_by.
  virtual KeyedStateStore* keyed_state() = 0;
  // Sets the key whose state keyed_state() reads and writes.
  virtual void SetCurrentKey(std::string_view key_bytes) = 0;
  // A job-level configuration value (-Dkey=value at submission), or fallback.
  virtual std::string JobConfig(std::string_view key, std::string_view fallback) const = 0;
};

// An operator with one input.
class StreamOperator {
 public:
  virtual ~StreamOperator() = default;
  virtual void Open(OperatorContext& context, RecordOutput* output) = 0;
  virtual void Process(void* record) = 0;
  // Every input has ended (bounded jobs): emit what is pending and flush.
  virtual void EndInput() {}
  virtual void Close() {}
};

enum class SourceStatus {
  kMoreAvailable,     // call PollNext again at once
  kNothingAvailable,  // nothing now; the runtime may wait a little
  kEndOfInput,        // bounded source finished
};

// A source: produces records when polled by its task thread.
class SourceOperator {
 public:
  virtual ~SourceOperator() = default;
  virtual void Open(OperatorContext& context, RecordOutput* output) = 0;
  virtual SourceStatus PollNext() = 0;
  virtual void Close() {}
};

// How the runtime handles a record type without knowing it.
struct TypeOps {
  std::string name;
  void (*serialize)(const void* record, std::string& out);
  // Deserializes one record and emits it to `output`.
  void (*deserialize_to)(std::string_view bytes, RecordOutput& output);
};

}  // namespace weir
