#include "jobmanager/execution_graph.h"

#include "gtest/gtest.h"

namespace weir::jobmanager {
namespace {

// Vertices with the given parallelism (0 = default) in a line, joined by
// edges of the given partitionings.
v1::JobGraphSpec Line(const std::vector<int>& parallelism, const std::vector<v1::Partitioning>& edges) {
  v1::JobGraphSpec spec;
  for (size_t i = 0; i < parallelism.size(); ++i) {
    v1::JobVertex* v = spec.add_vertices();
    v->set_id(static_cast<int>(i));
    v->set_name("v" + std::to_string(i));
    v->set_parallelism(parallelism[i]);
    v->set_kind(i == 0 ? v1::JobVertex::SOURCE
                       : (i + 1 == parallelism.size() ? v1::JobVertex::SINK : v1::JobVertex::OPERATOR));
  }
  for (size_t i = 0; i < edges.size(); ++i) {
    v1::JobEdge* e = spec.add_edges();
    e->set_source(static_cast<int>(i));
    e->set_target(static_cast<int>(i + 1));
    e->set_partitioning(edges[i]);
  }
  return spec;
}

TEST(ExecutionGraphTest, ChainsForwardEdgesOfEqualParallelism) {
  auto g = ExecutionGraph::Build(Line({0, 0, 0}, {v1::FORWARD, v1::FORWARD}), 4);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g->chains.size(), 1u);
  EXPECT_EQ(g->chains[0].vertices, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(g->chains[0].name, "v0 -> v1 -> v2");
  EXPECT_EQ(g->chains[0].parallelism, 4);
  EXPECT_EQ(g->slots_needed, 4);
}

TEST(ExecutionGraphTest, BreaksChainsAtHashEdgesAndParallelismChanges) {
  auto g = ExecutionGraph::Build(Line({2, 2, 3, 3}, {v1::HASH, v1::FORWARD, v1::FORWARD}), 1);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g->chains.size(), 3u);
  EXPECT_EQ(g->chains[0].vertices, (std::vector<int>{0}));
  EXPECT_EQ(g->chains[1].vertices, (std::vector<int>{1}));
  EXPECT_EQ(g->chains[2].vertices, (std::vector<int>{2, 3}));
  EXPECT_EQ(g->chains[1].input_edge, 0);
  EXPECT_EQ(g->chains[0].output_edges, (std::vector<int>{0}));
  EXPECT_EQ(g->slots_needed, 3);
  // Forward between different parallelism becomes rebalance.
  EXPECT_EQ(g->EffectivePartitioning(1), v1::REBALANCE);
  EXPECT_EQ(g->EffectivePartitioning(0), v1::HASH);
  EXPECT_EQ(g->EffectivePartitioning(2), v1::FORWARD);
}

TEST(ExecutionGraphTest, ASideOutputIsNeverChained) {
  // v1's only downstream is its side output: a forward edge of equal
  // parallelism, which would chain were it the main output.
  v1::JobGraphSpec spec = Line({2, 2, 2}, {v1::HASH, v1::FORWARD});
  spec.mutable_edges(1)->set_side_output(1);
  auto g = ExecutionGraph::Build(spec, 1);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g->chains.size(), 3u);
  EXPECT_EQ(g->chains[1].vertices, (std::vector<int>{1}));
  EXPECT_EQ(g->chains[1].output_edges, (std::vector<int>{1}));
  EXPECT_EQ(g->chains[2].input_edge, 1);
}

TEST(ExecutionGraphTest, IdsAreStable) {
  EXPECT_EQ(ExecutionGraph::TaskId("j", 1, 2, 3), "j/1/c2s3");
  EXPECT_EQ(ExecutionGraph::PartitionId("j", 1, 2, 3, 4), "j/1/c2s3/e4");
}

}  // namespace
}  // namespace weir::jobmanager
