// The write-ahead-log sink API (weir/write_ahead.h) driven through the
// checkpoint hooks the runtime calls, with the runtime's own operator state:
// batches are written only when their checkpoint completes, a restore
// writes what the committer does not know as written, a rescale hands old
// subtasks' batches to the new ones, and a fresh start forgets.
#include "weir/write_ahead.h"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "taskmanager/state/operator_state.h"
#include "tests/testing/fake_operator_context.h"

namespace weir {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using TestContext = weir::testing::FakeOperatorContext;

// What an external system with a checkpoint committer would hold.
struct External {
  std::vector<std::string> log;                     // "write <subtask>/<checkpoint>: a,b"
  std::map<std::pair<int, int64_t>, std::string> ids;  // (subtask, checkpoint) -> id of its batch
  std::set<std::string> written;                    // ids marked
  std::vector<std::string> asked;                   // ids IsWritten was asked about
  int forgotten = 0;

  bool Written(int subtask, int64_t checkpoint) const {
    auto it = ids.find({subtask, checkpoint});
    return it != ids.end() && written.contains(it->second);
  }
  void Unmark(int subtask, int64_t checkpoint) { written.erase(ids.at({subtask, checkpoint})); }
};

class RecordingSink final : public WriteAheadSink<std::string> {
 public:
  explicit RecordingSink(External* external) : external_(external) {}
  void WriteBatch(const WriteAheadBatch& batch, const std::vector<std::string>& records) override {
    std::string text;
    for (const std::string& r : records) text += (text.empty() ? "" : ",") + r;
    external_->log.push_back("write " + std::to_string(batch.subtask) + "/" + std::to_string(batch.checkpoint_id) +
                             ": " + text);
    external_->ids[{batch.subtask, batch.checkpoint_id}] = batch.id;
  }
  bool IsWritten(const WriteAheadBatch& batch) override {
    external_->asked.push_back(batch.id);
    return external_->written.contains(batch.id);
  }
  void MarkWritten(const WriteAheadBatch& batch) override { external_->written.insert(batch.id); }
  void ForgetWritten() override {
    ++external_->forgotten;
    external_->written.clear();
  }

 private:
  External* external_;
};

using RecordingOperator = internal::WriteAheadOperator<RecordingSink>;

std::unique_ptr<RecordingOperator> Start(External* external, TestContext& context) {
  auto op = std::make_unique<RecordingOperator>(std::make_unique<RecordingSink>(external));
  op->InitializeState(context);
  op->Open(context, nullptr);
  return op;
}

void Emit(RecordingOperator& op, std::string record) { op.Process(&record); }

void Checkpoint(RecordingOperator& op, int64_t id) {
  op.PrepareSnapshotPreBarrier(id);
  op.SnapshotState({id, 0});
}

TEST(WriteAheadTest, WritesABatchOnlyWhenItsCheckpointCompletesAndCarriesAbortedOnesToTheNext) {
  External external;
  TestContext context;
  auto op = Start(&external, context);
  EXPECT_EQ(external.forgotten, 1);  // a fresh start, subtask 0
  Emit(*op, "a");
  Emit(*op, "b");
  Checkpoint(*op, 1);
  Emit(*op, "c");
  Checkpoint(*op, 2);
  Checkpoint(*op, 3);  // nothing since 2: no batch
  EXPECT_THAT(external.log, IsEmpty());
  op->NotifyCheckpointAborted(1);
  EXPECT_THAT(external.log, IsEmpty());
  // 2 completes: 1's batch (its checkpoint aborted) goes first.
  op->NotifyCheckpointComplete(2);
  EXPECT_THAT(external.log, ElementsAre("write 0/1: a,b", "write 0/2: c"));
  EXPECT_TRUE(external.Written(0, 1));
  EXPECT_TRUE(external.Written(0, 2));
  const std::string first = external.ids[{0, 1}], second = external.ids[{0, 2}];
  EXPECT_NE(first, second);
  EXPECT_EQ(first.size(), 32u);
  op->NotifyCheckpointComplete(3);
  EXPECT_EQ(external.log.size(), 2u);
}

TEST(WriteAheadTest, ARestoreWritesTheBatchesTheCommitterDoesNotKnowAndNothingTwice) {
  External external;
  taskmanager::OperatorStateSnapshot snapshot;
  {
    TestContext context;
    auto op = Start(&external, context);
    Emit(*op, "a");
    Checkpoint(*op, 1);
    op->NotifyCheckpointComplete(1);  // written and marked
    Emit(*op, "b");
    Checkpoint(*op, 2);
    Emit(*op, "c");
    Checkpoint(*op, 3);
    snapshot = context.Snapshot();  // lists 2 and 3, not 1
    // Checkpoint 3 completes; the crash comes after batch 2 was written
    // but before it was marked: the committer knows only 1.
    op->NotifyCheckpointComplete(2);
    external.Unmark(0, 2);
  }
  ASSERT_THAT(external.log, ElementsAre("write 0/1: a", "write 0/2: b"));
  external.log.clear();
  TestContext restored(snapshot);
  auto op = Start(&external, restored);
  // Batch 2 again (the window of this strategy), then 3; never 1.
  EXPECT_THAT(external.log, ElementsAre("write 0/2: b", "write 0/3: c"));
  EXPECT_EQ(external.forgotten, 1);  // only the first, fresh start
  // The restored batch 2 kept the id it was written under before.
  const std::string id2 = external.ids.at({0, 2});
  EXPECT_THAT(external.asked, ::testing::Contains(id2));
  // Marked now: a second restore of the same checkpoint writes nothing.
  external.log.clear();
  TestContext again(snapshot);
  Start(&external, again);
  EXPECT_THAT(external.log, IsEmpty());
  // The restored batches are done: the next checkpoint stores none.
  Checkpoint(*op, 4);
  TestContext after(restored.Snapshot());
  Start(&external, after);
  EXPECT_THAT(external.log, IsEmpty());
}

TEST(WriteAheadTest, AfterARescaleEachOldSubtasksBatchesAreWrittenOnceUnderItsOwnIndex) {
  External external;
  // Three subtasks, each with a batch of checkpoint 5 not yet written.
  std::vector<taskmanager::OperatorStateSnapshot> snapshots;
  for (int subtask = 0; subtask < 3; ++subtask) {
    TestContext context({}, subtask, 3);
    auto op = Start(&external, context);
    Emit(*op, "r" + std::to_string(subtask));
    Checkpoint(*op, 5);
    snapshots.push_back(context.Snapshot());
    if (subtask == 1) op->NotifyCheckpointComplete(5);  // old subtask 1's batch is written
  }
  EXPECT_EQ(external.forgotten, 1);  // subtask 0 only
  const std::vector<taskmanager::OperatorStateSnapshot> rescaled =
      taskmanager::RedistributeOperatorState(snapshots, 2);
  std::vector<std::string> writes;
  for (int subtask = 0; subtask < 2; ++subtask) {
    external.log.clear();
    TestContext context(rescaled[subtask], subtask, 2);
    Start(&external, context);
    writes.insert(writes.end(), external.log.begin(), external.log.end());
  }
  // New subtask 0 answers for old 0 and 2, new subtask 1 for old 1 (written).
  EXPECT_THAT(writes, ElementsAre("write 0/5: r0", "write 2/5: r2"));
}

// A job restored from an older savepoint numbers its checkpoints from
// there: checkpoint 7 of the new run is not the batch 7 the old run wrote.
TEST(WriteAheadTest, ACheckpointIdThatComesBackIsNotMistakenForAWrittenBatch) {
  External external;
  taskmanager::OperatorStateSnapshot savepoint;
  {
    TestContext context;
    auto op = Start(&external, context);
    Emit(*op, "old-5");
    Checkpoint(*op, 5);
    savepoint = context.Snapshot();
    op->NotifyCheckpointComplete(5);
    Emit(*op, "old-7");
    Checkpoint(*op, 7);
    op->NotifyCheckpointComplete(7);
  }
  ASSERT_THAT(external.log, ElementsAre("write 0/5: old-5", "write 0/7: old-7"));
  external.log.clear();
  taskmanager::OperatorStateSnapshot checkpoint7;
  {
    TestContext from_savepoint(savepoint);
    auto op = Start(&external, from_savepoint);  // batch 5 is known: skipped
    Emit(*op, "new-7");
    Checkpoint(*op, 7);
    checkpoint7 = from_savepoint.Snapshot();  // the crash comes before 7 completes
  }
  TestContext restored(checkpoint7);
  Start(&external, restored);
  EXPECT_THAT(external.log, ElementsAre("write 0/7: new-7"));
}

TEST(WriteAheadTest, EndOfInputWritesWhatIsPendingAndWhatIsOpen) {
  External external;
  TestContext context;
  auto op = Start(&external, context);
  Emit(*op, "a");
  Checkpoint(*op, 1);
  Emit(*op, "b");
  op->EndInput();
  EXPECT_THAT(external.log, ElementsAre("write 0/1: a", "write 0/0: b"));
}

}  // namespace
}  // namespace weir
