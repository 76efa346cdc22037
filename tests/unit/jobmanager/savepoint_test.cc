// Savepoint paths a client sends are used only inside state.savepoints.dir;
// weir submit -s reads a savepoint, a retained checkpoint or a job's
// checkpoint directory.
#include "jobmanager/checkpoint/savepoint.h"
#include "jobmanager/checkpoint/state_assignment.h"

#include <filesystem>
#include <fstream>
#include <optional>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/process.h"

namespace weir::jobmanager::checkpoint {
namespace {

TEST(PathInsideTest, TakesOnlyPathsInsideTheRoot) {
  EXPECT_EQ(*PathInside("/srv/sp", "", "k"), "/srv/sp");
  EXPECT_EQ(*PathInside("/srv/sp/", "", "k"), "/srv/sp");
  EXPECT_EQ(*PathInside("/srv/sp", "daily", "k"), "/srv/sp/daily");
  EXPECT_EQ(*PathInside("/srv/sp", "/srv/sp/a/../b", "k"), "/srv/sp/b");
  for (const char* outside : {"/etc", "..", "../sp2", "daily/../../x", "/srv/spx", "/srv"}) {
    absl::StatusOr<std::string> path = PathInside("/srv/sp", outside, "state.savepoints.dir");
    EXPECT_EQ(path.status().code(), absl::StatusCode::kInvalidArgument) << outside;
  }
  EXPECT_EQ(PathInside("", "x", "state.savepoints.dir").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PathInsideTest, ASymbolicLinkInsideTheRootDoesNotLeadOut) {
  const std::string root = weir::testing::MakeTempDir("path-inside-test");
  const std::string outside = weir::testing::MakeTempDir("path-inside-outside");
  std::filesystem::create_directories(root + "/sp/real");
  std::filesystem::create_directory_symlink(outside, root + "/sp/escape");
  std::filesystem::create_directory_symlink(root + "/sp/real", root + "/sp/alias");
  absl::StatusOr<std::string> escaped = PathInside(root + "/sp", "escape/savepoint-1", "state.savepoints.dir");
  EXPECT_EQ(escaped.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(escaped.status().message()), ::testing::HasSubstr("through a symbolic link"));
  // A link that stays inside is fine.
  EXPECT_EQ(*PathInside(root + "/sp", "alias/x", "k"), root + "/sp/alias/x");
  std::filesystem::remove_all(root);
  std::filesystem::remove_all(outside);
}

class RestorePointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = weir::testing::MakeTempDir("restore-point-test");
    job_dir_ = root_ + "/checkpoints/job-1";
    absl::StatusOr<CheckpointStorage> storage = CheckpointStorage::Open(job_dir_);
    ASSERT_TRUE(storage.ok()) << storage.status();
    storage_.emplace(*std::move(storage));
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  // A complete checkpoint without tasks (nothing to verify but _metadata).
  void Complete(int64_t id) {
    ASSERT_TRUE(storage_->CreateCheckpointDir(id).ok());
    v1::CheckpointMetadata metadata;
    metadata.set_checkpoint_id(id);
    metadata.set_job_id("job-1");
    ASSERT_TRUE(storage_->WriteMetadata(metadata).ok());
  }

  std::string root_, job_dir_;
  std::optional<CheckpointStorage> storage_;
};

TEST_F(RestorePointTest, AJobDirectoryMeansItsNewestCompleteCheckpoint) {
  Complete(1);
  Complete(2);
  ASSERT_TRUE(storage_->CreateCheckpointDir(3).ok());  // in progress when the job ended
  absl::StatusOr<RestorePoint> point = ReadRestorePoint(job_dir_);
  ASSERT_TRUE(point.ok()) << point.status();
  EXPECT_FALSE(point->is_savepoint);
  EXPECT_EQ(point->metadata.checkpoint_id(), 2);
  EXPECT_EQ(point->checkpoint_dir, job_dir_ + "/chk-2");
  ASSERT_EQ(point->skipped.size(), 1u);
  EXPECT_THAT(point->skipped[0], ::testing::HasSubstr("checkpoint 3"));
}

TEST_F(RestorePointTest, AChkDirectoryMeansThatCheckpoint) {
  Complete(1);
  Complete(2);
  for (const std::string& path : {job_dir_ + "/chk-1", job_dir_ + "/chk-1/"}) {
    absl::StatusOr<RestorePoint> point = ReadRestorePoint(path);
    ASSERT_TRUE(point.ok()) << point.status();
    EXPECT_EQ(point->metadata.checkpoint_id(), 1);
    EXPECT_EQ(point->checkpoint_dir, job_dir_ + "/chk-1");
  }
}

TEST_F(RestorePointTest, WhatIsNoCompleteCheckpointIsRefusedWithAReason) {
  Complete(1);
  ASSERT_TRUE(storage_->CreateCheckpointDir(2).ok());
  absl::StatusOr<RestorePoint> incomplete = ReadRestorePoint(job_dir_ + "/chk-2");
  EXPECT_EQ(incomplete.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(incomplete.status().message(), ::testing::HasSubstr("never completed"));
  absl::StatusOr<RestorePoint> missing = ReadRestorePoint(root_ + "/nothing-here");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(root_ + "/nothing-here"));  // reading creates nothing
  // A directory with neither a savepoint marker nor checkpoints in it.
  absl::StatusOr<RestorePoint> other = ReadRestorePoint(root_ + "/checkpoints");
  EXPECT_EQ(other.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(other.status().message(), ::testing::HasSubstr("neither a savepoint"));
  // A job directory whose only checkpoint is corrupt.
  std::filesystem::remove_all(job_dir_ + "/chk-2");
  {
    std::ofstream damage(job_dir_ + "/chk-1/_metadata", std::ios::binary | std::ios::trunc);
    damage << "WEIRCKPT";
  }
  absl::StatusOr<RestorePoint> corrupt = ReadRestorePoint(job_dir_);
  EXPECT_EQ(corrupt.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(corrupt.status().message(), ::testing::HasSubstr("checkpoint 1"));
}

// keyed_count's shape: a source [0], then a keyed operator chained with a
// sink [1,2], each at parallelism 2.
v1::JobGraphSpec KeyedCountGraph() {
  v1::JobGraphSpec graph;
  v1::JobVertex* source = graph.add_vertices();
  source->set_id(0);
  source->set_uid("source");
  source->set_kind(v1::JobVertex::SOURCE);
  source->set_connector("kafka-source");
  v1::JobVertex* count = graph.add_vertices();
  count->set_id(1);
  count->set_uid("count");
  count->set_kind(v1::JobVertex::OPERATOR);
  count->set_keyed(true);
  v1::JobVertex* sink = graph.add_vertices();
  sink->set_id(2);
  sink->set_uid("sink");
  sink->set_kind(v1::JobVertex::SINK);
  sink->set_connector("kafka-sink");
  return graph;
}

// A checkpoint of KeyedCountGraph at parallelism 2; `finished`: subtask 1
// of the source had finished.
v1::CheckpointMetadata MetadataOf(const v1::JobGraphSpec& graph, bool finished = false) {
  v1::CheckpointMetadata m;
  for (const std::vector<int>& chain : {std::vector<int>{0}, std::vector<int>{1, 2}}) {
    for (int s = 0; s < 2; ++s) {
      v1::TaskStateHandle* h = m.add_tasks();
      for (int v : chain) {
        h->add_vertex_ids(v);
        h->add_operator_uids(graph.vertices(v).uid());
      }
      h->set_subtask_index(s);
      h->set_parallelism(2);
      h->set_finished(finished && chain.front() == 0 && s == 1);
    }
  }
  for (const v1::JobVertex& v : graph.vertices()) (*m.mutable_operator_signatures())[v.uid()] = VertexSignature(v);
  return m;
}

TEST(FitStateToGraphTest, StateGoesOnlyToTheSameKindsOfOperators) {
  const v1::JobGraphSpec graph = KeyedCountGraph();
  const v1::CheckpointMetadata m = MetadataOf(graph);

  absl::StatusOr<StateFit> same = FitStateToGraph(m, graph, {2, 2, 2}, false);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_TRUE(same->rescaled.empty());
  EXPECT_TRUE(same->dropped.empty());
  EXPECT_TRUE(same->fresh.empty());
  absl::StatusOr<StateFit> rescaled = FitStateToGraph(m, graph, {3, 1, 1}, false);
  ASSERT_TRUE(rescaled.ok()) << rescaled.status();
  EXPECT_THAT(rescaled->rescaled, ::testing::ElementsAre("'source' 2 -> 3", "'count' 2 -> 1", "'sink' 2 -> 1"));

  // Renaming keeps the state (the id stays); another kind of operator under
  // the id does not.
  v1::JobGraphSpec renamed = graph;
  renamed.mutable_vertices(1)->set_name("CountEveryKey");
  EXPECT_TRUE(FitStateToGraph(m, renamed, {2, 2, 2}, false).ok());
  v1::JobGraphSpec other = graph;
  other.mutable_vertices(1)->set_keyed(false);
  absl::StatusOr<StateFit> refused = FitStateToGraph(m, other, {2, 2, 2}, false);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), ::testing::HasSubstr("operator 'count' as OPERATOR user keyed"));
  EXPECT_THAT(refused.status().message(), ::testing::HasSubstr("--allow-non-restored-state"));
  absl::StatusOr<StateFit> dropped = FitStateToGraph(m, other, {2, 2, 2}, true);
  ASSERT_TRUE(dropped.ok()) << dropped.status();
  EXPECT_THAT(dropped->dropped, ::testing::ElementsAre("count"));
}

// Operators are found by id wherever they are chained: a stateless filter
// added after the source (new vertex 1, the others shift) leaves every
// operator's state where it was, and the filter starts without any.
TEST(FitStateToGraphTest, AnAddedOperatorShiftsNoState) {
  const v1::JobGraphSpec graph = KeyedCountGraph();
  const v1::CheckpointMetadata m = MetadataOf(graph);
  v1::JobGraphSpec changed;
  for (int i = 0, id = 0; i < graph.vertices_size(); ++i) {
    v1::JobVertex* v = changed.add_vertices();
    *v = graph.vertices(i);
    v->set_id(id++);
    if (i == 0) {
      v1::JobVertex* filter = changed.add_vertices();
      filter->set_id(id++);
      filter->set_uid("Filter");
      filter->set_kind(v1::JobVertex::OPERATOR);
    }
  }
  absl::StatusOr<StateFit> fit = FitStateToGraph(m, changed, {2, 2, 2, 2}, false);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_TRUE(fit->dropped.empty());
  EXPECT_THAT(fit->fresh, ::testing::ElementsAre("Filter"));

  // An operator the job no longer has is refused unless dropped, by name.
  v1::JobGraphSpec without_count = graph;
  without_count.mutable_vertices(1)->set_uid("count-v2");
  absl::StatusOr<StateFit> refused = FitStateToGraph(m, without_count, {2, 2, 2}, false);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), ::testing::HasSubstr("operator 'count', which this job has not"));
  absl::StatusOr<StateFit> dropped = FitStateToGraph(m, without_count, {2, 2, 2}, true);
  ASSERT_TRUE(dropped.ok()) << dropped.status();
  EXPECT_THAT(dropped->dropped, ::testing::ElementsAre("count"));
  EXPECT_THAT(dropped->fresh, ::testing::ElementsAre("count-v2"));
}

// A partly finished operator restores only at its parallelism.
TEST(FitStateToGraphTest, APartlyFinishedOperatorIsNotRescaled) {
  const v1::JobGraphSpec graph = KeyedCountGraph();
  const v1::CheckpointMetadata m = MetadataOf(graph, /*finished=*/true);
  EXPECT_TRUE(FitStateToGraph(m, graph, {2, 3, 3}, false).ok());
  absl::StatusOr<StateFit> refused = FitStateToGraph(m, graph, {3, 2, 2}, false);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), ::testing::HasSubstr("1 of the 2 subtasks of the operator 'source'"));
}

TEST(IndexOperatorsTest, RefusesInconsistentMetadata) {
  const v1::JobGraphSpec graph = KeyedCountGraph();
  v1::CheckpointMetadata twice = MetadataOf(graph);
  twice.mutable_tasks(0)->add_operator_uids("count");  // in two chains
  EXPECT_EQ(IndexOperators(twice).status().code(), absl::StatusCode::kDataLoss);
  v1::CheckpointMetadata no_ids = MetadataOf(graph);
  no_ids.mutable_tasks(0)->clear_operator_uids();
  EXPECT_EQ(IndexOperators(no_ids).status().code(), absl::StatusCode::kDataLoss);
  absl::StatusOr<OperatorIndex> index = IndexOperators(MetadataOf(graph));
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->chains.size(), 2u);
  EXPECT_EQ(index->chain_of.at("sink"), index->chain_of.at("count"));
}

}  // namespace
}  // namespace weir::jobmanager::checkpoint
