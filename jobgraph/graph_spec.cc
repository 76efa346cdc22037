#include "jobgraph/graph_spec.h"

#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/crypto/sha256.h"
#include "common/status_macros.h"
#include "common/wire_limits.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "weir/job_graph.h"

namespace weir::jobgraph {
namespace {

v1::JobVertex::Kind ToProto(VertexSpec::Kind kind) {
  switch (kind) {
    case VertexSpec::Kind::kSource: return v1::JobVertex::SOURCE;
    case VertexSpec::Kind::kOperator: return v1::JobVertex::OPERATOR;
    case VertexSpec::Kind::kSink: return v1::JobVertex::SINK;
  }
  return v1::JobVertex::OPERATOR;
}

v1::Partitioning ToProto(Partitioning p) {
  switch (p) {
    case Partitioning::kForward: return v1::FORWARD;
    case Partitioning::kRebalance: return v1::REBALANCE;
    case Partitioning::kHash: return v1::HASH;
    case Partitioning::kBroadcast: return v1::BROADCAST;
  }
  return v1::FORWARD;
}

std::string Deterministic(const v1::JobGraphSpec& spec) {
  std::string out;
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  spec.SerializeToCodedStream(&coded);
  coded.Trim();
  return out;
}

std::string VertexLabel(const v1::JobVertex& v) { return absl::StrCat("vertex ", v.id(), " '", v.name(), "'"); }

}  // namespace

v1::JobGraphSpec ToSpec(const JobGraph& graph) {
  v1::JobGraphSpec spec;
  spec.set_name(graph.name);
  // Operator ids: the explicit ones, then each other vertex's name, made
  // unique in vertex order ("<name>#2", ...). Duplicate explicit ids stay
  // for ValidateGraph to refuse by name.
  absl::flat_hash_set<std::string> taken;
  for (const VertexSpec& v : graph.vertices) {
    if (!v.uid.empty()) taken.insert(v.uid);
  }
  std::vector<std::string> uids;
  for (const VertexSpec& v : graph.vertices) {
    if (!v.uid.empty()) {
      uids.push_back(v.uid);
      continue;
    }
    std::string uid = v.name;
    for (int k = 2; uid.empty() || taken.contains(uid); ++k) uid = absl::StrCat(v.name, "#", k);
    taken.insert(uid);
    uids.push_back(std::move(uid));
  }
  for (const VertexSpec& v : graph.vertices) {
    v1::JobVertex* out = spec.add_vertices();
    out->set_id(v.id);
    out->set_name(v.name);
    out->set_uid(uids[static_cast<size_t>(spec.vertices_size() - 1)]);
    out->set_kind(ToProto(v.kind));
    out->set_parallelism(v.parallelism);
    out->set_connector(v.connector);
    for (const auto& [k, val] : v.properties) (*out->mutable_properties())[k] = val;
    out->set_keyed(static_cast<bool>(v.input_key));
  }
  for (const EdgeSpec& e : graph.edges) {
    v1::JobEdge* out = spec.add_edges();
    out->set_source(e.source);
    out->set_target(e.target);
    out->set_partitioning(ToProto(e.partitioning));
    out->set_side_output(e.side_output);
  }
  return spec;
}

namespace {

// Counts and sizes, checked before anything loops over or copies the graph.
absl::Status CheckGraphLimits(const v1::JobGraphSpec& spec) {
  RETURN_IF_ERROR(limits::CheckLength("the job name", spec.name(), limits::kMaxNameLength));
  RETURN_IF_ERROR(limits::CheckCount("vertices in the job graph", spec.vertices_size(), limits::kMaxVertices));
  RETURN_IF_ERROR(limits::CheckCount("edges in the job graph", spec.edges_size(), limits::kMaxEdges));
  for (const v1::JobVertex& v : spec.vertices()) {
    const std::string label = absl::StrCat("vertex ", v.id());
    RETURN_IF_ERROR(limits::CheckLength(absl::StrCat(label, ": the name"), v.name(), limits::kMaxNameLength));
    RETURN_IF_ERROR(limits::CheckLength(absl::StrCat(label, ": the id"), v.uid(), limits::kMaxNameLength));
    RETURN_IF_ERROR(
        limits::CheckLength(absl::StrCat(label, ": the connector"), v.connector(), limits::kMaxNameLength));
    RETURN_IF_ERROR(limits::CheckCount(absl::StrCat("properties on ", label), v.properties_size(),
                                       limits::kMaxPropertiesPerVertex));
    for (const auto& [key, value] : v.properties()) {
      RETURN_IF_ERROR(limits::CheckLength(absl::StrCat(label, ": a property name"), key,
                                          limits::kMaxPropertyKeyLength));
      RETURN_IF_ERROR(limits::CheckLength(absl::StrCat(label, ": property '", key, "'"), value,
                                          limits::kMaxPropertyValueLength));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateGraph(const v1::JobGraphSpec& spec, int max_parallelism) {
  RETURN_IF_ERROR(CheckGraphLimits(spec));
  const int n = spec.vertices_size();
  if (n == 0) return absl::InvalidArgumentError("the job graph is empty: add a source and a sink");
  std::vector<int> in_degree(n, 0), out_degree(n, 0);
  std::vector<std::vector<int>> downstream(n);
  absl::flat_hash_map<std::string, int> by_uid;
  for (int i = 0; i < n; ++i) {
    const v1::JobVertex& v = spec.vertices(i);
    if (v.id() != i) return absl::InvalidArgumentError(absl::StrCat("vertex ids must be 0..", n - 1, " in order"));
    if (v.uid().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(VertexLabel(v), " has no operator id: rebuild the job binary "
                                                     "against this Weir's headers"));
    }
    if (auto [it, inserted] = by_uid.emplace(v.uid(), i); !inserted) {
      return absl::InvalidArgumentError(absl::StrCat(
          VertexLabel(spec.vertices(it->second)), " and ", VertexLabel(v), " both have the operator id '", v.uid(),
          "'; ids (DataStream::Uid) must be unique within a job: give one of them another"));
    }
    if (v.parallelism() < 0 || v.parallelism() > max_parallelism) {
      return absl::InvalidArgumentError(absl::StrCat(VertexLabel(v), " has parallelism ", v.parallelism(),
                                                     "; expected 1..", max_parallelism));
    }
  }
  for (const v1::JobEdge& e : spec.edges()) {
    if (e.source() < 0 || e.source() >= n || e.target() < 0 || e.target() >= n) {
      return absl::InvalidArgumentError(
          absl::StrCat("edge ", e.source(), " -> ", e.target(), " refers to a vertex that does not exist"));
    }
    if (e.side_output() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("edge ", e.source(), " -> ", e.target(), " has side output ", e.side_output(), "; expected 0 or more"));
    }
    ++out_degree[e.source()];
    ++in_degree[e.target()];
    downstream[e.source()].push_back(e.target());
  }
  int sources = 0, sinks = 0;
  for (int i = 0; i < n; ++i) {
    const v1::JobVertex& v = spec.vertices(i);
    switch (v.kind()) {
      case v1::JobVertex::SOURCE:
        ++sources;
        if (in_degree[i] != 0) return absl::InvalidArgumentError(absl::StrCat(VertexLabel(v), " is a source but has an input"));
        break;
      case v1::JobVertex::SINK:
        ++sinks;
        if (out_degree[i] != 0) {
          return absl::InvalidArgumentError(absl::StrCat(VertexLabel(v), " is a sink but has a downstream"));
        }
        [[fallthrough]];
      default:
        if (in_degree[i] != 1) {
          return absl::InvalidArgumentError(
              absl::StrCat(VertexLabel(v), " has ", in_degree[i], " inputs; expected exactly one"));
        }
    }
    if (v.kind() != v1::JobVertex::SINK && out_degree[i] == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          VertexLabel(v), " has no downstream and is not a sink: every stream must end in a sink"));
    }
  }
  if (sources == 0) return absl::InvalidArgumentError("the job graph has no source");
  if (sinks == 0) return absl::InvalidArgumentError("the job graph has no sink: add one (e.g. kafka::Sink)");
  // Cycle check: Kahn's algorithm must visit every vertex.
  std::vector<int> pending = in_degree, ready;
  for (int i = 0; i < n; ++i) {
    if (pending[i] == 0) ready.push_back(i);
  }
  int visited = 0;
  while (!ready.empty()) {
    int v = ready.back();
    ready.pop_back();
    ++visited;
    for (int d : downstream[v]) {
      if (--pending[d] == 0) ready.push_back(d);
    }
  }
  if (visited != n) return absl::InvalidArgumentError("the job graph has a cycle; dataflows must be acyclic");
  // Event time: a vertex that needs it (windows) has a watermark strategy
  // upstream, or its records would have no time and it would never fire.
  const std::string event_time_key(kEventTimeProperty);
  std::vector<std::vector<int>> upstream(n);
  for (const v1::JobEdge& e : spec.edges()) upstream[e.target()].push_back(e.source());
  for (int i = 0; i < n; ++i) {
    auto marker = spec.vertices(i).properties().find(event_time_key);
    if (marker == spec.vertices(i).properties().end() || marker->second != "required") continue;
    const bool found = AnyUpstream(upstream, i, [&](int u) {
      auto it = spec.vertices(u).properties().find(event_time_key);
      return it != spec.vertices(u).properties().end() && it->second == "source";
    });
    if (!found) {
      return absl::InvalidArgumentError(absl::StrCat(
          VertexLabel(spec.vertices(i)),
          " uses event time, but no vertex upstream of it has a watermark strategy: give the source one "
          "(kafka::SourceOptions::watermarks) or call AssignTimestampsAndWatermarks before it"));
    }
  }
  return absl::OkStatus();
}

bool AnyUpstream(const std::vector<std::vector<int>>& upstream, int from, absl::FunctionRef<bool(int)> pred) {
  std::vector<int> todo = upstream[static_cast<size_t>(from)];
  std::vector<bool> seen(upstream.size(), false);
  while (!todo.empty()) {
    const int u = todo.back();
    todo.pop_back();
    if (seen[static_cast<size_t>(u)]) continue;
    seen[static_cast<size_t>(u)] = true;
    if (pred(u)) return true;
    todo.insert(todo.end(), upstream[static_cast<size_t>(u)].begin(), upstream[static_cast<size_t>(u)].end());
  }
  return false;
}

bool SameGraph(const v1::JobGraphSpec& a, const v1::JobGraphSpec& b) { return Deterministic(a) == Deterministic(b); }

std::string GraphFingerprint(const v1::JobGraphSpec& spec) {
  return crypto::Sha256Hex(Deterministic(spec));
}

}  // namespace weir::jobgraph
