#include "jobgraph/graph_spec.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace weir::jobgraph {
namespace {

// source(0) -> map(1) -> sink(2), forward edges.
v1::JobGraphSpec Linear() {
  v1::JobGraphSpec spec;
  spec.set_name("linear");
  const v1::JobVertex::Kind kinds[] = {v1::JobVertex::SOURCE, v1::JobVertex::OPERATOR, v1::JobVertex::SINK};
  for (int i = 0; i < 3; ++i) {
    v1::JobVertex* v = spec.add_vertices();
    v->set_id(i);
    v->set_name(absl::StrCat("v", i));
    v->set_uid(absl::StrCat("v", i));
    v->set_kind(kinds[i]);
  }
  for (int i = 0; i < 2; ++i) {
    v1::JobEdge* e = spec.add_edges();
    e->set_source(i);
    e->set_target(i + 1);
  }
  return spec;
}

void ExpectInvalid(const v1::JobGraphSpec& spec, const std::string& needle) {
  absl::Status status = ValidateGraph(spec, 128);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), needle)) << status.message();
}

TEST(ValidateGraphTest, AcceptsALinearPipeline) { EXPECT_TRUE(ValidateGraph(Linear(), 128).ok()); }

TEST(ValidateGraphTest, RejectsCountsAndSizesBeyondTheWireLimits) {
  v1::JobGraphSpec many = Linear();
  for (int i = 3; i < 2000; ++i) {
    many.add_vertices()->set_id(i);
    many.mutable_vertices(i)->set_uid(absl::StrCat("v", i));
  }
  ExpectInvalid(many, "vertices");

  v1::JobGraphSpec edges = Linear();
  for (int i = 0; i < 5000; ++i) *edges.add_edges() = edges.edges(0);
  ExpectInvalid(edges, "edges");

  v1::JobGraphSpec big_value = Linear();
  (*big_value.mutable_vertices(0)->mutable_properties())["brokers"] = std::string(100 * 1024, 'b');
  ExpectInvalid(big_value, "property 'brokers'");

  v1::JobGraphSpec properties = Linear();
  for (int i = 0; i < 300; ++i) (*properties.mutable_vertices(2)->mutable_properties())[absl::StrCat("k", i)] = "v";
  ExpectInvalid(properties, "properties on vertex 2");

  v1::JobGraphSpec name = Linear();
  name.set_name(std::string(5000, 'n'));
  ExpectInvalid(name, "the job name");
}

TEST(ValidateGraphTest, RejectsACycle) {
  // source -> a -> b -> sink, plus b -> a: every vertex keeps its in/out
  // degree rules except a, which gets two inputs; make a's second input the
  // only one so that the cycle is what is left.
  v1::JobGraphSpec spec;
  const v1::JobVertex::Kind kinds[] = {v1::JobVertex::SOURCE, v1::JobVertex::SINK, v1::JobVertex::OPERATOR,
                                       v1::JobVertex::OPERATOR};
  for (int i = 0; i < 4; ++i) {
    v1::JobVertex* v = spec.add_vertices();
    v->set_id(i);
    v->set_uid(absl::StrCat("u", i));
    v->set_kind(kinds[i]);
  }
  auto edge = [&](int a, int b) {
    v1::JobEdge* e = spec.add_edges();
    e->set_source(a);
    e->set_target(b);
  };
  edge(0, 1);  // source -> sink
  edge(2, 3);  // a -> b
  edge(3, 2);  // b -> a: a cycle with no way in from a source
  ExpectInvalid(spec, "cycle");
}

TEST(ValidateGraphTest, RejectsAMissingSink) {
  v1::JobGraphSpec spec = Linear();
  spec.mutable_vertices(2)->set_kind(v1::JobVertex::OPERATOR);
  ExpectInvalid(spec, "has no downstream and is not a sink");
}

TEST(ValidateGraphTest, EventTimeNeedsAWatermarkStrategyUpstream) {
  v1::JobGraphSpec spec = Linear();
  (*spec.mutable_vertices(2)->mutable_properties())["weir.event-time"] = "required";
  ExpectInvalid(spec, "vertex 2 'v2' uses event time, but no vertex upstream of it has a watermark strategy");
  (*spec.mutable_vertices(0)->mutable_properties())["weir.event-time"] = "source";
  EXPECT_TRUE(ValidateGraph(spec, 128).ok());
  spec.mutable_edges(1)->set_side_output(-1);
  ExpectInvalid(spec, "side output -1");
}

TEST(ValidateGraphTest, RejectsStructuralMistakes) {
  v1::JobGraphSpec empty;
  ExpectInvalid(empty, "empty");

  v1::JobGraphSpec dangling = Linear();
  dangling.mutable_edges(1)->set_target(7);
  ExpectInvalid(dangling, "does not exist");

  v1::JobGraphSpec two_inputs = Linear();
  v1::JobEdge* e = two_inputs.add_edges();
  e->set_source(0);
  e->set_target(2);
  ExpectInvalid(two_inputs, "expected exactly one");

  v1::JobGraphSpec bad_parallelism = Linear();
  bad_parallelism.mutable_vertices(1)->set_parallelism(500);
  ExpectInvalid(bad_parallelism, "parallelism 500");

  v1::JobGraphSpec bad_ids = Linear();
  bad_ids.mutable_vertices(1)->set_id(5);
  ExpectInvalid(bad_ids, "vertex ids");

  v1::JobGraphSpec no_source = Linear();
  no_source.mutable_vertices(0)->set_kind(v1::JobVertex::OPERATOR);
  ExpectInvalid(no_source, "inputs; expected exactly one");
}

// Operator ids: refused when missing or given twice, naming both operators;
// ToSpec gives a vertex without one its name, made unique in vertex order.
TEST(ValidateGraphTest, OperatorIdsAreThereAndUnique) {
  v1::JobGraphSpec missing = Linear();
  missing.mutable_vertices(1)->clear_uid();
  ExpectInvalid(missing, "vertex 1 'v1' has no operator id");
  v1::JobGraphSpec twice = Linear();
  twice.mutable_vertices(2)->set_uid("v0");
  ExpectInvalid(twice, "vertex 0 'v0' and vertex 2 'v2' both have the operator id 'v0'");

  JobGraph graph;
  for (const char* name : {"Map", "Map", "Sink", "Map"}) {
    VertexSpec v;
    v.id = static_cast<int>(graph.vertices.size());
    v.name = name;
    graph.vertices.push_back(std::move(v));
  }
  graph.vertices[1].uid = "Map#3";  // explicit: the defaults step around it
  v1::JobGraphSpec spec = ToSpec(graph);
  ASSERT_EQ(spec.vertices_size(), 4);
  EXPECT_EQ(spec.vertices(0).uid(), "Map");
  EXPECT_EQ(spec.vertices(1).uid(), "Map#3");
  EXPECT_EQ(spec.vertices(2).uid(), "Sink");
  EXPECT_EQ(spec.vertices(3).uid(), "Map#2");
}

// Two equal graphs whose property maps were filled in different orders.
std::pair<v1::JobGraphSpec, v1::JobGraphSpec> EqualGraphsFilledInOtherOrders() {
  v1::JobGraphSpec a = Linear(), b = Linear();
  (*a.mutable_vertices(0)->mutable_properties())["x"] = "1";
  (*a.mutable_vertices(0)->mutable_properties())["y"] = "2";
  (*b.mutable_vertices(0)->mutable_properties())["y"] = "2";
  (*b.mutable_vertices(0)->mutable_properties())["x"] = "1";
  return {a, b};
}

TEST(SameGraphTest, ComparesStructureAndProperties) {
  auto [a, b] = EqualGraphsFilledInOtherOrders();
  EXPECT_TRUE(SameGraph(a, b));
  b.mutable_vertices(1)->set_parallelism(3);
  EXPECT_FALSE(SameGraph(a, b));
}

// The fingerprint deployments carry instead of the graph: equal exactly
// when SameGraph holds, whatever order the maps were filled in.
TEST(SameGraphTest, FingerprintsFollowSameGraph) {
  auto [a, b] = EqualGraphsFilledInOtherOrders();
  EXPECT_EQ(GraphFingerprint(a), GraphFingerprint(b));
  EXPECT_EQ(GraphFingerprint(a).size(), 64u);
  b.mutable_vertices(1)->set_name("renamed");
  EXPECT_NE(GraphFingerprint(a), GraphFingerprint(b));
}

}  // namespace
}  // namespace weir::jobgraph
