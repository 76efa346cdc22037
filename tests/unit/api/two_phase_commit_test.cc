// The two-phase-commit sink API (weir/two_phase_commit.h) driven through the
// checkpoint hooks the runtime calls, with the runtime's own operator state
// (snapshots, restores, redistribution on rescale), and the exactly-once
// file sink built on it (weir/file.h) in a temporary directory.
#include "weir/two_phase_commit.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "taskmanager/state/operator_state.h"
#include "tests/testing/fake_operator_context.h"
#include "tests/testing/process.h"
#include "weir/file.h"

namespace weir {
namespace {

namespace fs = std::filesystem;
using taskmanager::OperatorStateBackend;
using taskmanager::OperatorStateSnapshot;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

using TestContext = weir::testing::FakeOperatorContext;

// Records every call; a transaction's committable is "<subtask>:<records>".
class RecordingSink final : public TwoPhaseCommitSink<std::string, std::string> {
 public:
  explicit RecordingSink(std::vector<std::string>* log) : log_(log) {}
  void Open(const SinkContext& context) override { subtask_ = context.subtask_index; }
  void BeginTransaction() override {
    log_->push_back("begin");
    open_.clear();
  }
  void Write(const std::string& record) override { open_ += record; }
  std::string PreCommit(int64_t checkpoint_id) override {
    log_->push_back("pre-commit " + std::to_string(checkpoint_id));
    return std::to_string(subtask_) + ":" + open_;
  }
  void Commit(const std::string& c) override { log_->push_back("commit " + c); }
  void Abort() override { log_->push_back("abort " + open_); }
  void AbortLingering(int old_subtask, const std::vector<std::string>& restored) override {
    log_->push_back("abort-lingering " + std::to_string(old_subtask) + " of " + std::to_string(restored.size()));
  }
  void Close() override { log_->push_back("close"); }

 private:
  std::vector<std::string>* log_;
  int subtask_ = 0;
  std::string open_;
};

using RecordingOperator = internal::TwoPhaseCommitOperator<RecordingSink>;

void Emit(RecordingOperator& op, std::string record) { op.Process(&record); }

void Checkpoint(RecordingOperator& op, int64_t id) {
  op.PrepareSnapshotPreBarrier(id);
  op.SnapshotState({id, 0});
}

TEST(TwoPhaseCommitTest, CommitsWhenCheckpointsCompleteAndCarriesAbortedOnesToTheNext) {
  std::vector<std::string> log;
  TestContext context;
  RecordingOperator op(std::make_unique<RecordingSink>(&log));
  op.InitializeState(context);
  op.Open(context, nullptr);
  EXPECT_THAT(log, ElementsAre("abort-lingering 0 of 0"));
  log.clear();

  Emit(op, "a");
  Emit(op, "b");
  Checkpoint(op, 1);
  Checkpoint(op, 2);  // no records: no transaction
  op.NotifyCheckpointComplete(1);
  Emit(op, "c");
  Checkpoint(op, 3);
  op.NotifyCheckpointAborted(3);
  Emit(op, "d");
  Checkpoint(op, 4);
  EXPECT_THAT(log, ElementsAre("begin", "pre-commit 1", "commit 0:ab", "begin", "pre-commit 3", "begin",
                               "pre-commit 4"));
  log.clear();
  op.NotifyCheckpointComplete(4);  // 3's transaction goes with 4, first
  EXPECT_THAT(log, ElementsAre("commit 0:c", "commit 0:d"));
  log.clear();
  Emit(op, "e");
  op.Close();  // cancel: the open transaction is aborted
  EXPECT_THAT(log, ElementsAre("begin", "abort e", "close"));
}

TEST(TwoPhaseCommitTest, ARestoreCommitsTheCheckpointsTransactionsAgainThenAbortsLeftovers) {
  std::vector<std::string> log;
  OperatorStateSnapshot checkpoint2;
  {
    TestContext context;
    RecordingOperator op(std::make_unique<RecordingSink>(&log));
    op.InitializeState(context);
    Emit(op, "a");
    Checkpoint(op, 1);
    Emit(op, "b");
    Checkpoint(op, 2);  // checkpoint 2 lists both: neither is known committed
    checkpoint2 = context.Snapshot();
    op.NotifyCheckpointComplete(1);
    Emit(op, "c");
    Checkpoint(op, 3);  // then the task dies; 3 never completes
  }
  log.clear();
  TestContext restored(checkpoint2);
  RecordingOperator op(std::make_unique<RecordingSink>(&log));
  op.InitializeState(restored);
  EXPECT_THAT(log, ElementsAre("commit 0:a", "commit 0:b", "abort-lingering 0 of 2"));
  log.clear();
  // The restored transactions are done: the next checkpoint lists only new ones.
  Emit(op, "x");
  Checkpoint(op, 3);
  op.NotifyCheckpointComplete(3);
  EXPECT_THAT(log, ElementsAre("begin", "pre-commit 3", "commit 0:x"));
}

TEST(TwoPhaseCommitTest, RescalingHandsOldSubtasksToSubtaskModuloParallelism) {
  std::vector<std::string> log;
  std::vector<OperatorStateSnapshot> old(4);
  for (int s = 0; s < 4; ++s) {
    TestContext context({}, s, 4);
    RecordingOperator op(std::make_unique<RecordingSink>(&log));
    op.InitializeState(context);
    Emit(op, "r" + std::to_string(s));
    Checkpoint(op, 7);
    old[s] = context.Snapshot();
  }
  const std::vector<OperatorStateSnapshot> now = taskmanager::RedistributeOperatorState(old, 2);
  log.clear();
  TestContext context(now[1], 1, 2);
  RecordingOperator op(std::make_unique<RecordingSink>(&log));
  op.InitializeState(context);
  EXPECT_THAT(log, ElementsAre("commit 1:r1", "commit 3:r3", "abort-lingering 1 of 4", "abort-lingering 3 of 4"));
}

TEST(TwoPhaseCommitTest, EndOfInputCommitsEverything) {
  std::vector<std::string> log;
  TestContext context;
  RecordingOperator op(std::make_unique<RecordingSink>(&log));
  op.InitializeState(context);
  Emit(op, "a");
  Checkpoint(op, 1);
  Emit(op, "b");
  log.clear();
  op.EndInput();
  op.Close();
  EXPECT_THAT(log, ElementsAre("pre-commit 0", "commit 0:a", "commit 0:b", "close"));
}

class FileSinkTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = weir::testing::MakeTempDir("file-sink-test"); }
  void TearDown() override { fs::remove_all(dir_); }

  using FileOperator = internal::TwoPhaseCommitOperator<file::ExactlyOnceFileSink<std::string>>;
  std::unique_ptr<FileOperator> Make() {
    return std::make_unique<FileOperator>(file::ExactlyOnceFiles<std::string>(
        {.directory = dir_}, [](const std::string& s) { return s; })());
  }

  // One record, then the barrier and snapshot of checkpoint `id`.
  static void WriteAndCheckpoint(FileOperator& op, std::string record, int64_t id) {
    op.Process(&record);
    op.PrepareSnapshotPreBarrier(id);
    op.SnapshotState({id, 0});
  }

  // Committed lines, and the number of in-progress files.
  std::multiset<std::string> Committed(int* in_progress = nullptr) const {
    std::multiset<std::string> lines;
    int hidden = 0;
    for (const auto& entry : fs::directory_iterator(dir_)) {
      const std::string name = entry.path().filename().string();
      if (name[0] == '.') {
        ++hidden;
        continue;
      }
      std::ifstream in(entry.path());
      for (std::string line; std::getline(in, line);) lines.insert(line);
    }
    if (in_progress != nullptr) *in_progress = hidden;
    return lines;
  }

  std::string dir_;
};

TEST_F(FileSinkTest, FilesBecomeVisibleOnlyWhenTheirCheckpointCompletes) {
  TestContext context;
  auto op = Make();
  op->InitializeState(context);
  for (std::string r : {"1", "2"}) op->Process(&r);
  op->PrepareSnapshotPreBarrier(1);
  op->SnapshotState({1, 0});
  int in_progress = 0;
  EXPECT_THAT(Committed(&in_progress), IsEmpty());
  EXPECT_EQ(in_progress, 1);
  op->NotifyCheckpointComplete(1);
  EXPECT_EQ(Committed(&in_progress), (std::multiset<std::string>{"1", "2"}));
  EXPECT_EQ(in_progress, 0);
  std::string r = "3";
  op->Process(&r);
  op->Close();  // aborted: the in-progress file goes
  EXPECT_EQ(Committed(&in_progress), (std::multiset<std::string>{"1", "2"}));
  EXPECT_EQ(in_progress, 0);
}

// A crash after checkpoint 2 was taken (its file pre-committed) and while
// records after it sat in an open file: the restore commits checkpoint 2's
// file, deletes the open one, and committing again is harmless.
TEST_F(FileSinkTest, RecoveryCommitsPreCommittedFilesOnceAndDeletesTheRest) {
  OperatorStateSnapshot checkpoint2;
  std::unique_ptr<FileOperator> crashed = Make();
  {
    TestContext context;
    crashed->InitializeState(context);
    for (std::string r : {"a", "b"}) crashed->Process(&r);
    crashed->PrepareSnapshotPreBarrier(2);
    crashed->SnapshotState({2, 0});
    checkpoint2 = context.Snapshot();
    std::string r = "lost-with-the-crash";
    crashed->Process(&r);
    crashed->PrepareSnapshotPreBarrier(3);  // pre-committed for a checkpoint that never completes
  }
  crashed.release();  // NOLINT: a crash runs no Close or destructor; the files stay as they are
  int in_progress = 0;
  EXPECT_THAT(Committed(&in_progress), IsEmpty());
  EXPECT_EQ(in_progress, 2);

  for (int restart = 0; restart < 2; ++restart) {  // a second restart from the same checkpoint changes nothing
    TestContext restored(checkpoint2);
    auto op = Make();
    op->InitializeState(restored);
    EXPECT_EQ(Committed(&in_progress), (std::multiset<std::string>{"a", "b"})) << restart;
    EXPECT_EQ(in_progress, 0);
    op->Close();
  }
}

TEST_F(FileSinkTest, AMissingFileOfACompletedCheckpointFailsTheTask) {
  TestContext context;
  auto op = Make();
  op->InitializeState(context);
  WriteAndCheckpoint(*op, "x", 1);
  for (const auto& entry : fs::directory_iterator(dir_)) fs::remove(entry.path());
  try {
    op->NotifyCheckpointComplete(1);
    FAIL() << "a lost file must not pass silently";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("records are lost"));
  }
}

// weir stop commits the last interval's files; a reader may move them away
// before the job is started again from that savepoint: the restore takes
// them as committed instead of failing every start.
TEST_F(FileSinkTest, ARestoreTakesAFileConsumedSinceAsCommitted) {
  OperatorStateSnapshot savepoint;
  {
    TestContext context;
    auto op = Make();
    op->InitializeState(context);
    WriteAndCheckpoint(*op, "x", 1);
    savepoint = context.Snapshot();
    op->NotifyCheckpointComplete(1);
    op->Close();
  }
  for (const auto& entry : fs::directory_iterator(dir_)) fs::remove(entry.path());  // consumed
  TestContext restored(savepoint);
  auto op = Make();
  EXPECT_NO_THROW(op->InitializeState(restored));
  op->Close();
}

}  // namespace
}  // namespace weir
