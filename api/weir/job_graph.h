// JobGraph: the logical dataflow a job binary builds — vertices (sources,
// operators, sinks) with their parallelism, and the edges between them with
// their partitioning. The DataStream API (datastream.h) fills it in; the
// JobManager turns it into parallel tasks, chaining adjacent vertices where it
// can, and every TaskManager rebuilds it from the same binary and arguments to
// instantiate its operators. Building must therefore be deterministic: the
// same arguments must give the same graph.
//
// Threading: built on one thread; read-only afterwards.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "weir/operator.h"

namespace weir {

enum class Partitioning {
  kForward,    // subtask i -> subtask i (same parallelism; chained when possible)
  kRebalance,  // round-robin over all downstream subtasks
  kHash,       // by key: the same key always reaches the same subtask
  kBroadcast,  // every record to every downstream subtask
};

const char* PartitioningName(Partitioning p);

// Writes the serialized key of a record (for kHash edges and keyed state).
using KeyFunction = std::function<void(const void* record, std::string& key_out)>;

// A vertex property: "source" on a vertex whose records get their event
// time and watermarks there (a watermark strategy); the records of it and
// of every vertex downstream carry their event time between tasks.
inline constexpr std::string_view kEventTimeProperty = "weir.event-time";

struct VertexSpec {
  enum class Kind { kSource, kOperator, kSink };

  int id = 0;
  std::string name;
  // The operator's id (DataStream::Uid); empty: its name (the second
  // operator of a name gets "<name>#2", and so on).
  std::string uid;
  Kind kind = Kind::kOperator;
  // 0: the job's default parallelism (weir submit -p).
  int parallelism = 0;
  // Built-in connector that the runtime instantiates ("kafka-source",
  // "kafka-sink"), configured by `properties`; empty for user code.
  std::string connector;
  std::map<std::string, std::string> properties;
  // User code: exactly one is set for a vertex without a connector.
  std::function<std::unique_ptr<SourceOperator>()> source_factory;
  std::function<std::unique_ptr<StreamOperator>()> operator_factory;
  // The type of the records this vertex emits (null for sinks).
  const TypeOps* output_type = nullptr;
  // For operators after key_by: the key of an input record (keyed state).
  KeyFunction input_key;
  // A connector source's event-time extractor (a watermark strategy's
  // `timestamp`): the event time of one of its records (of output_type).
  // Empty: the connector's own time (a Kafka record's timestamp).
  std::function<int64_t(const void* record)> timestamp_extractor;
};

struct EdgeSpec {
  int source = 0;
  int target = 0;
  Partitioning partitioning = Partitioning::kForward;
  KeyFunction key;  // set for kHash
  // 0: the source vertex's main output. k > 0: its side output k (e.g. a
  // window's late records, 1), whose records are of `type`.
  int side_output = 0;
  const TypeOps* type = nullptr;  // null: the source vertex's output_type
};

struct JobGraph {
  std::string name;
  std::vector<VertexSpec> vertices;  // vertices[i].id == i
  std::vector<EdgeSpec> edges;
  // Job-level configuration set by the job's code (StreamEnvironment::
  // SetConfig): submitted with the job unless `weir submit -D` sets the key.
  std::map<std::string, std::string> config;
};

inline const char* PartitioningName(Partitioning p) {
  switch (p) {
    case Partitioning::kForward: return "forward";
    case Partitioning::kRebalance: return "rebalance";
    case Partitioning::kHash: return "hash";
    case Partitioning::kBroadcast: return "broadcast";
  }
  return "?";
}

}  // namespace weir
