// End-to-end exactly-once on a real cluster against the real Kafka broker:
// kafka_copy with guarantee exactly-once while TaskManagers are killed with
// SIGKILL; a read_committed reader must find every input record in the
// output exactly once, in order per key, and no transaction left open.
#include <algorithm>
#include <atomic>
#include <csignal>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/kafka/cluster_job_test.h"
#include "tests/kafka/kafka_io.h"
#include "tests/kafka/test_kafka.h"
#include "tests/testing/local_cluster.h"

namespace weir {
namespace {

using test::KafkaMessage;
using testing::LocalCluster;
using testing::CheckCountSequences;
using testing::CheckEveryValueOnce;
using testing::CheckOrderPerKey;
using testing::CountSeenTwiceLive;
using testing::CountValues;
using testing::NoTransactionStaysOpen;
using testing::ReadUntil;
using testing::Sequence;
using testing::WaitFor;

const std::string kJobs = WEIR_JOBS_DIR;

class ExactlyOnceTest : public testing::ClusterJobTest {
 protected:
  std::string SubmitCopy(std::vector<std::string> options, const std::string& in, const std::string& out,
                         std::string* error, const std::string& binary = "kafka_copy.so") {
    return cluster_->Submit(kJobs + "/" + binary, options,
                            {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", out, "--guarantee",
                             "exactly-once"},
                            error);
  }
};

// Writes the values 0..records-1 (Sequence) to `in` on a thread, 1000 every
// 100 ms (WriteSlowly); *failed when a write failed. Join the thread.
std::thread WriteSequenceSlowly(const std::string& bootstrap, const std::string& in, int records,
                                std::atomic<bool>* failed) {
  return testing::WriteSlowly(bootstrap, in, records, Sequence, failed);
}

// The proof, in CI: kafka_copy exactly-once at parallelism 2 with
// checkpoints every 300 ms; while records keep arriving, a TaskManager that
// runs tasks is SIGKILLed at a random moment, five times, with a
// replacement started each time, and then the JobManager is SIGKILLed and
// restarted. A read_committed reader running all along never sees a record
// twice; one reading afterwards finds every record exactly once, in order
// per key and per input partition, and the last stable offset of every
// output partition at its end (no transaction left open).
TEST_F(ExactlyOnceTest, CopyIsExactlyOnceAcrossTaskManagerKills) {
  StartCluster(3);
  const std::string in = NewTopic("eo-in"), out = NewTopic("eo-out");
  std::string error;
  const std::string job =
      SubmitCopy({"-p", "2", "-Dexecution.checkpointing.interval=300ms", "-Drestart-strategy.type=fixed-delay",
                  "-Drestart-strategy.fixed-delay.attempts=20", "-Drestart-strategy.fixed-delay.delay=200ms"},
                 in, out, &error);
  ASSERT_FALSE(job.empty()) << error << cluster_->Logs();
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
  // A downstream reader during all of it.
  test::LiveReader live(bootstrap_, out);

  // Records keep arriving throughout, so that the kills land at random
  // points of the transactions' lives (open, pre-committed, being committed).
  constexpr int kRecords = 200000, kKills = 5;
  ASSERT_TRUE(WriteWhileKilling(job, in, kRecords, 2000, kKills, Sequence, /*then_kill_jobmanager=*/true))
      << cluster_->Logs();
  const int produced = kRecords;

  std::vector<KafkaMessage> output;
  const bool complete = ReadUntil(bootstrap_, out, absl::Seconds(180), &output, [&](const auto& read) {
    return static_cast<int>(read.size()) >= produced;
  });
  // No transaction left open: with the input drained, the last stable offset
  // of every output partition reaches its high watermark. Then read again:
  // a duplicate committed after the first full read would show now.
  std::map<int32_t, int64_t> stable, high;
  const bool settled = WaitFor([&] {
    auto committed = test::EndOffsets(bootstrap_, out, /*read_committed=*/true);
    auto uncommitted = test::EndOffsets(bootstrap_, out, /*read_committed=*/false);
    if (!committed.ok() || !uncommitted.ok()) return false;
    stable = *committed;
    high = *uncommitted;
    return stable == high;
  }, absl::Seconds(60), absl::Seconds(1));
  EXPECT_TRUE(settled) << "a transaction is still open on the output";
  if (auto again = test::ReadTopic(bootstrap_, out); again.ok()) {
    output = *std::move(again);
  } else {
    ADD_FAILURE() << again.status();
  }
  absl::SleepFor(absl::Seconds(1));  // the live reader catches up
  const std::vector<KafkaMessage> seen_live = live.Stop();
  EXPECT_EQ(live.error(), "");

  int missing = 0, duplicated = 0;
  ASSERT_NO_FATAL_FAILURE(CheckEveryValueOnce(output, produced, &missing, &duplicated));
  const std::string logs = cluster_->Logs();
  int recovery_commits = 0;
  for (size_t at = logs.find("of restored checkpoint"); at != std::string::npos;
       at = logs.find("of restored checkpoint", at + 1)) {
    ++recovery_commits;
  }
  std::printf("exactly-once copy: %d records in, %zu read_committed out, %d missing, %d duplicated, %d kills, "
              "%d pre-committed transactions committed at recovery\n",
              produced, output.size(), missing, duplicated, kKills, recovery_commits);
  EXPECT_TRUE(complete) << "the output did not reach " << produced << " records\n" << cluster_->Logs();
  EXPECT_EQ(missing, 0);
  EXPECT_EQ(duplicated, 0);
  EXPECT_EQ(static_cast<int>(output.size()), produced);

  // In order per key: within a key's output partition, values only grow.
  int out_of_order = 0;
  ASSERT_NO_FATAL_FAILURE(CheckOrderPerKey(&output, &out_of_order));
  EXPECT_EQ(out_of_order, 0);

  // In order per input partition: within each output partition, the records
  // of one input partition (where the writer put them in increasing order)
  // only grow.
  auto input = test::ReadTopic(bootstrap_, in);
  ASSERT_TRUE(input.ok()) << input.status();
  std::map<int, int32_t> input_partition;  // value -> input partition
  for (const KafkaMessage& m : *input) input_partition[std::stoi(m.value)] = m.partition;
  std::map<std::pair<int32_t, int32_t>, int> last_by_partitions;  // (in, out) -> last value
  int out_of_partition_order = 0;
  for (const KafkaMessage& m : output) {
    const int value = std::stoi(m.value);
    auto [it, first] = last_by_partitions.emplace(std::make_pair(input_partition[value], m.partition), value);
    if (!first) {
      if (value <= it->second && ++out_of_partition_order <= 5) {
        ADD_FAILURE() << "input partition " << it->first.first << ", output partition " << m.partition << ": "
                      << value << " after " << it->second;
      }
      it->second = value;
    }
  }
  EXPECT_EQ(out_of_partition_order, 0);

  // The reader that ran during the faults: never a record twice, and by now
  // every record.
  const std::map<int, int> live_counts = CountValues(seen_live);
  const int live_duplicated = CountSeenTwiceLive(live_counts);
  std::printf("exactly-once copy: the reader during the faults saw %zu records, %d duplicated\n", seen_live.size(),
              live_duplicated);
  EXPECT_EQ(live_duplicated, 0);
  EXPECT_EQ(static_cast<int>(live_counts.size()), produced);

  nlohmann::json status = cluster_->WeirJson({"status", job});
  EXPECT_GE(status["attempt"].get<int>(), kKills + 2) << status.dump(2);
  EXPECT_TRUE(absl::StrContains(logs, "taken over from the previous JobManager")) << logs;
  EXPECT_FALSE(absl::StrContains(logs, "DATA LOSS")) << logs;
  ASSERT_EQ(cluster_->Weir({"cancel", job}).exit_code, 0);
}

// The copy's output read back: every value of 0..records-1 exactly once?
// Prints and checks it; `what` names the scenario.
void ExpectEveryRecordOnce(const std::string& bootstrap, const std::string& out, int records, const std::string& what,
                           const std::string& logs) {
  std::vector<KafkaMessage> output;
  const bool complete = ReadUntil(bootstrap, out, absl::Seconds(120), &output, [&](const auto& read) {
    return static_cast<int>(read.size()) >= records;
  });
  const std::map<int, int> seen = CountValues(output);
  int missing = 0, duplicated = 0;
  for (int i = 0; i < records; ++i) {
    auto it = seen.find(i);
    if (it == seen.end()) ++missing;
    else if (it->second > 1) ++duplicated;
  }
  std::printf("exactly-once copy, %s: %d records in, %zu read_committed out, %d missing, %d duplicated\n",
              what.c_str(), records, output.size(), missing, duplicated);
  EXPECT_TRUE(complete) << what << "\n" << logs;
  EXPECT_EQ(missing, 0) << what;
  EXPECT_EQ(duplicated, 0) << what;
}

// Each step of the two-phase commit, crashed on purpose in the real
// daemons (test.fault-injection.point): a TaskManager right after its sink
// pre-committed for a barrier; a TaskManager told that a checkpoint
// completed, before its sink commits; the JobManager after writing a
// checkpoint's metadata, before it tells anyone. Every record ends up in
// the output exactly once each time.
TEST_F(ExactlyOnceTest, CrashesAtEachStepOfTheCommitLoseAndRepeatNothing) {
  for (const std::string point : {"taskmanager-after-pre-commit", "taskmanager-before-commit",
                                  "jobmanager-before-notify"}) {
    SCOPED_TRACE(point);
    const bool on_jobmanager = point == "jobmanager-before-notify";
    cluster_ = std::make_unique<LocalCluster>(LocalCluster::Options{1, 1, {}, ""});
    cluster_->Start();
    const std::vector<std::string> fault = {"-Dtest.fault-injection.point=" + point,
                                            "-Dtest.fault-injection.checkpoint=4"};
    const int faulty = on_jobmanager ? -1 : cluster_->StartTaskManager(fault);
    if (!on_jobmanager) cluster_->StartTaskManager();  // the replacement, waiting as a spare
    ASSERT_TRUE(WaitFor([&] {
      nlohmann::json c = cluster_->WeirJson({"cluster"});
      return !c.is_null() && c["taskmanagers"].size() == (on_jobmanager ? 1u : 3u);
    }, absl::Seconds(60))) << cluster_->Logs();
    const std::string in = NewTopic("eo-fault-in"), out = NewTopic("eo-fault-out");
    std::string error;
    const std::string job = SubmitCopy(
        {"-p", on_jobmanager ? "1" : "2", "-Dexecution.checkpointing.interval=300ms",
         "-Drestart-strategy.type=fixed-delay", "-Drestart-strategy.fixed-delay.attempts=20",
         "-Drestart-strategy.fixed-delay.delay=200ms"},
        in, out, &error);
    ASSERT_FALSE(job.empty()) << error << cluster_->Logs();
    ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
    if (on_jobmanager) {
      // The next JobManager kills itself once it completed a checkpoint of
      // the job it took over; the one after it recovers the job again.
      cluster_->RestartJobManager(fault);
    }
    constexpr int kRecords = 30000;
    std::atomic<bool> writer_failed{false};
    std::thread writer = WriteSequenceSlowly(bootstrap_, in, kRecords, &writer_failed);
    // Wait for the injected crash.
    const bool crashed = WaitFor([&] {
      if (on_jobmanager) return !cluster_->jobmanager().running();
      return !cluster_->taskmanager(faulty).running();
    }, absl::Seconds(60));
    const std::string fault_log = on_jobmanager ? cluster_->jobmanager().Log() : cluster_->taskmanager(faulty).Log();
    if (crashed && on_jobmanager) cluster_->RestartJobManager();
    writer.join();
    ASSERT_TRUE(crashed) << "the fault did not fire\n" << cluster_->Logs();
    ASSERT_FALSE(writer_failed.load());
    EXPECT_TRUE(absl::StrContains(fault_log, "FAULT INJECTION: killing this process at '" + point + "'")) << fault_log;
    ExpectEveryRecordOnce(bootstrap_, out, kRecords, point, cluster_->Logs());
    const std::string logs = cluster_->Logs();
    EXPECT_FALSE(absl::StrContains(logs, "DATA LOSS")) << logs;
    cluster_->Weir({"cancel", job});
    cluster_.reset();
  }
}

// Zombies: a TaskManager running the job is frozen (SIGSTOP) with open and
// pre-committed transactions until the JobManager declares it lost and the
// job fails over to a spare, and only then thawed (SIGCONT); then the
// JobManager is frozen past the TaskManagers' heartbeat timeout and thawed.
// What the zombie writes once thawed must never become visible to a
// read_committed reader (the new attempt's producers took its transactional
// ids over with a newer epoch, and no checkpoint of its attempt completes
// any more): every record exactly once, no transaction left open.
TEST_F(ExactlyOnceTest, FrozenAndThawedProcessesWriteNothingVisible) {
  cluster_ = std::make_unique<LocalCluster>(
      LocalCluster::Options{3, 1, {"-Dheartbeat.interval=500ms", "-Dheartbeat.timeout=3s"}, ""});
  cluster_->Start();
  const std::string in = NewTopic("eo-zombie-in"), out = NewTopic("eo-zombie-out");
  std::string error;
  const std::string job = SubmitCopy({"-p", "2", "-Dexecution.checkpointing.interval=300ms",
                                      "-Drestart-strategy.type=fixed-delay", "-Drestart-strategy.fixed-delay.attempts=20",
                                      "-Drestart-strategy.fixed-delay.delay=200ms"},
                                     in, out, &error);
  ASSERT_FALSE(job.empty()) << error << cluster_->Logs();
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
  constexpr int kRecords = 30000;
  std::atomic<bool> writer_failed{false};
  std::thread writer = WriteSequenceSlowly(bootstrap_, in, kRecords, &writer_failed);
  struct Join {
    std::thread* t;
    ~Join() {
      if (t->joinable()) t->join();
    }
  } join{&writer};

  // The TaskManager zombie.
  ASSERT_TRUE(WaitForCompletedCheckpoint(job, 1)) << cluster_->Logs();
  std::mt19937 random(std::random_device{}());
  const int frozen = BusyTaskManager(job, random);
  cluster_->taskmanager(frozen).Signal(SIGSTOP);
  // The spare takes its place: attempt 2 runs and completes a checkpoint
  // while the zombie still holds its transactions.
  ASSERT_TRUE(WaitUntilRunning(job, 2)) << cluster_->Logs();
  ASSERT_TRUE(WaitForCompletedCheckpoint(job, 2)) << cluster_->Logs();
  cluster_->taskmanager(frozen).Signal(SIGCONT);

  // The JobManager zombie: frozen until every TaskManager gave up on it.
  const int attempt = cluster_->WeirJson({"status", job})["attempt"].get<int>();
  ASSERT_TRUE(WaitForCompletedCheckpoint(job, attempt)) << cluster_->Logs();
  cluster_->jobmanager().Signal(SIGSTOP);
  const bool given_up = WaitFor([&] {
    for (int i = 0; i < 3; ++i) {
      if (i != frozen && !absl::StrContains(cluster_->taskmanager(i).Log(), "no heartbeat acknowledgement")) {
        return false;
      }
    }
    return true;
  }, absl::Seconds(60), absl::Milliseconds(100));
  cluster_->jobmanager().Signal(SIGCONT);
  ASSERT_TRUE(given_up) << cluster_->Logs();

  writer.join();
  ASSERT_FALSE(writer_failed.load());
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
  ExpectEveryRecordOnce(bootstrap_, out, kRecords, "a TaskManager and then the JobManager frozen and thawed",
                        cluster_->Logs());
  EXPECT_TRUE(NoTransactionStaysOpen(bootstrap_, out, absl::Seconds(30), absl::Milliseconds(200)))
      << "a transaction is still open on the output";
  const std::string logs = cluster_->Logs();
  EXPECT_FALSE(absl::StrContains(logs, "DATA LOSS")) << logs;
  std::printf("zombies: %d records, TaskManager tm-%d frozen and thawed after the failover, the JobManager frozen "
              "past the heartbeat timeout; the job ended at attempt %d\n",
              kRecords, frozen, cluster_->WeirJson({"status", job})["attempt"].get<int>());
  cluster_->Weir({"cancel", job});
}

// What the committed files of kafka_to_files (names not starting with '.')
// hold: value -> times, and how many lines and files.
struct CommittedFiles {
  std::map<int, int> seen;
  int lines = 0, files = 0;
};
CommittedFiles ReadCommittedFiles(const std::string& directory) {
  CommittedFiles out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(directory, ec)) {
    if (entry.path().filename().string()[0] == '.') continue;
    ++out.files;
    std::ifstream file(entry.path());
    for (std::string line; std::getline(file, line);) {
      ++out.lines;
      int value = -1;
      const size_t last_space = line.rfind(' ');
      EXPECT_TRUE(last_space != std::string::npos && absl::SimpleAtoi(line.substr(last_space + 1), &value)) << line;
      ++out.seen[value];
    }
  }
  return out;
}

// The two-phase-commit API beyond Kafka: kafka_to_files writes through the
// exactly-once file sink (weir/file.h), and a TaskManager crashes (fault
// injection, SIGKILL) right after its sink pre-committed a file for a
// barrier, and, in a second run, right after a checkpoint completed but
// before its sink committed. A spare takes over each time; the committed
// files then hold every input record exactly once — a file made visible
// before its checkpoint completed would repeat records, one not committed
// at recovery would lose them.
TEST_F(ExactlyOnceTest, FileSinkIsExactlyOnceThroughCrashesAtEachStepOfTheCommit) {
  for (const std::string point : {"taskmanager-after-pre-commit", "taskmanager-before-commit"}) {
    SCOPED_TRACE(point);
    cluster_ = std::make_unique<LocalCluster>(LocalCluster::Options{1, 1, {}, ""});
    cluster_->Start();
    const int faulty = cluster_->StartTaskManager(
        {"-Dtest.fault-injection.point=" + point, "-Dtest.fault-injection.checkpoint=4"});
    cluster_->StartTaskManager();  // the spare
    ASSERT_TRUE(WaitFor([&] {
      nlohmann::json c = cluster_->WeirJson({"cluster"});
      return !c.is_null() && c["taskmanagers"].size() == 3u;
    }, absl::Seconds(60))) << cluster_->Logs();
    const std::string in = NewTopic("eo-files-in");
    const std::string directory = cluster_->dir() + "/files-out";
    std::string error;
    // Without checkpoints nothing would ever commit: refused.
    EXPECT_TRUE(cluster_
                    ->Submit(kJobs + "/kafka_to_files.so", {"-p", "1"},
                             {"--brokers", bootstrap_, "--input-topic", in, "--directory", directory}, &error)
                    .empty());
    EXPECT_TRUE(absl::StrContains(error, "'Files' writes exactly-once")) << error;
    const std::string job = cluster_->Submit(
        kJobs + "/kafka_to_files.so",
        {"-p", "2", "-Dexecution.checkpointing.interval=300ms", "-Drestart-strategy.type=fixed-delay",
         "-Drestart-strategy.fixed-delay.attempts=20", "-Drestart-strategy.fixed-delay.delay=200ms"},
        {"--brokers", bootstrap_, "--input-topic", in, "--directory", directory}, &error);
    ASSERT_FALSE(job.empty()) << error << cluster_->Logs();
    ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
    constexpr int kRecords = 30000;
    std::atomic<bool> writer_failed{false};
    std::thread writer = WriteSequenceSlowly(bootstrap_, in, kRecords, &writer_failed);
    const bool crashed = WaitFor([&] { return !cluster_->taskmanager(faulty).running(); }, absl::Seconds(60));
    writer.join();
    ASSERT_TRUE(crashed) << "the fault did not fire\n" << cluster_->Logs();
    ASSERT_FALSE(writer_failed.load());

    CommittedFiles files;
    const bool complete = WaitFor([&] {
      files = ReadCommittedFiles(directory);
      return files.lines >= kRecords;
    }, absl::Seconds(120), absl::Seconds(1));
    // Two more checkpoints: nothing else may appear.
    int64_t newest = 0;
    const nlohmann::json checkpoints = cluster_->WeirJson({"checkpoints", job});
    for (const auto& cp : checkpoints["checkpoints"]) newest = std::max(newest, cp["id"].get<int64_t>());
    EXPECT_TRUE(WaitForCompletedCheckpoint(job, 1, newest + 1)) << cluster_->Logs();
    files = ReadCommittedFiles(directory);
    int missing = 0, duplicated = 0;
    for (int i = 0; i < kRecords; ++i) {
      auto it = files.seen.find(i);
      if (it == files.seen.end()) {
        if (++missing <= 5) ADD_FAILURE() << "record " << i << " is missing";
      } else if (it->second > 1) {
        if (++duplicated <= 5) ADD_FAILURE() << "record " << i << " is there " << it->second << " times";
      }
    }
    std::printf("exactly-once files, %s: %d records in, %d lines in %d committed files, %d missing, "
                "%d duplicated\n",
                point.c_str(), kRecords, files.lines, files.files, missing, duplicated);
    EXPECT_TRUE(complete) << cluster_->Logs();
    EXPECT_EQ(missing, 0);
    EXPECT_EQ(duplicated, 0);
    EXPECT_EQ(files.lines, kRecords);
    cluster_->Weir({"cancel", job});
    cluster_.reset();
  }
}

// Threads and open file descriptors of a process (Linux /proc).
int CountEntries(const std::string& dir) {
  int n = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) ++n;
  return n;
}

// Producers are closed on every path: flaky_copy (exactly-once sink, a map
// that fails every attempt after a while) goes through nine attempts on the
// same two TaskManagers, each opening its transactional producers, source
// consumer and commit connections. Once the job has failed for good, each
// TaskManager has as many threads and file descriptors as after a first,
// single failed attempt (a few of slack for gRPC's own pools): a producer
// left behind per attempt would leave several librdkafka threads and
// sockets each time.
TEST_F(ExactlyOnceTest, NothingLeaksAcrossManyRestarts) {
  StartCluster(2);
  const std::string in = NewTopic("leak-in"), out = NewTopic("leak-out");
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int first = 0; !stop; first += 500) {
      (void)test::ProduceMessages(bootstrap_, in, Sequence(first, 500));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  auto run = [&](int restarts) {
    std::string error;
    const std::string job = cluster_->Submit(
        kJobs + "/test/flaky_copy.so",
        {"-p", "2", "-Dexecution.checkpointing.interval=300ms", "-Drestart-strategy.type=fixed-delay",
         absl::StrCat("-Drestart-strategy.fixed-delay.attempts=", restarts),
         "-Drestart-strategy.fixed-delay.delay=100ms"},
        {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", out, "--fail-after-ms", "700"}, &error);
    EXPECT_FALSE(job.empty()) << error << cluster_->Logs();
    if (job.empty()) return nlohmann::json();
    return cluster_->WaitForJobEnd(job, absl::Seconds(180));
  };
  auto usage = [&](int tm) {
    const std::string proc = absl::StrCat("/proc/", cluster_->taskmanager(tm).pid());
    return std::make_pair(CountEntries(proc + "/task"), CountEntries(proc + "/fd"));
  };
  // After its tasks are gone (the TaskManager reaps them within a second or
  // two), each TaskManager at most `slack` above `base`.
  auto settled_at = [&](const std::vector<std::pair<int, int>>& base, int slack) {
    std::vector<std::pair<int, int>> now(2);
    const bool settled = WaitFor([&] {
      for (int tm = 0; tm < 2; ++tm) now[tm] = usage(tm);
      for (int tm = 0; tm < 2; ++tm) {
        if (now[tm].first > base[tm].first + slack || now[tm].second > base[tm].second + slack) return false;
      }
      return true;
    }, absl::Seconds(30), absl::Milliseconds(500));
    return std::make_pair(settled, now);
  };

  nlohmann::json warm = run(0);  // one attempt: every pool and cache warmed up
  ASSERT_EQ(warm["state"], "FAILED") << warm.dump(2) << cluster_->Logs();
  absl::SleepFor(absl::Seconds(3));
  std::vector<std::pair<int, int>> base = {usage(0), usage(1)};
  nlohmann::json status = run(8);
  stop = true;
  writer.join();
  ASSERT_EQ(status["state"], "FAILED") << status.dump(2);
  EXPECT_EQ(status["restarts"].get<int>(), 8) << status.dump(2);
  EXPECT_TRUE(absl::StrContains(status["error"].get<std::string>(), "failing this attempt on purpose"));
  const auto [settled, after] = settled_at(base, 4);
  for (int tm = 0; tm < 2; ++tm) {
    std::printf("TaskManager %d after 1 attempt: %d threads, %d fds; after 9 more: %d threads, %d fds\n", tm,
                base[tm].first, base[tm].second, after[tm].first, after[tm].second);
  }
  EXPECT_TRUE(settled) << "threads or file descriptors grew across the attempts";
}

// At-least-once under the same kills (five TaskManagers, then the
// JobManager): nothing is lost; the
// duplicates it may write are counted and printed.
TEST_F(ExactlyOnceTest, AtLeastOnceLosesNothingAcrossTaskManagerKills) {
  StartCluster(3);
  const std::string in = NewTopic("alo-in"), out = NewTopic("alo-out");
  std::string error;
  const std::string job = cluster_->Submit(
      kJobs + "/kafka_copy.so",
      {"-p", "2", "-Dexecution.checkpointing.interval=300ms", "-Drestart-strategy.type=fixed-delay",
       "-Drestart-strategy.fixed-delay.attempts=20", "-Drestart-strategy.fixed-delay.delay=200ms"},
      {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", out, "--guarantee", "at-least-once"}, &error);
  ASSERT_FALSE(job.empty()) << error << cluster_->Logs();
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
  constexpr int kRecords = 100000, kKills = 5;
  ASSERT_TRUE(WriteWhileKilling(job, in, kRecords, 2000, kKills, Sequence, /*then_kill_jobmanager=*/true))
      << cluster_->Logs();
  std::vector<KafkaMessage> output;
  std::map<int, int> seen;
  const bool complete = ReadUntil(bootstrap_, out, absl::Seconds(120), &output, [&](const auto& read) {
    seen = CountValues(read);
    return static_cast<int>(seen.size()) >= kRecords;
  });
  int missing = 0;
  for (int i = 0; i < kRecords; ++i) missing += seen.count(i) == 0 ? 1 : 0;
  std::printf("at-least-once copy: %d records in, %zu out, %d missing, %zu duplicates, %d kills\n", kRecords,
              output.size(), missing, output.size() - seen.size(), kKills);
  EXPECT_TRUE(complete) << cluster_->Logs();
  EXPECT_EQ(missing, 0);
  ASSERT_EQ(cluster_->Weir({"cancel", job}).exit_code, 0);
}

// At-most-once under the same kills: nothing is written twice
// (sources resume from the newest position reached, not from the
// checkpoint; the sink never retries); the losses are counted and printed.
TEST_F(ExactlyOnceTest, AtMostOnceWritesNothingTwiceAcrossTaskManagerKills) {
  StartCluster(3);
  const std::string in = NewTopic("amo-in"), out = NewTopic("amo-out");
  std::string error;
  const std::string job = cluster_->Submit(
      kJobs + "/kafka_copy.so",
      {"-p", "2", "-Dexecution.checkpointing.interval=300ms", "-Drestart-strategy.type=fixed-delay",
       "-Drestart-strategy.fixed-delay.attempts=20", "-Drestart-strategy.fixed-delay.delay=200ms"},
      {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", out, "--guarantee", "at-most-once"}, &error);
  ASSERT_FALSE(job.empty()) << error << cluster_->Logs();
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
  constexpr int kRecords = 100000, kKills = 5;
  ASSERT_TRUE(WriteWhileKilling(job, in, kRecords, 2000, kKills, Sequence, /*then_kill_jobmanager=*/true))
      << cluster_->Logs();
  // Everything the last attempt reads is written: wait until the output
  // stops growing.
  std::vector<KafkaMessage> output;
  size_t last_size = 0;
  int stable_rounds = 0;
  ReadUntil(bootstrap_, out, absl::Seconds(120), &output, [&](const auto& read) {
    stable_rounds = read.size() == last_size ? stable_rounds + 1 : 0;
    last_size = read.size();
    return stable_rounds >= 3;
  });
  const std::map<int, int> seen = CountValues(output);
  int duplicated = 0;
  for (const auto& [value, times] : seen) duplicated += times > 1 ? 1 : 0;
  std::printf("at-most-once copy: %d records in, %zu out, %d duplicated, %zu lost, %d kills\n", kRecords,
              output.size(), duplicated, kRecords - seen.size(), kKills);
  EXPECT_EQ(duplicated, 0);
  // Every output record is one of the input's (nothing invented or mangled).
  int foreign = 0;
  for (const KafkaMessage& m : output) {
    int value = -1;
    if (!absl::SimpleAtoi(m.value, &value) || value < 0 || value >= kRecords) ++foreign;
  }
  EXPECT_EQ(foreign, 0);
  EXPECT_GT(seen.size(), 0u);
  ASSERT_EQ(cluster_->Weir({"cancel", job}).exit_code, 0);
}

// keyed_count exactly-once under the same faults: for every key the
// committed outputs are exactly 1, 2, ..., n, in order — state and output
// both exactly-once.
TEST_F(ExactlyOnceTest, KeyedCountIsExactlyOnceAcrossTaskManagerKills) {
  StartCluster(3);
  const std::string in = NewTopic("eo-count-in"), out = NewTopic("eo-count-out");
  std::string error;
  const std::string job =
      SubmitCopy({"-p", "2", "-Dexecution.checkpointing.interval=300ms", "-Drestart-strategy.type=fixed-delay",
                  "-Drestart-strategy.fixed-delay.attempts=20", "-Drestart-strategy.fixed-delay.delay=200ms"},
                 in, out, &error, "keyed_count.so");
  ASSERT_FALSE(job.empty()) << error << cluster_->Logs();
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
  constexpr int kRecords = 60000, kDistinct = 300, kKills = 5;
  std::map<std::string, int> truth;
  for (int i = 0; i < kRecords; ++i) ++truth[absl::StrCat("w", i % kDistinct)];
  ASSERT_TRUE(WriteWhileKilling(job, in, kRecords, 1000, kKills, [](int first, int n) {
    std::vector<KafkaMessage> batch;
    for (int i = first; i < first + n; ++i) batch.push_back({absl::StrCat("id-", i), absl::StrCat("w", i % kDistinct)});
    return batch;
  }, /*then_kill_jobmanager=*/true)) << cluster_->Logs();

  std::vector<KafkaMessage> output;
  const bool complete = ReadUntil(bootstrap_, out, absl::Seconds(180), &output, [&](const auto& read) {
    return static_cast<int>(read.size()) >= kRecords;
  });
  std::map<std::string, int> last;
  int out_of_sequence = 0;
  ASSERT_NO_FATAL_FAILURE(CheckCountSequences(&output, &last, &out_of_sequence));
  std::printf("exactly-once keyed_count: %d records in, %zu read_committed out, %d counts out of sequence, %d kills\n",
              kRecords, output.size(), out_of_sequence, kKills);
  EXPECT_TRUE(complete) << cluster_->Logs();
  EXPECT_EQ(out_of_sequence, 0);
  EXPECT_EQ(static_cast<int>(output.size()), kRecords);
  std::map<std::string, int> final_counts(last.begin(), last.end());
  EXPECT_EQ(final_counts, truth);
  EXPECT_GE(cluster_->WeirJson({"status", job})["attempt"].get<int>(), kKills + 2);
  ASSERT_EQ(cluster_->Weir({"cancel", job}).exit_code, 0);
}

// Event-time windows through failures: windowed_count (tumbling 1 s windows
// of the event time each value carries, 100 ms out-of-orderness) while
// TaskManagers and then the JobManager are SIGKILLed with records flowing.
// Every (key, window) result is in the read_committed output exactly once,
// equal to what one pass over the input computes.
TEST_F(ExactlyOnceTest, WindowedCountIsExactlyOnceAcrossKills) {
  StartCluster(3);
  const std::string in = NewTopic("eo-window-in"), out = NewTopic("eo-window-out"), late = NewTopic("eo-window-late");
  std::string error;
  const std::string job = cluster_->Submit(
      kJobs + "/windowed_count.so",
      {"-p", "2", "-Dexecution.checkpointing.interval=300ms", "-Drestart-strategy.type=fixed-delay",
       "-Drestart-strategy.fixed-delay.attempts=20", "-Drestart-strategy.fixed-delay.delay=200ms"},
      {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", out, "--window-ms", "1000",
       "--out-of-orderness-ms", "100", "--event-time", "value", "--late-topic", late},
      &error);
  ASSERT_FALSE(job.empty()) << error << cluster_->Logs();
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();

  // Record i: key k<i % 50>, event time base + 2i, up to 12 ms out of order
  // within its partition. 120 s of event time: 120 windows per key.
  constexpr int kRecords = 60000, kWindowKeys = 50, kKills = 4;
  const int64_t base = (absl::ToUnixMillis(absl::Now()) - 3 * 3600 * 1000) / 1000 * 1000;
  auto time_of = [base](int i) { return base + 2 * int64_t{i} - (i % 5) * 3; };
  std::map<std::string, int> truth;  // "<key>@<window start>" -> count
  for (int i = 0; i < kRecords; ++i) {
    const int64_t t = time_of(i);
    ++truth[absl::StrCat("k", i % kWindowKeys, "@", t - t % 1000)];
  }
  ASSERT_TRUE(WriteWhileKilling(job, in, kRecords, 1000, kKills, [&](int first, int n) {
    std::vector<KafkaMessage> batch;
    for (int i = first; i < first + n; ++i) batch.push_back({absl::StrCat("k", i % kWindowKeys), absl::StrCat(time_of(i))});
    return batch;
  }, /*then_kill_jobmanager=*/true)) << cluster_->Logs();
  // Event time moves past every window once each partition has a later
  // record: one per partition, whose own window never closes.
  std::vector<KafkaMessage> ends;
  for (int32_t p = 0; p < 4; ++p) ends.push_back({"end", absl::StrCat(base + 600 * 1000), p});
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, ends).ok());
  // Then records for windows long closed: late, to the late-records topic.
  constexpr int kLate = 500;
  std::vector<KafkaMessage> late_records;
  for (int i = 0; i < kLate; ++i) late_records.push_back({absl::StrCat("late-", i), absl::StrCat(base + i)});
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, late_records).ok());

  std::vector<KafkaMessage> output;
  const bool complete = ReadUntil(bootstrap_, out, absl::Seconds(180), &output, [&](const auto& read) {
    return read.size() >= truth.size();
  });
  // Nothing more may come: every transaction closed, then read again.
  const bool settled = NoTransactionStaysOpen(bootstrap_, out, absl::Seconds(60), absl::Seconds(1));
  EXPECT_TRUE(settled) << "a transaction is still open on the output";
  if (auto again = test::ReadTopic(bootstrap_, out); again.ok()) output = *std::move(again);

  std::map<std::string, int> results;
  int duplicated = 0, wrong = 0;
  for (const KafkaMessage& m : output) {
    ASSERT_TRUE(m.key.has_value());
    int count = 0;
    ASSERT_TRUE(absl::SimpleAtoi(m.value, &count)) << m.value;
    if (!results.emplace(*m.key, count).second && ++duplicated <= 5) ADD_FAILURE() << *m.key << " is there twice";
    auto it = truth.find(*m.key);
    if (it == truth.end()) {
      if (++wrong <= 5) ADD_FAILURE() << "unexpected window " << *m.key << " = " << count;
    } else if (it->second != count && ++wrong <= 5) {
      ADD_FAILURE() << *m.key << " = " << count << ", one pass says " << it->second;
    }
  }
  int missing = 0;
  for (const auto& [window, count] : truth) {
    if (!results.contains(window) && ++missing <= 5) ADD_FAILURE() << "window " << window << " is missing";
  }
  // Each late record once in the late topic, as it was written.
  std::vector<KafkaMessage> late_output;
  ReadUntil(bootstrap_, late, absl::Seconds(60), &late_output, [&](const auto& read) {
    return static_cast<int>(read.size()) >= kLate;
  });
  std::map<std::string, int> late_seen;
  for (const KafkaMessage& m : late_output) ++late_seen[m.key.value_or("") + "=" + m.value];
  int late_wrong = 0;
  for (int i = 0; i < kLate; ++i) {
    const int times = late_seen[absl::StrCat("late-", i, "=", base + i)];
    if (times != 1 && ++late_wrong <= 5) ADD_FAILURE() << "late record " << i << " is in the late topic " << times << " times";
  }
  EXPECT_EQ(late_output.size(), static_cast<size_t>(kLate));
  EXPECT_EQ(late_wrong, 0);
  std::printf("exactly-once windowed_count: %d records in, %zu windows expected, %zu results read_committed, "
              "%d missing, %d duplicated, %d wrong, %d kills and the JobManager; %zu of %d late records in the late "
              "topic\n",
              kRecords, truth.size(), output.size(), missing, duplicated, wrong, kKills, late_output.size(), kLate);
  EXPECT_TRUE(complete) << cluster_->Logs();
  EXPECT_EQ(missing, 0);
  EXPECT_EQ(duplicated, 0);
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(results.size(), truth.size());
  EXPECT_GE(cluster_->WeirJson({"status", job})["attempt"].get<int>(), kKills + 2);
  ASSERT_EQ(cluster_->Weir({"cancel", job}).exit_code, 0);
}

// A bounded input ends with a final checkpoint. One subtask reaches the end
// of its (small) partition long before the other; its end asks for a
// checkpoint at once (the interval is two minutes), which commits what it
// wrote. The other subtask's TaskManager is SIGKILLed after that, the job
// restarts from that checkpoint: the ended subtask reads nothing again, the
// other goes on from its offsets. Every record is in the output once, and
// the job ends FINISHED after its final checkpoint.
TEST_F(ExactlyOnceTest, BoundedInputEndsWithAFinalCheckpoint) {
  StartCluster(3);
  const std::string in = NewTopic("eo-bounded-in", 2), out = NewTopic("eo-bounded-out");
  std::vector<KafkaMessage> input;
  constexpr int kSmall = 20, kLarge = 2000;
  for (int i = 0; i < kSmall + kLarge; ++i) {
    input.push_back({.key = absl::StrCat("k", i), .value = absl::StrCat(i), .partition = i < kSmall ? 0 : 1});
  }
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, input).ok());
  std::string error;
  const std::string job = cluster_->Submit(
      kJobs + "/test/slow_copy.so",
      {"-p", "2", "-Dexecution.checkpointing.interval=2min", "-Drestart-strategy.type=fixed-delay",
       "-Drestart-strategy.fixed-delay.attempts=5", "-Drestart-strategy.fixed-delay.delay=200ms"},
      {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", out, "--sleep-us", "2000"}, &error);
  ASSERT_FALSE(job.empty()) << error << cluster_->Logs();

  // The subtask of the small partition reaches its end and waits.
  std::string ended_task;
  ASSERT_TRUE(WaitFor([&] {
    const std::string logs = cluster_->Logs();
    const size_t at = logs.find(" reached the end of its input");
    if (at == std::string::npos) return false;
    const size_t task = logs.rfind("task ", at);
    ended_task = logs.substr(task + 5, logs.find(' ', task + 5) - task - 5);
    return true;
  }, absl::Seconds(60), absl::Milliseconds(50))) << cluster_->Logs();
  nlohmann::json status = cluster_->WeirJson({"status", job});
  std::string busy_taskmanager;
  for (const auto& t : status["tasks"]) {
    if (t["task_id"] != ended_task) busy_taskmanager = t["taskmanager_id"];
  }
  ASSERT_FALSE(busy_taskmanager.empty()) << ended_task << "\n" << status.dump(2);
  int index = -1;
  ASSERT_TRUE(absl::SimpleAtoi(busy_taskmanager.substr(3), &index)) << busy_taskmanager;  // "tm-<i>"
  cluster_->KillTaskManager(index);
  cluster_->StartTaskManager();

  status = cluster_->WaitForJobEnd(job, absl::Seconds(120));
  ASSERT_EQ(status["state"], "FINISHED") << status.dump(2) << cluster_->Logs();
  EXPECT_GE(status["attempt"].get<int>(), 2) << status.dump(2);
  const std::string logs = cluster_->Logs();
  EXPECT_TRUE(absl::StrContains(logs, "reached the end of its input; triggering a checkpoint soon")) << logs;
  ExpectEveryRecordOnce(bootstrap_, out, kSmall + kLarge, "bounded input, a kill after one subtask ended", logs);
  EXPECT_TRUE(NoTransactionStaysOpen(bootstrap_, out, absl::Seconds(30), absl::Milliseconds(200)))
      << "a transaction is still open on the output";
}

// Sources that end apart (one subtask has no partition at all, one a few
// records, one the rest) with checkpoints every 500 ms: checkpoints go on
// after the first subtasks finished and record them as finished; a kill of
// the busy one then restores the finished ones as finished (they read
// nothing again); the job ends, every record once, no transaction left
// open. Before, the first finished subtask stopped every later checkpoint
// and the job never ended.
TEST_F(ExactlyOnceTest, BoundedSourcesEndingApartFinishExactlyOnceAcrossAKill) {
  StartCluster(3);
  const std::string in = NewTopic("eo-apart-in", 2), out = NewTopic("eo-apart-out");
  std::vector<KafkaMessage> input;
  constexpr int kSmall = 20, kLarge = 4000;
  for (int i = 0; i < kSmall + kLarge; ++i) {
    input.push_back({.key = absl::StrCat("k", i), .value = absl::StrCat(i), .partition = i < kSmall ? 0 : 1});
  }
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, input).ok());
  std::string error;
  const std::string job = cluster_->Submit(
      kJobs + "/test/slow_copy.so",
      {"-p", "3", "-Dexecution.checkpointing.interval=500ms", "-Drestart-strategy.type=fixed-delay",
       "-Drestart-strategy.fixed-delay.attempts=5", "-Drestart-strategy.fixed-delay.delay=200ms"},
      {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", out, "--sleep-us", "3000"}, &error);
  ASSERT_FALSE(job.empty()) << error << cluster_->Logs();

  // Two subtasks finished while the third still reads, and two more
  // checkpoints completed since (so one was triggered after they finished).
  auto completed = [&] {
    const std::string logs = cluster_->Logs();
    int n = 0;
    for (size_t at = logs.find(" completed: "); at != std::string::npos; at = logs.find(" completed: ", at + 1)) ++n;
    return n;
  };
  std::string busy_taskmanager;
  int completed_then = -1;
  ASSERT_TRUE(WaitFor([&] {
    nlohmann::json status = cluster_->WeirJson({"status", job});
    int finished = 0;
    std::string running;
    for (const auto& t : status["tasks"]) {
      if (t["state"] == "FINISHED") ++finished;
      if (t["state"] == "RUNNING") running = t["taskmanager_id"];
    }
    if (finished < 2 || running.empty()) return false;
    if (completed_then < 0) completed_then = completed();
    busy_taskmanager = running;
    return completed() >= completed_then + 2;
  }, absl::Seconds(60), absl::Milliseconds(50))) << cluster_->Logs();
  int index = -1;
  ASSERT_TRUE(absl::SimpleAtoi(busy_taskmanager.substr(3), &index)) << busy_taskmanager;  // "tm-<i>"
  cluster_->KillTaskManager(index);
  cluster_->StartTaskManager();

  nlohmann::json status = cluster_->WaitForJobEnd(job, absl::Seconds(120));
  ASSERT_EQ(status["state"], "FINISHED") << status.dump(2) << cluster_->Logs();
  EXPECT_GE(status["attempt"].get<int>(), 2) << status.dump(2);
  const std::string logs = cluster_->Logs();
  EXPECT_TRUE(absl::StrContains(logs, "finished before the restored checkpoint")) << logs;
  EXPECT_FALSE(absl::StrContains(logs, "DATA LOSS")) << logs;
  ExpectEveryRecordOnce(bootstrap_, out, kSmall + kLarge, "sources ending apart, a kill after two finished", logs);
  EXPECT_TRUE(NoTransactionStaysOpen(bootstrap_, out, absl::Seconds(30), absl::Milliseconds(200)))
      << "a transaction is still open on the output";
}

// The same across a shuffle: keyed_count (sources -> hash -> count + sink)
// over a bounded input at -p 3 over 2 partitions. Each source subtask ends
// at another time; the counting tasks see their input channels end one by
// one (END_OF_DATA, the final barrier, END_OF_INPUT), end their own input
// once every channel did, and commit what they wrote last with a checkpoint
// taken after that. For every word the committed counts are 1, 2, ..., n.
TEST_F(ExactlyOnceTest, BoundedKeyedCountEndsThroughTheShuffleExactlyOnce) {
  StartCluster(3);
  const std::string in = NewTopic("eo-apart-count-in", 2), out = NewTopic("eo-apart-count-out");
  constexpr int kSmall = 50, kLarge = 30000, kDistinct = 300;
  std::vector<KafkaMessage> input;
  std::map<std::string, int> truth;
  for (int i = 0; i < kSmall + kLarge; ++i) {
    const std::string word = absl::StrCat("w", i % kDistinct);
    input.push_back({.key = absl::StrCat("id-", i), .value = word, .partition = i < kSmall ? 0 : 1});
    ++truth[word];
  }
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, input).ok());
  std::string error;
  const std::string job = cluster_->Submit(
      kJobs + "/keyed_count.so", {"-p", "3", "-Dexecution.checkpointing.interval=500ms"},
      {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", out, "--guarantee", "exactly-once",
       "--bounded"},
      &error);
  ASSERT_FALSE(job.empty()) << error << cluster_->Logs();
  nlohmann::json status = cluster_->WaitForJobEnd(job, absl::Seconds(120));
  ASSERT_EQ(status["state"], "FINISHED") << status.dump(2) << cluster_->Logs();

  absl::StatusOr<std::vector<KafkaMessage>> output = test::ReadTopic(bootstrap_, out);
  ASSERT_TRUE(output.ok()) << output.status();
  std::map<std::string, int> last;
  int out_of_sequence = 0;
  ASSERT_NO_FATAL_FAILURE(CheckCountSequences(&*output, &last, &out_of_sequence));
  EXPECT_EQ(out_of_sequence, 0);
  EXPECT_EQ(static_cast<int>(output->size()), kSmall + kLarge);
  EXPECT_EQ(last, truth);
  auto stable = test::EndOffsets(bootstrap_, out, true);
  auto high = test::EndOffsets(bootstrap_, out, false);
  ASSERT_TRUE(stable.ok() && high.ok());
  EXPECT_EQ(*stable, *high) << "a transaction is still open on the output";
}

// Exactly-once output commits when checkpoints complete: without
// checkpoints, with unaligned (AT_LEAST_ONCE) ones, with a transaction
// timeout shorter than a checkpoint may take, or with the prefix of a job
// still running, the submission is refused with what to set.
TEST_F(ExactlyOnceTest, SubmissionNeedsAlignedCheckpoints) {
  StartCluster(2);
  const std::string in = NewTopic("eo-refused-in"), out = NewTopic("eo-refused-out");
  std::string error;
  EXPECT_TRUE(SubmitCopy({"-p", "1"}, in, out, &error).empty());
  EXPECT_TRUE(absl::StrContains(error, "execution.checkpointing.interval")) << error;
  error.clear();
  EXPECT_TRUE(SubmitCopy({"-p", "1", "-Dexecution.checkpointing.interval=1s",
                          "-Dexecution.checkpointing.mode=AT_LEAST_ONCE"},
                         in, out, &error)
                  .empty());
  EXPECT_TRUE(absl::StrContains(error, "EXACTLY_ONCE")) << error;
  // The same mode set by the job's code (StreamEnvironment::
  // SetCheckpointingMode) is refused alike; -D at submission overrides it.
  error.clear();
  const std::vector<std::string> unaligned_by_code = {"--brokers", bootstrap_, "--input-topic", in, "--output-topic",
                                                      out, "--guarantee", "exactly-once", "--checkpointing-mode",
                                                      "at-least-once"};
  EXPECT_TRUE(cluster_
                  ->Submit(kJobs + "/kafka_copy.so", {"-p", "1", "-Dexecution.checkpointing.interval=1s"},
                           unaligned_by_code, &error)
                  .empty());
  EXPECT_TRUE(absl::StrContains(error, "EXACTLY_ONCE")) << error;
  error.clear();
  const std::string overridden = cluster_->Submit(
      kJobs + "/kafka_copy.so",
      {"-p", "1", "-Dexecution.checkpointing.interval=1s", "-Dexecution.checkpointing.mode=EXACTLY_ONCE"},
      unaligned_by_code, &error);
  EXPECT_FALSE(overridden.empty()) << error;
  if (!overridden.empty()) {
    ASSERT_EQ(cluster_->Weir({"cancel", overridden}).exit_code, 0);
    cluster_->WaitForJobEnd(overridden);
  }
  // A transaction timeout the broker would hit before the checkpoint ends.
  error.clear();
  EXPECT_TRUE(cluster_
                  ->Submit(kJobs + "/kafka_copy.so", {"-p", "1", "-Dexecution.checkpointing.interval=1s"},
                           {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", out, "--guarantee",
                            "exactly-once", "--transaction-timeout-ms", "60000"},
                           &error)
                  .empty());
  EXPECT_TRUE(absl::StrContains(error, "kafka.transaction.timeout.ms is 60000 ms")) << error;

  // Two running jobs with one transactional id prefix would abort each
  // other's transactions: the second is refused.
  error.clear();
  const std::string job = SubmitCopy({"-p", "1", "-Dexecution.checkpointing.interval=1s"}, in, out, &error);
  ASSERT_FALSE(job.empty()) << error << cluster_->Logs();
  EXPECT_TRUE(SubmitCopy({"-p", "1", "-Dexecution.checkpointing.interval=1s"}, in, out, &error).empty());
  EXPECT_TRUE(absl::StrContains(error, "already writes exactly-once with the transactional id prefix")) << error;
  ASSERT_EQ(cluster_->Weir({"cancel", job}).exit_code, 0);

  // A transaction timeout above the broker's transaction.max.timeout.ms
  // (15 min by default): the JobManager does not contact brokers at
  // submission, so the first attempt fails at once, saying which two
  // settings.
  error.clear();
  const std::string over = cluster_->Submit(
      kJobs + "/kafka_copy.so", {"-p", "1", "-Dexecution.checkpointing.interval=1s", "-Drestart-strategy.type=none"},
      {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", NewTopic("eo-over-out"), "--guarantee",
       "exactly-once", "--transaction-timeout-ms", "1000000"},
      &error);
  ASSERT_FALSE(over.empty()) << error;
  const nlohmann::json failed = cluster_->WaitForJobEnd(over, absl::Seconds(60));
  EXPECT_EQ(failed["state"], "FAILED") << failed.dump(2);
  EXPECT_TRUE(absl::StrContains(failed["error"].get<std::string>(), "transaction.max.timeout.ms")) << failed.dump(2);
}

}  // namespace
}  // namespace weir
