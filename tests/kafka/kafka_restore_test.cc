// Restoring an exactly-once Kafka sink from a point other than the job's
// newest checkpoint, on a real cluster against the real broker: a savepoint
// after the job went on and was canceled with a transaction pre-committed,
// an older retained checkpoint after newer ones completed (with and without
// a restart in between), one savepoint restored three times, and the
// JobManager falling back past corrupt checkpoints
// (docs/design/kafka-restores.md, section 4). Each restore must commit
// nothing the restored point does not cover, fail nothing that was
// committed, and leave no transaction open.
//
// The clusters are made deterministic: parallelism 1, and (where the test
// takes the checkpoints itself) a checkpoint interval of 5 min, so the
// checkpoints are the test's own `weir savepoint`s with ids 1, 2, 3, ...
// The writer sends 1000 records every 100 ms, so no interval is empty and
// the sink's transactional ids rotate one per checkpoint.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "connectors/kafka/protocol/transaction_client.h"
#include "gtest/gtest.h"
#include "tests/kafka/cluster_job_test.h"
#include "tests/kafka/kafka_io.h"
#include "tests/kafka/test_kafka.h"
#include "tests/testing/local_cluster.h"

namespace weir {
namespace {

using test::KafkaMessage;
using testing::CountValues;
using testing::NoTransactionStaysOpen;
using testing::ReadUntil;
using testing::Sequence;
using testing::WaitFor;

const std::string kJobs = WEIR_JOBS_DIR;

constexpr int kBatch = 1000;

// Options that keep up to ten checkpoints of a job when it is canceled.
const std::vector<std::string> kRetainOnCancel = {
    "-Dexecution.checkpointing.externalized-checkpoint-retention=RETAIN_ON_CANCELLATION",
    "-Dstate.checkpoints.num-retained=10"};

// Writes Sequence batches of kBatch records every 100 ms on a thread,
// continuing where it stopped, from Start() until Stop().
//
// Thread-safety: Start and Stop from the test's thread.
class SteadyWriter {
 public:
  SteadyWriter(std::string bootstrap, std::string topic) : bootstrap_(std::move(bootstrap)), topic_(std::move(topic)) {}
  ~SteadyWriter() { Stop(); }

  void Start() {
    if (thread_.joinable()) return;
    stop_ = false;
    thread_ = std::thread([this] {
      while (!stop_) {
        if (!test::ProduceMessages(bootstrap_, topic_, Sequence(written_, kBatch)).ok()) {
          failed_ = true;
          return;
        }
        written_ += kBatch;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
  }

  // Stops and joins; returns how many records are written in all.
  int Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return written_;
  }

  int written() const { return written_; }
  bool failed() const { return failed_; }

  // Whether `records` are written within 30 s.
  bool WaitUntilWritten(int records) const {
    return WaitFor([&] { return written_ >= records; }, absl::Seconds(30));
  }

 private:
  const std::string bootstrap_;
  const std::string topic_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> written_{0};
  std::atomic<bool> failed_{false};
};

std::set<int> Values(const std::vector<KafkaMessage>& output) {
  std::set<int> values;
  for (const auto& [value, times] : CountValues(output)) values.insert(value);
  return values;
}

// The sum of the end offsets of `out`'s partitions: the high watermarks, or
// with `read_committed` the last stable offsets (-1 when not readable). The
// latter grows exactly when a transaction commits; the former is ahead of
// it while the open transaction holds records.
int64_t EndTotal(const std::string& bootstrap, const std::string& out, bool read_committed) {
  auto end = test::EndOffsets(bootstrap, out, read_committed);
  if (!end.ok()) return -1;
  int64_t total = 0;
  for (const auto& [partition, offset] : *end) total += offset;
  return total;
}

int64_t StableTotal(const std::string& bootstrap, const std::string& out) {
  return EndTotal(bootstrap, out, /*read_committed=*/true);
}

// The restored job's output `final` against `committed_before`, the
// read_committed output at the moment the old run ended: every value of
// 0..written-1 is there at least once, none more than twice, and a value
// there twice must be in `committed_before` (the old run committed it, and
// the restored run wrote it again from the point's offsets). Anything else
// the old run wrote after the point became visible without being committed
// by it, or was lost. `what` names the scenario.
void ExpectOnceRelativeTo(const std::set<int>& committed_before, const std::vector<KafkaMessage>& final, int written,
                          const std::string& what) {
  const std::map<int, int> seen = CountValues(final);
  int missing = 0, thrice = 0, twice_not_committed = 0, twice = 0;
  int first_wrong = -1;
  for (int i = 0; i < written; ++i) {
    auto it = seen.find(i);
    if (it == seen.end()) {
      if (++missing <= 5) ADD_FAILURE() << what << ": value " << i << " is missing";
      continue;
    }
    if (it->second == 2) ++twice;
    if (it->second > 2 && ++thrice <= 5) ADD_FAILURE() << what << ": value " << i << " is there " << it->second << " times";
    if (it->second == 2 && !committed_before.count(i)) {
      if (first_wrong < 0) first_wrong = i;
      if (++twice_not_committed <= 5) {
        ADD_FAILURE() << what << ": value " << i << " is there twice but the old run had not committed it "
                      << "(a transaction written after the restored point became visible)";
      }
    }
  }
  std::printf("%s: %d values written, %zu records read_committed, %zu committed by the old run, %d twice "
              "(%d of them never committed by the old run%s), %d more than twice, %d missing\n",
              what.c_str(), written, final.size(), committed_before.size(), twice, twice_not_committed,
              first_wrong < 0 ? "" : absl::StrCat(", the first ", first_wrong).c_str(), thrice, missing);
  EXPECT_EQ(missing, 0) << what;
  EXPECT_EQ(thrice, 0) << what;
  EXPECT_EQ(twice_not_committed, 0) << what;
}

// The lines of `logs` that tell what a restore did with the sink's
// transactions, in the order of each process's log.
std::string RestoreEvidence(const std::string& logs) {
  std::string evidence;
  std::istringstream in(logs);
  std::string line;
  while (std::getline(in, line)) {
    for (const char* needle : {"DATA LOSS", "of restored checkpoint", "already committed", "resolved by a later run",
                               "cannot tell whether it was committed", "NOT restoring", "restoring from checkpoint",
                               "FAULT INJECTION:", "transactional ids", "pre-committed transaction",
                               "records delivered", "could not abort the open transaction"}) {
      if (absl::StrContains(line, needle)) {
        absl::StrAppend(&evidence, line.substr(0, 600), "\n");
        break;
      }
    }
  }
  return evidence;
}

class KafkaRestoreTest : public testing::ClusterJobTest {
 protected:
  // Starts a JobManager and one TaskManager of one slot started with
  // `taskmanager_extra`; returns that TaskManager's index.
  int StartClusterWith(const std::vector<std::string>& taskmanager_extra) {
    cluster_ = std::make_unique<testing::LocalCluster>(testing::LocalCluster::Options{0, 1, {}, ""});
    cluster_->Start();
    std::vector<std::string> extra = {"-Dlog.level=debug"};  // which id pre-committed which checkpoint
    extra.insert(extra.end(), taskmanager_extra.begin(), taskmanager_extra.end());
    const int tm = cluster_->StartTaskManager(extra);
    EXPECT_TRUE(WaitFor([&] {
      nlohmann::json c = cluster_->WeirJson({"cluster"});
      return !c.is_null() && c["taskmanagers"].size() == 1u;
    }, absl::Seconds(60))) << cluster_->Logs();
    return tm;
  }

  // SIGKILLs TaskManager `old` and starts a replacement (debug log), then
  // waits until the JobManager lists it with every slot free, so that a
  // submission right after finds its slot.
  void ReplaceTaskManager(int old) {
    cluster_->KillTaskManager(old);
    cluster_->StartTaskManager({"-Dlog.level=debug"});
    EXPECT_TRUE(WaitFor([&] {
      nlohmann::json c = cluster_->WeirJson({"cluster"});
      if (c.is_null() || c["taskmanagers"].size() != 1u) return false;
      const auto& tm = c["taskmanagers"][0];
      return tm["slots_free"] == tm["slots_total"];
    }, absl::Seconds(60))) << "the replacement TaskManager did not register" << cluster_->Logs();
  }

  // kafka_copy, exactly-once, parallelism 1. `interval` "5min": the test's
  // savepoints are the only checkpoints.
  std::string SubmitCopy(const std::string& interval, std::vector<std::string> extra, const std::string& in,
                         const std::string& out) {
    std::vector<std::string> options = {"-p", "1", "-Dexecution.checkpointing.interval=" + interval,
                                        "-Dexecution.checkpointing.timeout=1min", "-Drestart-strategy.type=fixed-delay",
                                        "-Drestart-strategy.fixed-delay.attempts=20",
                                        "-Drestart-strategy.fixed-delay.delay=200ms"};
    options.insert(options.end(), extra.begin(), extra.end());
    std::string error;
    std::string job = cluster_->Submit(kJobs + "/kafka_copy.so", options,
                                       {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", out,
                                        "--guarantee", "exactly-once"},
                                       &error);
    EXPECT_FALSE(job.empty()) << error << "\n" << RestoreEvidence(cluster_->Logs());
    return job;
  }

  // Submits kafka_copy with the test's savepoints as its only checkpoints
  // (SubmitCopy "5min" with `extra`), waits until it runs, then starts
  // `writer` and waits until it wrote `records`. Returns the job's id, or ""
  // (a test failure) when a step failed.
  std::string StartCopyAndWriter(std::vector<std::string> extra, const std::string& in, const std::string& out,
                                 SteadyWriter* writer, int records = 2 * kBatch) {
    const std::string job = SubmitCopy("5min", std::move(extra), in, out);
    if (job.empty()) return "";  // SubmitCopy failed the test
    const std::string state = RunningOrEnded(job);
    EXPECT_EQ(state, "RUNNING") << cluster_->Logs();
    if (state != "RUNNING") return "";
    writer->Start();
    const bool written = writer->WaitUntilWritten(records);
    EXPECT_TRUE(written) << "the writer did not write " << records << " records within 30 s";
    return written ? job : "";
  }

  // Waits until `job` runs (all tasks RUNNING, attempt >= `min_attempt`) or
  // has ended; returns its state ("RUNNING", "FAILED", ...; "" when neither
  // within 120 s).
  std::string RunningOrEnded(const std::string& job, int min_attempt = 1) {
    std::string state;
    WaitFor([&] {
      nlohmann::json s = cluster_->WeirJson({"status", job});
      if (s.is_null()) return false;
      const std::string now = s["state"];
      if (now == "FAILED" || now == "CANCELED" || now == "FINISHED") {
        state = now;
        return true;
      }
      if (now != "RUNNING" || s["attempt"].get<int>() < min_attempt) return false;
      for (const auto& t : s["tasks"]) {
        if (t["state"] != "RUNNING") return false;
      }
      state = now;
      return true;
    }, absl::Seconds(120));
    return state;
  }

  // Whether, within 30 s, the output's high watermark gets ahead of its last
  // stable offset: the sink's open transaction holds records.
  bool OpenTransactionHoldsRecords(const std::string& out) {
    return WaitFor([&] { return EndTotal(bootstrap_, out, false) > EndTotal(bootstrap_, out, true); },
                   absl::Seconds(30), absl::Milliseconds(50));
  }

  // `weir savepoint job`; returns the savepoint's path. With
  // `wait_for_commit`, also waits until the sink committed the savepoint's
  // transaction (the output's last stable offset moved), so that the next
  // savepoint finds the id rotation one step on.
  std::string Savepoint(const std::string& job, const std::string& out, bool wait_for_commit = true) {
    // The open transaction holds records, so the savepoint pre-commits one.
    EXPECT_TRUE(OpenTransactionHoldsRecords(out)) << "the sink wrote nothing since the last checkpoint";
    const int64_t before = StableTotal(bootstrap_, out);
    nlohmann::json saved = cluster_->WeirJson({"savepoint", job});
    EXPECT_FALSE(saved.is_null()) << RestoreEvidence(cluster_->Logs());
    if (saved.is_null()) return "";
    if (wait_for_commit) {
      EXPECT_TRUE(WaitFor([&] { return StableTotal(bootstrap_, out) > before; }, absl::Seconds(30)))
          << "the savepoint's transaction was not committed within 30 s";
    }
    return saved["savepoint_path"];
  }

  // Cancels `job` and waits until it is CANCELED.
  void Cancel(const std::string& job) {
    ASSERT_EQ(cluster_->Weir({"cancel", job}).exit_code, 0);
    ASSERT_EQ(cluster_->WaitForJobEnd(job, absl::Seconds(60))["state"], "CANCELED");
  }

  std::vector<KafkaMessage> ReadAll(const std::string& out) {
    auto read = test::ReadTopic(bootstrap_, out);
    EXPECT_TRUE(read.ok()) << read.status();
    return read.ok() ? *std::move(read) : std::vector<KafkaMessage>{};
  }

  // What a read_committed reader sees now, while a transaction may stay
  // open (pre-committed and never committed by the old run).
  std::set<int> CommittedNow(const std::string& out) {
    auto read = test::ReadTopicCommittedNow(bootstrap_, out);
    EXPECT_TRUE(read.ok()) << read.status();
    return read.ok() ? Values(*read) : std::set<int>{};
  }

  // Reads `out` until every value of 0..written-1 is in it (or 120 s pass).
  std::vector<KafkaMessage> ReadUntilComplete(const std::string& out, int written) {
    std::vector<KafkaMessage> output;
    const bool complete = ReadUntil(bootstrap_, out, absl::Seconds(120), &output, [&](const auto& read) {
      const std::set<int> values = Values(read);
      return static_cast<int>(values.size()) >= written && (written == 0 || *values.rbegin() >= written - 1);
    });
    EXPECT_TRUE(complete) << "the output did not reach all " << written << " values";
    return output;
  }

  // The restored job: RUNNING? What the logs say about the restored
  // transactions is printed (the evidence of what the restore did).
  bool ExpectRestoredJobRuns(const std::string& job, const std::string& what, int min_attempt = 1) {
    const std::string state = RunningOrEnded(job, min_attempt);
    const std::string evidence = RestoreEvidence(cluster_->Logs());
    std::printf("%s: the restored job is %s; the logs say:\n%s", what.c_str(), state.c_str(), evidence.c_str());
    EXPECT_EQ(state, "RUNNING") << what << "\n" << evidence;
    return state == "RUNNING";
  }

  // The checks every restore ends with, once `final` is read: the output
  // against `committed_before` (ExpectOnceRelativeTo), no transaction left
  // open, no DATA LOSS logged. Returns the cluster's logs for the
  // scenario's own checks.
  std::string ExpectRestoredOutputOnce(const std::set<int>& committed_before, const std::vector<KafkaMessage>& final,
                                       int written, const std::string& out, const std::string& what) {
    ExpectOnceRelativeTo(committed_before, final, written, what);
    EXPECT_TRUE(NoTransactionStaysOpen(bootstrap_, out)) << "a transaction is still open on the output";
    std::string logs = cluster_->Logs();
    EXPECT_FALSE(absl::StrContains(logs, "DATA LOSS")) << "see the restore's log lines above";
    return logs;
  }

  // A new kafka_copy job from the savepoint or checkpoint `point` of a job
  // that read `in` and wrote `written` values to `out`: it must run, and
  // its output pass ExpectRestoredOutputOnce once every value is there.
  // Cancels it then and returns the cluster's logs; nullopt when it did not
  // come up (a test failure).
  std::optional<std::string> RestoreAndExpectOnce(const std::string& point, const std::string& in,
                                                  const std::string& out, int written,
                                                  const std::set<int>& committed_before, const std::string& what) {
    const std::string restored = SubmitCopy("300ms", {"-s", point}, in, out);
    if (restored.empty()) return std::nullopt;  // SubmitCopy failed the test
    if (!ExpectRestoredJobRuns(restored, what)) return std::nullopt;
    const std::vector<KafkaMessage> final = ReadUntilComplete(out, written);
    std::string logs = ExpectRestoredOutputOnce(committed_before, final, written, out, what);
    cluster_->Weir({"cancel", restored});
    return logs;
  }

  std::string JobCheckpointDir(const std::string& job) const {
    return absl::StrCat(cluster_->dir(), "/ha/checkpoints/", job);
  }
};

// A savepoint S of a job that goes on, then cancel while a later transaction
// is pre-committed, then a new job from S: the
// TaskManager drops the completion of checkpoint 4 and later, so savepoint
// 4's transaction stays pre-committed at the cancel. The restore must
// commit S's transaction only if it was not committed yet (it was), never
// the pre-committed one, and the restored job writes everything after S's
// offsets again.
TEST_F(KafkaRestoreTest, SavepointThenCancelWhilePreCommittedCommitsNothingNewer) {
  const int faulty = StartClusterWith({"-Dtest.fault-injection.point=taskmanager-drop-notify",
                                       "-Dtest.fault-injection.checkpoint=4"});
  const std::string in = NewTopic("restore-sp-in"), out = NewTopic("restore-sp-out");
  SteadyWriter writer(bootstrap_, in);
  const std::string job = StartCopyAndWriter({}, in, out, &writer);
  ASSERT_FALSE(job.empty());
  const std::string savepoint = Savepoint(job, out);  // checkpoint 1: S
  ASSERT_FALSE(savepoint.empty());
  ASSERT_FALSE(Savepoint(job, out).empty());  // 2
  ASSERT_FALSE(Savepoint(job, out).empty());  // 3
  ASSERT_FALSE(Savepoint(job, out, /*wait_for_commit=*/false).empty());  // 4: completes, never committed
  const std::string fault_log = cluster_->taskmanager(faulty).Log();
  EXPECT_TRUE(absl::StrContains(fault_log, "FAULT INJECTION: dropping the completion of checkpoint 4")) << fault_log;
  Cancel(job);
  const int written = writer.Stop();
  ASSERT_FALSE(writer.failed());
  const std::set<int> committed_before = CommittedNow(out);

  // A TaskManager that delivers every notification, and the job from S.
  ReplaceTaskManager(faulty);
  const std::optional<std::string> logs =
      RestoreAndExpectOnce(savepoint, in, out, written, committed_before, "savepoint after cancel while pre-committed");
  if (!logs) return;
  EXPECT_TRUE(absl::StrContains(*logs, "already committed")) << "see the restore's log lines above";
}

// An older retained checkpoint after newer ones completed:
// checkpoints 1-3 are savepoints of the first attempt; a TaskManager kill
// makes the job restart from 3, which initializes again the ids 3 does not
// list (checkpoint 1's among them); savepoints 4 and 5 follow; then cancel
// and a new job from the retained chk-1. Checkpoint 1's transaction was
// committed long ago: nothing to commit, nothing lost.
TEST_F(KafkaRestoreTest, OlderRetainedCheckpointAfterNewerOnesCompleted) {
  const int first = StartClusterWith({});
  const std::string in = NewTopic("restore-chk-in"), out = NewTopic("restore-chk-out");
  SteadyWriter writer(bootstrap_, in);
  const std::string job = StartCopyAndWriter(kRetainOnCancel, in, out, &writer);
  ASSERT_FALSE(job.empty());
  for (int i = 1; i <= 3; ++i) ASSERT_FALSE(Savepoint(job, out).empty()) << i;
  cluster_->KillTaskManager(first);
  cluster_->StartTaskManager({"-Dlog.level=debug"});
  ASSERT_EQ(RunningOrEnded(job, 2), "RUNNING") << RestoreEvidence(cluster_->Logs());
  EXPECT_EQ(cluster_->WeirJson({"status", job})["restored_checkpoint_id"].get<int64_t>(), 3);
  for (int i = 4; i <= 5; ++i) ASSERT_FALSE(Savepoint(job, out).empty()) << i;
  Cancel(job);
  const int written = writer.Stop();
  ASSERT_FALSE(writer.failed());
  const std::string chk1 = JobCheckpointDir(job) + "/chk-1";
  ASSERT_TRUE(std::filesystem::exists(chk1 + "/_metadata")) << chk1;
  const std::set<int> committed_before = CommittedNow(out);

  const std::optional<std::string> logs =
      RestoreAndExpectOnce(chk1, in, out, written, committed_before, "older retained checkpoint after a restart");
  if (!logs) return;
  EXPECT_TRUE(absl::StrContains(*logs, "already committed") || absl::StrContains(*logs, "resolved by a later run"))
      << "see the restore's log lines above";
}

// The same without a restart: savepoints 1-5 in one attempt, the completion
// of 5 dropped (its transaction stays pre-committed), cancel, and a new job
// from the retained chk-2. The ids rotate one per checkpoint over three of
// them, so checkpoint 5's transaction is on checkpoint 2's id: the restore
// must not commit it.
TEST_F(KafkaRestoreTest, OlderRetainedCheckpointAfterNewerOnesCompletedWithoutARestart) {
  const int faulty = StartClusterWith({"-Dtest.fault-injection.point=taskmanager-drop-notify",
                                       "-Dtest.fault-injection.checkpoint=5"});
  const std::string in = NewTopic("restore-chk2-in"), out = NewTopic("restore-chk2-out");
  SteadyWriter writer(bootstrap_, in);
  const std::string job = StartCopyAndWriter(kRetainOnCancel, in, out, &writer);
  ASSERT_FALSE(job.empty());
  for (int i = 1; i <= 4; ++i) ASSERT_FALSE(Savepoint(job, out).empty()) << i;
  ASSERT_FALSE(Savepoint(job, out, /*wait_for_commit=*/false).empty());  // 5: never committed
  Cancel(job);
  const int written = writer.Stop();
  ASSERT_FALSE(writer.failed());
  const std::string chk2 = JobCheckpointDir(job) + "/chk-2";
  ASSERT_TRUE(std::filesystem::exists(chk2 + "/_metadata")) << chk2;
  const std::set<int> committed_before = CommittedNow(out);

  ReplaceTaskManager(faulty);
  const std::optional<std::string> logs =
      RestoreAndExpectOnce(chk2, in, out, written, committed_before, "older retained checkpoint, no restart");
  if (!logs) return;
  EXPECT_TRUE(absl::StrContains(*logs, "already committed")) << "see the restore's log lines above";
}

// One savepoint S of a canceled job restored three times: each
// run restores S, completes two checkpoints of its own (the restored ids are
// released and initialized again), writes what arrived, and is canceled.
// Every run must come up; from the second on, S's transaction is known to be
// committed. Each run's added output repeats no value, and starts in every
// input partition right after S's offsets.
TEST_F(KafkaRestoreTest, SavepointRestoredThreeTimes) {
  StartClusterWith({});
  const std::string in = NewTopic("restore-3x-in"), out = NewTopic("restore-3x-out");
  SteadyWriter writer(bootstrap_, in);
  const std::string job = StartCopyAndWriter({}, in, out, &writer, 3 * kBatch);
  ASSERT_FALSE(job.empty());
  const std::string savepoint = Savepoint(job, out);
  ASSERT_FALSE(savepoint.empty());
  Cancel(job);
  writer.Stop();
  ASSERT_FALSE(writer.failed());
  // The first job committed exactly what S covers: the first value after
  // S's offsets in each input partition is the smallest one it has not.
  const std::set<int> before_s = Values(ReadAll(out));
  ASSERT_FALSE(before_s.empty());

  for (int run = 1; run <= 3; ++run) {
    SCOPED_TRACE(absl::StrCat("restore ", run));
    auto offsets_before = test::EndOffsets(bootstrap_, out, /*read_committed=*/false);
    ASSERT_TRUE(offsets_before.ok()) << offsets_before.status();
    const std::string restored = SubmitCopy("300ms", {"-s", savepoint}, in, out);
    ASSERT_FALSE(restored.empty());
    const std::string what = absl::StrCat("savepoint restored, run ", run);
    if (!ExpectRestoredJobRuns(restored, what)) return;
    writer.Start();
    // Two checkpoints of its own (ids 2 and 3: restored + 1 on).
    ASSERT_TRUE(WaitForCompletedCheckpoint(restored, 1, /*after_id=*/2)) << RestoreEvidence(cluster_->Logs());
    ASSERT_TRUE(writer.WaitUntilWritten((3 + 2 * run) * kBatch));
    const int written = writer.Stop();
    ASSERT_FALSE(writer.failed());
    ReadUntilComplete(out, written);
    Cancel(restored);
    ASSERT_TRUE(NoTransactionStaysOpen(bootstrap_, out)) << "a transaction is still open after run " << run;

    // This run's output: past where the output ended before it.
    auto input = test::ReadTopic(bootstrap_, in);
    ASSERT_TRUE(input.ok()) << input.status();
    std::map<int, int32_t> input_partition;  // value -> input partition
    for (const KafkaMessage& m : *input) input_partition[std::stoi(m.value)] = m.partition;
    std::map<int32_t, int> expected_first;  // input partition -> first value after S
    for (const auto& [value, partition] : input_partition) {
      if (!before_s.count(value) && !expected_first.count(partition)) expected_first[partition] = value;
    }
    std::map<int, int> added;  // value -> times in this run's output
    std::map<int32_t, int> first;  // input partition -> smallest value this run wrote
    for (const KafkaMessage& m : ReadAll(out)) {
      if (m.offset < (*offsets_before)[m.partition]) continue;
      const int value = std::stoi(m.value);
      ++added[value];
      const int32_t p = input_partition[value];
      if (!first.count(p) || value < first[p]) first[p] = value;
    }
    int repeated = 0;
    for (const auto& [value, times] : added) {
      if (times > 1 && ++repeated <= 5) ADD_FAILURE() << "run " << run << " wrote " << value << " " << times << " times";
    }
    std::printf("%s: %zu values added, %d repeated within the run\n", what.c_str(), added.size(), repeated);
    EXPECT_EQ(first, expected_first) << "run " << run << " did not start at S's offsets";
    EXPECT_EQ(static_cast<int>(added.size()), written - static_cast<int>(before_s.size()));
  }
  const std::string logs = cluster_->Logs();
  EXPECT_FALSE(absl::StrContains(logs, "DATA LOSS")) << "see the restore's log lines above";
  EXPECT_TRUE(absl::StrContains(logs, "already committed")) << "see the restore's log lines above";
}

// The JobManager falls back to an older checkpoint. Savepoint
// 1, then a JobManager that kills itself once it wrote checkpoint 4's
// metadata (before anyone hears of 4) takes the job over and restores 1;
// savepoints 2, 3 and 4 follow. Checkpoints 4's and 3's metadata are
// truncated, and the JobManager that comes back restores 2. Everything 3 and
// 4 covered is written again; nothing beyond what the old attempt committed
// appears twice, and there is no DATA LOSS. After the takeover the sink's
// ids go: 2 on id 1, 3 on id 2, 4 on id 0 (the restored id 0 initialized
// again once 2 completed), so at the crash id 1, checkpoint 2's, holds the
// open transaction the cancellation aborts.
TEST_F(KafkaRestoreTest, JobManagerFallbackToAnOlderCheckpoint) {
  const int tm = StartClusterWith({});
  const std::string in = NewTopic("restore-fallback-in"), out = NewTopic("restore-fallback-out");
  SteadyWriter writer(bootstrap_, in);
  const std::string job = StartCopyAndWriter({"-Dstate.checkpoints.num-retained=3"}, in, out, &writer);
  ASSERT_FALSE(job.empty());
  ASSERT_FALSE(Savepoint(job, out).empty());  // 1
  cluster_->RestartJobManager({"-Dtest.fault-injection.point=jobmanager-before-notify",
                               "-Dtest.fault-injection.checkpoint=4"});
  ASSERT_EQ(RunningOrEnded(job, 2), "RUNNING") << RestoreEvidence(cluster_->Logs());
  ASSERT_FALSE(Savepoint(job, out).empty());  // 2
  // Checkpoint 2's completion releases the restored id 0, which the sink
  // initializes again in the background; give it the time it takes (bounded,
  // not asserted: another sink may log otherwise).
  const std::string id0_ready = "-0-0' ready";
  const bool id0_again = WaitFor([&] {
    const std::string log = cluster_->taskmanager(tm).Log();
    size_t count = 0;
    for (size_t at = log.find(id0_ready); at != std::string::npos; at = log.find(id0_ready, at + 1)) ++count;
    return count >= 2;
  }, absl::Seconds(10), absl::Milliseconds(100));
  std::printf("JobManager fallback: id 0 initialized again before checkpoint 3: %s\n", id0_again ? "yes" : "no");
  ASSERT_FALSE(Savepoint(job, out).empty());  // 3
  // 4: the JobManager writes its metadata and dies; the client gets no answer.
  ASSERT_TRUE(OpenTransactionHoldsRecords(out));
  cluster_->Weir({"savepoint", job}, absl::Seconds(60));
  ASSERT_TRUE(WaitFor([&] { return !cluster_->jobmanager().running(); }, absl::Seconds(60)))
      << RestoreEvidence(cluster_->Logs());
  EXPECT_TRUE(absl::StrContains(cluster_->jobmanager().Log(),
                                "FAULT INJECTION: killing this process at 'jobmanager-before-notify', checkpoint 4"));
  // The TaskManager goes on without the JobManager: records flow into the
  // transaction opened after barrier 4, on checkpoint 2's id (bounded, not
  // asserted: what the broker says of an id is no contract of the sink).
  auto client = connectors::kafka_protocol::TransactionClient::Create(bootstrap_);
  ASSERT_TRUE(client.ok()) << client.status();
  const std::string id1 = absl::StrCat("weir-KafkaSink-", out, "-0-1");
  std::string id1_state;
  WaitFor([&] {
    auto described = client->DescribeTransaction(id1);
    id1_state = described.ok() ? described->state : std::string(described.status().message());
    return id1_state == "Ongoing";
  }, absl::Seconds(10), absl::Milliseconds(100));
  std::printf("JobManager fallback: before the JobManager comes back, '%s' is %s\n", id1.c_str(),
              id1_state.c_str());
  for (const int64_t id : {4, 3}) {
    const std::string metadata = absl::StrCat(JobCheckpointDir(job), "/chk-", id, "/_metadata");
    ASSERT_TRUE(std::filesystem::exists(metadata)) << metadata;
    std::filesystem::resize_file(metadata, std::filesystem::file_size(metadata) / 2);
  }
  const std::set<int> committed_before = CommittedNow(out);

  cluster_->RestartJobManager();
  if (!ExpectRestoredJobRuns(job, "JobManager fallback", 3)) return;
  const int written = writer.Stop();
  ASSERT_FALSE(writer.failed());
  const std::string jm_log = cluster_->jobmanager().Log();
  EXPECT_TRUE(absl::StrContains(jm_log, "NOT restoring from checkpoint 4")) << jm_log;
  EXPECT_TRUE(absl::StrContains(jm_log, "NOT restoring from checkpoint 3")) << jm_log;
  EXPECT_TRUE(absl::StrContains(jm_log, "restoring from checkpoint 2 ")) << jm_log;
  // The interval is 5 min: savepoints commit what the restored job wrote,
  // until all of it is there.
  std::vector<KafkaMessage> final;
  const bool complete = WaitFor([&] {
    if (cluster_->WeirJson({"savepoint", job}).is_null()) return false;
    auto read = test::ReadTopic(bootstrap_, out);
    if (!read.ok()) return false;
    final = *std::move(read);
    return static_cast<int>(Values(final).size()) >= written;
  }, absl::Seconds(120), absl::Seconds(1));
  EXPECT_TRUE(complete) << "the output did not reach all " << written << " values";
  ExpectRestoredOutputOnce(committed_before, final, written, out, "JobManager fallback");
  cluster_->Weir({"cancel", job});
}

}  // namespace
}  // namespace weir
