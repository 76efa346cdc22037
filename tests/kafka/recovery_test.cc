// Checkpoints and recovery on a real cluster against the real Kafka broker:
// TaskManagers are killed with SIGKILL while records keep arriving, and the
// keyed state must come back exactly as checkpointed.
#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "jobmanager/checkpoint/checkpoint_storage.h"
#include "tests/kafka/cluster_job_test.h"
#include "tests/kafka/kafka_io.h"
#include "tests/kafka/test_kafka.h"
#include "tests/testing/local_cluster.h"

namespace weir {
namespace {

using test::KafkaMessage;
using testing::KeyedCountBatch;
using testing::LocalCluster;
using testing::ReadUntil;
using testing::WaitFor;

const std::string kJobs = WEIR_JOBS_DIR;

class RecoveryTest : public testing::ClusterJobTest {
 protected:
  std::string CountWindowsAcrossASavepoint(const std::vector<std::string>& second_options,
                                           const std::vector<std::string>& second_args);

  std::string Submit(std::vector<std::string> options, const std::string& in, const std::string& out) {
    std::string error;
    std::string job = cluster_->Submit(kJobs + "/keyed_count.so", options,
                                       {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", out}, &error);
    EXPECT_FALSE(job.empty()) << error << cluster_->Logs();
    return job;
  }

};

// The acceptance test: keyed_count at parallelism 2 on three
// TaskManagers with checkpoints every 300 ms; while records keep arriving, a
// TaskManager that runs tasks is SIGKILLed at a random moment, three times,
// and a replacement started each time. Output is at-least-once, but state is
// exactly-once: the last count written for every key equals the true number
// of records with that key.
TEST_F(RecoveryTest, KeyedStateIsExactlyOnceAcrossTaskManagerKills) {
  StartCluster(3);
  const std::string in = NewTopic("recovery-in"), out = NewTopic("recovery-out");
  const std::string job = Submit({"-p", "2", "-Dexecution.checkpointing.interval=300ms",
                                  "-Drestart-strategy.type=fixed-delay", "-Drestart-strategy.fixed-delay.attempts=20",
                                  "-Drestart-strategy.fixed-delay.delay=200ms"},
                                 in, out);
  ASSERT_FALSE(job.empty());
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();

  std::mt19937 random(std::random_device{}());
  std::map<std::string, int64_t> truth;
  constexpr int kBatch = 8000, kDistinct = 500, kKills = 3;
  int produced = 0;
  for (int kill = 0; kill < kKills; ++kill) {
    ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, KeyedCountBatch(produced, kBatch, kDistinct, &truth)).ok());
    produced += kBatch;
    ASSERT_TRUE(WaitForCompletedCheckpoint(job, kill + 1)) << cluster_->Logs();
    // A random moment while the job works through the batch.
    absl::SleepFor(absl::Milliseconds(std::uniform_int_distribution<int>(0, 800)(random)));
    const int victim = BusyTaskManager(job, random);
    cluster_->KillTaskManager(victim);
    cluster_->StartTaskManager();
    ASSERT_TRUE(WaitUntilRunning(job, kill + 2)) << cluster_->Logs();
  }
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, KeyedCountBatch(produced, kBatch, kDistinct, &truth)).ok());

  std::map<std::string, int64_t> last;
  const bool caught_up = WaitFor([&] {
    last = LastCounts(out);
    return last == truth;
  }, absl::Seconds(120), absl::Seconds(1));
  if (!caught_up) {
    int wrong = 0;
    for (const auto& [key, count] : truth) {
      if (last[key] != count && ++wrong <= 5) ADD_FAILURE() << key << ": last count " << last[key] << ", true " << count;
    }
    FAIL() << wrong << " of " << truth.size() << " keys end with a wrong count\n" << cluster_->Logs();
  }
  nlohmann::json status = cluster_->WeirJson({"status", job});
  EXPECT_EQ(status["restarts"].get<int>(), kKills) << status.dump(2);
  // The sources of the last attempt started from checkpointed offsets, not
  // from the beginning: a fresh start would also end with the right counts.
  EXPECT_LT(SourceRecordsIn(status), produced + kBatch) << status.dump(2);
  EXPECT_GT(status["restored_checkpoint_id"].get<int64_t>(), 0) << status.dump(2);
  // The JobManager's log tells what happened, checkpoint by checkpoint.
  const std::string log = cluster_->jobmanager().Log();
  EXPECT_TRUE(absl::StrContains(log, "completed: 4 tasks")) << log;
  EXPECT_TRUE(absl::StrContains(log, "restoring from checkpoint")) << log;
  ASSERT_TRUE(cluster_->Weir({"cancel", job}).exit_code == 0);
}

// Local recovery (state.backend.local-recovery): keyed_count at parallelism
// 2 on three one-slot TaskManagers; the TaskManager of one subtask is
// SIGKILLed. The restart puts the other subtask back on its TaskManager,
// which restores its keyed state from its own disk, while the lost one's
// replacement on the idle TaskManager reads the checkpoint directory. The
// counts stay exact.
TEST_F(RecoveryTest, LocalRecoveryRestoresOnTheSameTaskManagerFromItsDisk) {
  StartCluster(3);
  const std::string in = NewTopic("local-recovery-in"), out = NewTopic("local-recovery-out");
  const std::string job = Submit({"-p", "2", "-Dexecution.checkpointing.interval=300ms",
                                  "-Dstate.backend.local-recovery=true", "-Drestart-strategy.type=fixed-delay",
                                  "-Drestart-strategy.fixed-delay.attempts=5",
                                  "-Drestart-strategy.fixed-delay.delay=200ms"},
                                 in, out);
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
  std::map<std::string, int64_t> truth;
  constexpr int kBatch = 6000, kDistinct = 400;
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, KeyedCountBatch(0, kBatch, kDistinct, &truth)).ok());
  ASSERT_TRUE(WaitFor([&] { return LastCounts(out) == truth; }, absl::Seconds(60))) << cluster_->Logs();
  ASSERT_TRUE(WaitForCompletedCheckpoint(job, 1)) << cluster_->Logs();
  // Where each subtask of the keyed operator runs.
  auto placement = [&] {
    std::map<int, std::string> where;  // subtask -> TaskManager
    const nlohmann::json status = cluster_->WeirJson({"status", job});
    for (const auto& t : status["tasks"]) {
      if (absl::StrContains(t["name"].get<std::string>(), "CountPerKey")) where[t["subtask"]] = t["taskmanager_id"];
    }
    return where;
  };
  const std::map<int, std::string> before = placement();
  ASSERT_EQ(before.size(), 2u) << cluster_->WeirJson({"status", job}).dump(2);
  ASSERT_NE(before.at(0), before.at(1));
  int victim = 0, survivor = 0;
  ASSERT_TRUE(absl::SimpleAtoi(before.at(0).substr(3), &victim));  // "tm-<i>"
  ASSERT_TRUE(absl::SimpleAtoi(before.at(1).substr(3), &survivor));
  cluster_->KillTaskManager(victim);
  ASSERT_TRUE(WaitUntilRunning(job, 2)) << cluster_->Logs();
  EXPECT_EQ(placement().at(1), before.at(1)) << "subtask 1 went back to its TaskManager";

  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, KeyedCountBatch(kBatch, kBatch, kDistinct, &truth)).ok());
  EXPECT_TRUE(WaitFor([&] { return LastCounts(out) == truth; }, absl::Seconds(60), absl::Seconds(1)))
      << cluster_->Logs();
  const std::string survivor_log = cluster_->taskmanager(survivor).Log();
  EXPECT_TRUE(absl::StrContains(survivor_log, "restored from its local copy")) << survivor_log;
  EXPECT_TRUE(absl::StrContains(cluster_->Logs(), "no usable local copy")) << cluster_->Logs();
  ASSERT_EQ(cluster_->Weir({"cancel", job}).exit_code, 0);
}

// weir savepoint, cancel, weir submit -s: the new job's keyed state goes on
// from the savepoint, so its counts continue where the first job's stopped.
// A savepoint path outside state.savepoints.dir is refused with what to do.
TEST_F(RecoveryTest, ASavepointCarriesStateIntoANewJob) {
  StartCluster(2);
  const std::string in = NewTopic("savepoint-in"), out = NewTopic("savepoint-out");
  const std::string job = Submit({"-p", "2", "-Dexecution.checkpointing.interval=300ms"}, in, out);
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
  std::map<std::string, int64_t> truth;
  constexpr int kBatch = 6000, kDistinct = 300;
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, KeyedCountBatch(0, kBatch, kDistinct, &truth)).ok());
  ASSERT_TRUE(WaitFor([&] { return LastCounts(out) == truth; }, absl::Seconds(60))) << cluster_->Logs();

  nlohmann::json saved = cluster_->WeirJson({"savepoint", job});
  ASSERT_FALSE(saved.is_null()) << cluster_->Logs();
  const std::string path = saved["savepoint_path"];
  EXPECT_TRUE(std::filesystem::exists(path + "/_savepoint")) << path;
  EXPECT_TRUE(absl::StrContains(path, cluster_->dir() + "/ha/savepoints/")) << path;
  const std::vector<std::string> args = {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", out};
  std::string error;
  // A running job's checkpoints are no starting point: they come and go.
  const std::string job_dir = absl::StrCat(cluster_->dir(), "/ha/checkpoints/", job);
  EXPECT_TRUE(cluster_->Submit(kJobs + "/keyed_count.so", {"-p", "2", "-s", job_dir}, args, &error).empty());
  EXPECT_TRUE(absl::StrContains(error, "still running")) << error;
  ASSERT_EQ(cluster_->Weir({"cancel", job}).exit_code, 0);
  ASSERT_EQ(cluster_->WaitForJobEnd(job, absl::Seconds(60))["state"], "CANCELED");
  // By default a canceled job's checkpoints go (the savepoint stays).
  EXPECT_TRUE(WaitFor([&] { return !std::filesystem::exists(job_dir); }, absl::Seconds(30))) << job_dir;
  EXPECT_TRUE(std::filesystem::exists(path + "/_savepoint")) << path;

  EXPECT_TRUE(cluster_->Submit(kJobs + "/keyed_count.so", {"-p", "2", "-s", "/etc"}, args, &error).empty());
  EXPECT_TRUE(absl::StrContains(error, "neither inside state.savepoints.dir")) << error;

  // The new job reads the topic from the savepoint's offsets on, with the
  // savepoint's counts. The path is given relative to where weir runs, as
  // a user in a shell would: the client resolves it from there.
  const std::string relative = std::filesystem::relative(path).string();
  ASSERT_FALSE(relative.empty() || relative[0] == '/') << relative;
  const std::string resumed =
      Submit({"-p", "2", "-Dexecution.checkpointing.interval=300ms", "-s", relative}, in, out);
  ASSERT_TRUE(WaitUntilRunning(resumed)) << cluster_->Logs();
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, KeyedCountBatch(kBatch, kBatch, kDistinct, &truth)).ok());
  std::map<std::string, int64_t> last;
  const bool caught_up = WaitFor([&] {
    last = LastCounts(out);
    return last == truth;
  }, absl::Seconds(60), absl::Seconds(1));
  EXPECT_TRUE(caught_up) << cluster_->Logs();
  nlohmann::json status = cluster_->WeirJson({"status", resumed});
  EXPECT_GT(status["restored_checkpoint_id"].get<int64_t>(), 0) << status.dump(2);
  // Its sources started at the savepoint's offsets: they read the second
  // batch only (a fresh start would also end with the right counts).
  EXPECT_EQ(SourceRecordsIn(status), kBatch) << status.dump(2);
  ASSERT_EQ(cluster_->Weir({"cancel", resumed}).exit_code, 0);
}

// The rescaling test, exactly-once end to end: keyed_count at
// parallelism 2 is stopped with a savepoint (weir stop), resubmitted from it
// at parallelism 1, stopped again, and resubmitted at parallelism 3. Keyed
// state moves by key group and Kafka offsets by partition, so a
// read_committed reader finds for every key the counts 1, 2, ..., n exactly
// once across the three jobs, each source reads only what arrived after the
// previous stop, and no transaction is left open (every stop committed, and
// scaling down aborted what the removed subtasks' ids could hold).
TEST_F(RecoveryTest, StopWithSavepointAndRescaleKeepCountsExactlyOnce) {
  StartCluster(3);
  const std::string in = NewTopic("rescale-in"), out = NewTopic("rescale-out");
  auto submit = [&](const std::string& parallelism, const std::string& savepoint) {
    std::vector<std::string> options = {"-p", parallelism, "-Dexecution.checkpointing.interval=300ms"};
    if (!savepoint.empty()) options.insert(options.end(), {"-s", savepoint});
    std::string error;
    std::string job = cluster_->Submit(
        kJobs + "/keyed_count.so", options,
        {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", out, "--guarantee", "exactly-once"}, &error);
    EXPECT_FALSE(job.empty()) << error << cluster_->Logs();
    return job;
  };
  // Every count committed so far, per key, in order; fails on a gap or a
  // repeat.
  auto committed_counts = [&]() {
    std::map<std::string, int64_t> last;
    auto output = test::ReadTopic(bootstrap_, out);
    EXPECT_TRUE(output.ok()) << output.status();
    if (!output.ok()) return last;
    std::vector<KafkaMessage> messages = *output;
    test::SortByPosition(&messages);
    int wrong = 0;
    for (const KafkaMessage& m : messages) {
      int64_t count = 0;
      EXPECT_TRUE(m.key.has_value() && absl::SimpleAtoi(m.value, &count)) << m.value;
      int64_t& previous = last[m.key.value_or("")];
      if (count != previous + 1 && ++wrong <= 5) ADD_FAILURE() << *m.key << ": count " << count << " after " << previous;
      previous = count;
    }
    return last;
  };
  auto records_read = [&](const std::string& job) { return SourceRecordsIn(cluster_->WeirJson({"status", job})); };
  auto stop = [&](const std::string& job) {
    nlohmann::json stopped = cluster_->WeirJson({"stop", job});
    EXPECT_FALSE(stopped.is_null()) << cluster_->Logs();
    if (stopped.is_null()) return std::string();
    const std::string path = stopped["savepoint_path"];
    EXPECT_TRUE(std::filesystem::exists(path + "/_savepoint")) << path;
    EXPECT_EQ(cluster_->WeirJson({"status", job})["state"], "FINISHED");
    return path;
  };

  std::map<std::string, int64_t> truth;
  constexpr int kBatch = 6000, kDistinct = 300;
  int produced = 0;
  std::string savepoint;
  for (const std::string parallelism : {"2", "1", "3"}) {
    const std::string job = submit(parallelism, savepoint);
    ASSERT_FALSE(job.empty());
    ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
    ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, KeyedCountBatch(produced, kBatch, kDistinct, &truth)).ok());
    produced += kBatch;
    ASSERT_TRUE(WaitFor([&] { return records_read(job) >= kBatch; }, absl::Seconds(60))) << cluster_->Logs();
    // Stopping commits everything up to the savepoint: the committed
    // output is complete right after, with no transaction left open.
    savepoint = stop(job);
    ASSERT_FALSE(savepoint.empty());
    EXPECT_EQ(records_read(job), kBatch) << "parallelism " << parallelism << ": the sources read from the "
                                         << "previous savepoint's offsets on";
    EXPECT_EQ(committed_counts(), truth) << "after the job at parallelism " << parallelism;
    auto stable = test::EndOffsets(bootstrap_, out, /*read_committed=*/true);
    auto end = test::EndOffsets(bootstrap_, out, /*read_committed=*/false);
    ASSERT_TRUE(stable.ok() && end.ok());
    EXPECT_EQ(*stable, *end) << "a transaction is still open after the job at parallelism " << parallelism;
  }
  const std::string log = cluster_->jobmanager().Log();
  EXPECT_TRUE(absl::StrContains(log, "rescales the savepoint's state")) << log;
}

// windowed_count stopped with a savepoint after one batch and started again
// from it as `second_args` say (another parallelism, a changed job), then a
// second batch: every (key, window) once, equal to a single pass; the window
// of records 3900..4099 spans both jobs. Returns the JobManager's log.
std::string RecoveryTest::CountWindowsAcrossASavepoint(const std::vector<std::string>& second_options,
                                                      const std::vector<std::string>& second_args) {
  StartCluster(3);
  const std::string in = NewTopic("window-savepoint-in"), out = NewTopic("window-savepoint-out");
  auto submit = [&](std::vector<std::string> options, const std::vector<std::string>& extra_args) {
    options.push_back("-Dexecution.checkpointing.interval=300ms");
    std::vector<std::string> args = {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", out,
                                     "--window-ms", "1000", "--out-of-orderness-ms", "0", "--event-time", "value"};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    std::string error;
    std::string job = cluster_->Submit(kJobs + "/windowed_count.so", options, args, &error);
    EXPECT_FALSE(job.empty()) << error << cluster_->Logs();
    return job;
  };
  // Record i: key w<i % 40>, event time base + 500 + 5 i (in order).
  const int64_t base = (absl::ToUnixMillis(absl::Now()) - 3600 * 1000) / 1000 * 1000;
  constexpr int kBatch = 4000;
  std::map<std::string, int> truth;
  auto batch = [&](int first) {
    std::vector<KafkaMessage> records;
    for (int i = first; i < first + kBatch; ++i) {
      const int64_t t = base + 500 + 5 * int64_t{i};
      records.push_back({absl::StrCat("w", i % 40), absl::StrCat(t)});
      ++truth[absl::StrCat("w", i % 40, "@", t - t % 1000)];
    }
    return records;
  };

  const std::string first = submit({"-p", "2"}, {});
  if (first.empty()) return "";
  EXPECT_TRUE(WaitUntilRunning(first)) << cluster_->Logs();
  EXPECT_TRUE(test::ProduceMessages(bootstrap_, in, batch(0)).ok());
  EXPECT_TRUE(WaitFor([&] { return SourceRecordsIn(cluster_->WeirJson({"status", first})) >= kBatch; },
                      absl::Seconds(60)))
      << cluster_->Logs();
  nlohmann::json stopped = cluster_->WeirJson({"stop", first});
  EXPECT_FALSE(stopped.is_null()) << cluster_->Logs();
  if (stopped.is_null()) return "";
  std::vector<std::string> options = second_options;
  options.insert(options.end(), {"-s", stopped["savepoint_path"]});
  const std::string second = submit(options, second_args);
  if (second.empty()) return "";
  EXPECT_TRUE(WaitUntilRunning(second)) << cluster_->Logs();
  EXPECT_TRUE(test::ProduceMessages(bootstrap_, in, batch(kBatch)).ok());
  // Later records in every partition move event time past every window.
  std::vector<KafkaMessage> ends;
  for (int32_t p = 0; p < 4; ++p) ends.push_back({"end", absl::StrCat(base + 3600 * 1000), p});
  EXPECT_TRUE(test::ProduceMessages(bootstrap_, in, ends).ok());

  std::vector<KafkaMessage> output;
  ReadUntil(bootstrap_, out, absl::Seconds(120), &output, [&](const auto& read) { return read.size() >= truth.size(); });
  absl::SleepFor(absl::Seconds(1));  // a duplicate would have come by now
  if (auto again = test::ReadTopic(bootstrap_, out); again.ok()) output = *std::move(again);
  std::map<std::string, int> results;
  int duplicated = 0;
  for (const KafkaMessage& m : output) {
    int count = 0;
    EXPECT_TRUE(m.key.has_value() && absl::SimpleAtoi(m.value, &count)) << m.value;
    if (!results.emplace(m.key.value_or(""), count).second && ++duplicated <= 5) {
      ADD_FAILURE() << *m.key << " is there twice";
    }
  }
  EXPECT_EQ(duplicated, 0);
  EXPECT_EQ(results, truth) << "the windows differ from a single pass";
  const std::string log = cluster_->jobmanager().Log();
  cluster_->Weir({"cancel", second});
  return log;
}

// Open windows move with their keys: the savepoint of a job at parallelism
// 2 restored at 3.
TEST_F(RecoveryTest, OpenWindowsMoveWithTheirKeysThroughASavepoint) {
  const std::string log = CountWindowsAcrossASavepoint({"-p", "3"}, {});
  EXPECT_TRUE(absl::StrContains(log, "rescales the savepoint's state")) << log;
}

// A stateless filter added after the source: the new job chains the source
// with it, and state is found by operator id, so the source's offsets and
// the open windows restore without --allow-non-restored-state (before,
// the savepoint was refused; with that flag the offsets were dropped and
// every window was computed and written again).
TEST_F(RecoveryTest, AStatelessFilterAddedAfterTheSourceKeepsEveryWindowExact) {
  const std::string log = CountWindowsAcrossASavepoint({"-p", "2"}, {"--skip-key", "no-such-key"});
  EXPECT_TRUE(absl::StrContains(log, "operators without state in the savepoint start empty: SkipKey")) << log;
  EXPECT_FALSE(absl::StrContains(log, "submission drops state")) << log;
}

// Incremental checkpoints (the rocksdb default): with 1 000 000 keys loaded and
// then a few updated per interval, a checkpoint writes a small part of the
// state (the savepoint at the end, a full copy, is the yardstick); after
// many checkpoints the shared directory holds exactly the files the retained
// checkpoints refer to. Retained on purpose (RETAIN_ON_CANCELLATION), they
// then start a new job at another parallelism (weir submit -s <job's
// checkpoint directory>) whose counts go on from them.
TEST_F(RecoveryTest, IncrementalCheckpointsWriteLittleAndKeepOnlyWhatRetainedOnesReferTo) {
  StartCluster(2);
  const std::string in = NewTopic("incremental-in"), out = NewTopic("incremental-out");
  const std::string job = Submit({"-p", "2", "-Dexecution.checkpointing.interval=300ms",
                                  "-Dstate.checkpoints.num-retained=2",
                                  "-Dexecution.checkpointing.externalized-checkpoint-retention=RETAIN_ON_CANCELLATION"},
                                 in, out);
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
  std::map<std::string, int64_t> truth;
  constexpr int kKeys = 1000000;
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, KeyedCountBatch(0, kKeys, kKeys, &truth)).ok());
  auto records_read = [&] { return SourceRecordsIn(cluster_->WeirJson({"status", job})); };
  auto completed = [&] {
    std::map<int64_t, int64_t> sizes;  // id -> bytes written
    nlohmann::json c = cluster_->WeirJson({"checkpoints", job});
    for (const auto& cp : c["checkpoints"]) {
      if (cp["status"] == "COMPLETED") sizes[cp["id"].get<int64_t>()] = cp["size_bytes"].get<int64_t>();
    }
    return sizes;
  };
  ASSERT_TRUE(WaitFor([&] { return records_read() >= kKeys; }, absl::Seconds(120))) << cluster_->Logs();
  std::map<int64_t, int64_t> before = completed();
  const int64_t loaded = before.empty() ? 0 : before.rbegin()->first;
  ASSERT_TRUE(WaitForCompletedCheckpoint(job, 1, loaded + 1)) << cluster_->Logs();
  // Until RocksDB has flushed the loaded keys (in its own threads, slower
  // on a busy machine), each checkpoint carries their log: the steady state
  // begins with the first checkpoint that writes little.
  constexpr int64_t kLittle = 256 * 1024;
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const auto& [id, size] : completed()) {
          if (id > loaded && size < kLittle) return true;
        }
        return false;
      },
      absl::Seconds(120)))
      << "no checkpoint after the load wrote less than " << kLittle << " bytes\n" << cluster_->Logs();
  const int64_t trickle_from = completed().rbegin()->first;
  for (int i = 0; i < 25; ++i) {  // a few keys change per interval
    ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, KeyedCountBatch(kKeys + i * 100, 100, 50, &truth)).ok());
    absl::SleepFor(absl::Milliseconds(200));
  }
  nlohmann::json stopped = cluster_->WeirJson({"stop", job});
  ASSERT_FALSE(stopped.is_null()) << cluster_->Logs();
  int64_t full_bytes = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(stopped["savepoint_path"].get<std::string>())) {
    if (entry.is_regular_file()) full_bytes += static_cast<int64_t>(entry.file_size());
  }
  std::vector<int64_t> written;
  for (const auto& [id, size] : completed()) {
    if (id > trickle_from) written.push_back(size);
  }
  ASSERT_GE(written.size(), 5u) << cluster_->Logs();
  std::sort(written.begin(), written.end());
  const int64_t median = written[written.size() / 2];
  std::printf("incremental checkpoints: %zu while few keys changed, median %lld bytes written; full state %lld bytes\n",
              written.size(), static_cast<long long>(median), static_cast<long long>(full_bytes));
  EXPECT_LT(median * 20, full_bytes);

  // The shared directory against what the retained checkpoints refer to.
  const std::string job_dir = absl::StrCat(cluster_->dir(), "/ha/checkpoints/", job);
  absl::StatusOr<jobmanager::checkpoint::CheckpointStorage> storage =
      jobmanager::checkpoint::CheckpointStorage::Open(job_dir);
  ASSERT_TRUE(storage.ok()) << storage.status();
  std::set<std::string> referenced, present;
  int retained = 0;
  for (int64_t id : storage->ListCheckpointIds()) {
    absl::StatusOr<v1::CheckpointMetadata> metadata = storage->ReadMetadata(id);
    if (!metadata.ok()) continue;
    ++retained;
    for (const v1::TaskStateHandle& handle : metadata->tasks()) {
      referenced.insert(handle.shared_files().begin(), handle.shared_files().end());
    }
  }
  for (const auto& entry : std::filesystem::directory_iterator(storage->SharedDir())) {
    present.insert(entry.path().filename().string());
  }
  EXPECT_LE(retained, 2);
  EXPECT_FALSE(referenced.empty());
  EXPECT_EQ(present, referenced);
  EXPECT_EQ(LastCounts(out), truth);

  // The retained checkpoint (incremental: its files are in shared/) starts a
  // job at parallelism 1; the sources go on from its offsets.
  const std::string resumed = Submit({"-p", "1", "-Dexecution.checkpointing.interval=300ms", "-s", job_dir}, in, out);
  ASSERT_FALSE(resumed.empty());
  ASSERT_TRUE(WaitUntilRunning(resumed)) << cluster_->Logs();
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, KeyedCountBatch(kKeys + 2500, 2000, 500, &truth)).ok());
  EXPECT_TRUE(WaitFor([&] { return LastCounts(out) == truth; }, absl::Seconds(60), absl::Seconds(1)))
      << cluster_->Logs();
  nlohmann::json status = cluster_->WeirJson({"status", resumed});
  EXPECT_EQ(SourceRecordsIn(status), 2000) << status.dump(2);
  EXPECT_TRUE(absl::StrContains(cluster_->jobmanager().Log(), "starts from retained checkpoint"));
  ASSERT_EQ(cluster_->Weir({"cancel", resumed}).exit_code, 0);
}

// An ended job stays listed — also after the JobManager restarts — for
// jobstore.expiration-time, then it is forgotten, with its entry in
// high-availability.storageDir.
TEST_F(RecoveryTest, EndedJobsStayListedAcrossAJobManagerRestartThenExpire) {
  cluster_ = std::make_unique<LocalCluster>(LocalCluster::Options{1, 2, {"-Djobstore.expiration-time=4s"}, ""});
  cluster_->Start();
  const std::string in = NewTopic("ended-in"), out = NewTopic("ended-out");
  const std::string job = Submit({"-p", "1", "-Dexecution.checkpointing.interval=300ms"}, in, out);
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
  ASSERT_EQ(cluster_->Weir({"cancel", job}).exit_code, 0);
  ASSERT_EQ(cluster_->WaitForJobEnd(job, absl::Seconds(60))["state"], "CANCELED");
  const std::string entry = cluster_->dir() + "/ha/jobs/" + job;
  EXPECT_TRUE(std::filesystem::exists(entry + "/final"));

  cluster_->RestartJobManager();
  nlohmann::json status;
  ASSERT_TRUE(WaitFor([&] {
    status = cluster_->WeirJson({"status", job});
    return !status.is_null();
  }, absl::Seconds(30))) << cluster_->Logs();
  EXPECT_EQ(status["state"], "CANCELED") << status.dump(2);
  // Canceled jobs are not taken over.
  EXPECT_FALSE(absl::StrContains(cluster_->jobmanager().Log(), "taken over")) << cluster_->jobmanager().Log();

  ASSERT_TRUE(WaitFor([&] {
    nlohmann::json list = cluster_->WeirJson({"list"});
    return !list.is_null() && list["jobs"].empty();
  }, absl::Seconds(30))) << cluster_->Logs();
  EXPECT_FALSE(std::filesystem::exists(entry));
  EXPECT_NE(cluster_->Weir({"status", job}).exit_code, 0);
}

// The JobManager test with keyed_count: the JobManager is
// SIGKILLed while the job runs and restarted on the same storage directory;
// the job is listed before and after, resumes from its latest checkpoint,
// and the last count of every key is exact.
TEST_F(RecoveryTest, KeyedCountGoesOnAcrossAJobManagerKill) {
  StartCluster(2);
  const std::string in = NewTopic("jm-kill-in"), out = NewTopic("jm-kill-out");
  const std::string job = Submit({"-p", "2", "-Dexecution.checkpointing.interval=300ms"}, in, out);
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
  auto listed = [&] {
    const nlohmann::json list = cluster_->WeirJson({"list"});
    for (const auto& j : list["jobs"]) {
      if (j["job_id"] == job) return j["state"].get<std::string>();
    }
    return std::string("(not listed)");
  };
  EXPECT_EQ(listed(), "RUNNING");
  std::map<std::string, int64_t> truth;
  constexpr int kBatch = 6000, kDistinct = 300;
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, KeyedCountBatch(0, kBatch, kDistinct, &truth)).ok());
  ASSERT_TRUE(WaitForCompletedCheckpoint(job, 1)) << cluster_->Logs();
  cluster_->RestartJobManager();
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, KeyedCountBatch(kBatch, kBatch, kDistinct, &truth)).ok());
  EXPECT_TRUE(WaitFor([&] { return LastCounts(out) == truth; }, absl::Seconds(90), absl::Seconds(1)))
      << cluster_->Logs();
  EXPECT_EQ(listed(), "RUNNING");
  const nlohmann::json status = cluster_->WeirJson({"status", job});
  EXPECT_GT(status["attempt"].get<int>(), 1) << status.dump(2);
  EXPECT_GT(status["restored_checkpoint_id"].get<int64_t>(), 0) << status.dump(2);
  ASSERT_EQ(cluster_->Weir({"cancel", job}).exit_code, 0);
}

// What must not start a job, each refused with a message that says why, and
// none changing anything (the savepoint's files stay byte for byte, no job
// appears): a savepoint of another format version, one whose metadata is
// truncated, and a good savepoint given to a job with another graph.
TEST_F(RecoveryTest, BadSavepointsAreRefusedAndChangeNothing) {
  StartCluster(2);
  const std::string in = NewTopic("bad-savepoint-in"), out = NewTopic("bad-savepoint-out");
  const std::string job = Submit({"-p", "2", "-Dexecution.checkpointing.interval=300ms"}, in, out);
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
  std::map<std::string, int64_t> truth;
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, KeyedCountBatch(0, 2000, 100, &truth)).ok());
  ASSERT_TRUE(WaitFor([&] { return LastCounts(out) == truth; }, absl::Seconds(60))) << cluster_->Logs();
  nlohmann::json stopped = cluster_->WeirJson({"stop", job});
  ASSERT_FALSE(stopped.is_null()) << cluster_->Logs();
  const std::string good = stopped["savepoint_path"];

  // Copies of it, each damaged one way.
  auto copy_of = [&](const std::string& name) {
    const std::string to = absl::StrCat(cluster_->dir(), "/ha/savepoints/", name);
    std::filesystem::copy(good, to, std::filesystem::copy_options::recursive);
    return to;
  };
  const std::string future = copy_of("future-version");
  std::ofstream(future + "/_savepoint", std::ios::trunc) << "weir-savepoint 99\n";
  const std::string truncated = copy_of("truncated-metadata");
  std::string metadata;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(truncated)) {
    if (entry.path().filename() == "_metadata") metadata = entry.path().string();
  }
  ASSERT_FALSE(metadata.empty());
  std::filesystem::resize_file(metadata, std::filesystem::file_size(metadata) / 2);

  auto fingerprint = [](const std::string& dir) {
    std::map<std::string, std::string> files;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
      if (!entry.is_regular_file()) continue;
      std::ifstream f(entry.path(), std::ios::binary);
      files[entry.path().string()] = std::string(std::istreambuf_iterator<char>(f), {});
    }
    return files;
  };
  const auto before = fingerprint(cluster_->dir() + "/ha/savepoints");
  const size_t jobs_before = cluster_->WeirJson({"list"})["jobs"].size();
  const std::vector<std::string> args = {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", out};
  struct Case {
    std::string binary, savepoint, expected;
  };
  for (const Case& c : {Case{"keyed_count.so", future, "format version 99"},
                        Case{"keyed_count.so", truncated, "_metadata"},
                        Case{"kafka_copy.so", good, "this job"}}) {
    std::string error;
    EXPECT_TRUE(cluster_->Submit(kJobs + "/" + c.binary, {"-p", "2", "-s", c.savepoint}, args, &error).empty())
        << c.savepoint;
    EXPECT_TRUE(absl::StrContains(error, c.expected)) << c.savepoint << ": " << error;
  }
  EXPECT_EQ(fingerprint(cluster_->dir() + "/ha/savepoints"), before);
  EXPECT_EQ(cluster_->WeirJson({"list"})["jobs"].size(), jobs_before);
  // The good one still starts the job it belongs to.
  const std::string resumed = Submit({"-p", "2", "-Dexecution.checkpointing.interval=300ms", "-s", good}, in, out);
  ASSERT_TRUE(WaitUntilRunning(resumed)) << cluster_->Logs();
  ASSERT_EQ(cluster_->Weir({"cancel", resumed}).exit_code, 0);
}

// With restart-strategy.type none the first failure still ends the job, with
// the reason.
TEST_F(RecoveryTest, NoRestartStrategyFailsTheJobAtTheFirstFailure) {
  StartCluster(2);
  const std::string in = NewTopic("norestart-in"), out = NewTopic("norestart-out");
  const std::string job =
      Submit({"-p", "2", "-Dexecution.checkpointing.interval=300ms", "-Drestart-strategy.type=none"}, in, out);
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
  ASSERT_TRUE(WaitForCompletedCheckpoint(job, 1)) << cluster_->Logs();
  std::string killed_address;
  const nlohmann::json members = cluster_->WeirJson({"cluster"});
  for (const auto& tm : members["taskmanagers"]) {
    if (tm["id"] == "tm-1") killed_address = tm["address"];
  }
  ASSERT_FALSE(killed_address.empty());
  cluster_->KillTaskManager(1);
  nlohmann::json status = cluster_->WaitForJobEnd(job, absl::Seconds(60));
  ASSERT_EQ(status["state"], "FAILED") << status.dump(2);
  // The first failure names the lost TaskManager: its loss, or a task whose
  // input from it broke, whichever the JobManager heard first.
  const std::string error = status["error"];
  EXPECT_TRUE(absl::StrContains(error, "TaskManager tm-1") ||
              absl::StrContains(error, "from producer " + killed_address))
      << status.dump(2);
  EXPECT_EQ(status["restarts"].get<int>(), 0);
  // The default retention keeps a failed job's checkpoints, and the error
  // says what to resubmit from.
  const std::string hint = "resubmit with -s ";
  ASSERT_TRUE(absl::StrContains(error, hint)) << error;
  const std::string kept = error.substr(error.find(hint) + hint.size());
  EXPECT_TRUE(std::filesystem::exists(kept + "/_metadata")) << kept;
  absl::SleepFor(absl::Seconds(1));  // nothing deletes it after the end either
  EXPECT_TRUE(std::filesystem::exists(kept + "/_metadata")) << kept;
}

// The newest checkpoint's metadata is damaged: recovery takes the previous
// retained one and the JobManager's log says why.
TEST_F(RecoveryTest, CorruptNewestCheckpointFallsBackToThePreviousOne) {
  StartCluster(3);
  const std::string in = NewTopic("corrupt-in"), out = NewTopic("corrupt-out");
  const std::string job = Submit({"-p", "2", "-Dexecution.checkpointing.interval=400ms",
                                  "-Dstate.checkpoints.num-retained=3", "-Drestart-strategy.type=fixed-delay",
                                  "-Drestart-strategy.fixed-delay.delay=2s"},
                                 in, out);
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
  // Checkpoints that hold the counts of a first batch.
  std::map<std::string, int64_t> truth;
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, KeyedCountBatch(0, 2000, 100, &truth)).ok());
  ASSERT_TRUE(WaitFor([&] { return LastCounts(out) == truth; }, absl::Seconds(60), absl::Milliseconds(500)))
      << cluster_->Logs();
  nlohmann::json before = cluster_->WeirJson({"checkpoints", job});
  ASSERT_FALSE(before.is_null());
  const int64_t completed = before["completed"].get<int64_t>();
  ASSERT_TRUE(WaitFor([&] {
    nlohmann::json c = cluster_->WeirJson({"checkpoints", job});
    return !c.is_null() && c["completed"].get<int64_t>() >= completed + 2;
  }, absl::Seconds(60))) << cluster_->Logs();

  // Kill first, so that no newer checkpoint completes; then damage the newest.
  std::mt19937 random(std::random_device{}());
  cluster_->KillTaskManager(BusyTaskManager(job, random));
  const std::string job_dir = absl::StrCat(cluster_->dir(), "/ha/checkpoints/", job);
  int64_t newest = 0;
  for (const auto& entry : std::filesystem::directory_iterator(job_dir)) {
    const std::string name = entry.path().filename();
    int64_t id = 0;
    if (absl::StartsWith(name, "chk-") && absl::SimpleAtoi(name.substr(4), &id) &&
        std::filesystem::exists(entry.path() / "_metadata")) {
      newest = std::max(newest, id);
    }
  }
  ASSERT_GT(newest, 1);
  int64_t second = 0;  // the newest complete one before it
  for (const auto& entry : std::filesystem::directory_iterator(job_dir)) {
    const std::string name = entry.path().filename();
    int64_t id = 0;
    if (absl::StartsWith(name, "chk-") && absl::SimpleAtoi(name.substr(4), &id) && id < newest &&
        std::filesystem::exists(entry.path() / "_metadata")) {
      second = std::max(second, id);
    }
  }
  ASSERT_GT(second, 0);
  {
    std::fstream f(absl::StrCat(job_dir, "/chk-", newest, "/_metadata"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(30);
    f.put('\x5a');
  }
  // The one before it: a task's snapshot file cut short (a disk that filled
  // up or a copy that stopped), its _metadata intact.
  std::string truncated;
  for (const auto& entry : std::filesystem::directory_iterator(absl::StrCat(job_dir, "/chk-", second))) {
    if (absl::EndsWith(entry.path().filename().string(), ".snapshot")) truncated = entry.path();
  }
  ASSERT_FALSE(truncated.empty());
  std::filesystem::resize_file(truncated, std::filesystem::file_size(truncated) / 2);
  cluster_->StartTaskManager();
  ASSERT_TRUE(WaitUntilRunning(job, 2)) << cluster_->Logs();
  nlohmann::json status = cluster_->WeirJson({"status", job});
  EXPECT_LT(status["restored_checkpoint_id"].get<int64_t>(), second) << status.dump(2);
  EXPECT_GT(status["restored_checkpoint_id"].get<int64_t>(), 0) << status.dump(2);
  const std::string log = cluster_->jobmanager().Log();
  EXPECT_TRUE(absl::StrContains(log, absl::StrCat("NOT restoring from checkpoint ", newest))) << log;
  EXPECT_TRUE(absl::StrContains(log, absl::StrCat("NOT restoring from checkpoint ", second))) << log;
  EXPECT_TRUE(absl::StrContains(log, absl::StrCat(truncated, " has "))) << log;
  // The state is right: the counts go on from the first batch's.
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, KeyedCountBatch(2000, 2000, 100, &truth)).ok());
  std::map<std::string, int64_t> last;
  EXPECT_TRUE(WaitFor([&] {
    last = LastCounts(out);
    return last == truth;
  }, absl::Seconds(60), absl::Seconds(1))) << cluster_->Logs();
  cluster_->Weir({"cancel", job});
}

// A full checkpoint file system: a small tmpfs as state.checkpoints.dir,
// filled up while the job runs. Checkpoints fail with the path and the
// reason (no space), the job keeps running and its output stays exact, and
// once there is room again checkpoints complete. Needs root to mount the
// tmpfs (skipped, saying so, where mounting is not allowed).
TEST_F(RecoveryTest, AFullCheckpointDirectoryFailsCheckpointsUntilThereIsRoom) {
  const std::string mount = weir::testing::MakeTempDir("weir-full-chk");
  if (std::system(absl::StrCat("mount -t tmpfs -o size=8m tmpfs ", mount, " 2>/dev/null").c_str()) != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  }
  struct Unmount {
    std::string dir;
    ~Unmount() { std::system(absl::StrCat("umount -l ", dir).c_str()); }
  } unmount{mount};
  cluster_ = std::make_unique<LocalCluster>(
      LocalCluster::Options{2, 1, {absl::StrCat("-Dstate.checkpoints.dir=", mount)}, ""});
  cluster_->Start();
  const std::string in = NewTopic("full-in"), out = NewTopic("full-out");
  const std::string job = Submit({"-p", "2", "-Dexecution.checkpointing.interval=300ms"}, in, out);
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
  ASSERT_TRUE(WaitForCompletedCheckpoint(job, 1)) << cluster_->Logs();

  // Fill the file system to the last byte.
  const std::string filler = mount + "/filler";
  std::system(absl::StrCat("dd if=/dev/zero of=", filler, " bs=64k 2>/dev/null").c_str());
  std::map<std::string, int64_t> truth;
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, KeyedCountBatch(0, 2000, 100, &truth)).ok());
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(cluster_->Logs(), "No space left on device"); },
                      absl::Seconds(60), absl::Milliseconds(200)))
      << cluster_->Logs();
  nlohmann::json status = cluster_->WeirJson({"status", job});
  EXPECT_EQ(status["state"], "RUNNING") << status.dump(2);
  const int64_t completed = cluster_->WeirJson({"checkpoints", job})["completed"].get<int64_t>();
  const std::string logs = cluster_->Logs();
  EXPECT_TRUE(absl::StrContains(logs, mount)) << "the failure does not name the directory\n" << logs;

  // Room again: checkpoints complete and the counts are exact.
  std::filesystem::remove(filler);
  EXPECT_TRUE(WaitFor([&] {
    nlohmann::json c = cluster_->WeirJson({"checkpoints", job});
    return !c.is_null() && c["completed"].get<int64_t>() >= completed + 2;
  }, absl::Seconds(60))) << cluster_->Logs();
  EXPECT_TRUE(WaitFor([&] { return LastCounts(out) == truth; }, absl::Seconds(60), absl::Milliseconds(500)))
      << cluster_->Logs();
  EXPECT_EQ(cluster_->WeirJson({"status", job})["attempt"].get<int>(), 1) << "the job restarted";
  cluster_->Weir({"cancel", job});
  cluster_.reset();
}

// A checkpoint whose task takes longer than execution.checkpointing.timeout
// expires: the JobManager aborts it, logs which task it waited for, the job
// keeps running (tolerable failures default to unlimited) and the next
// checkpoint completes.
TEST_F(RecoveryTest, ASlowCheckpointExpiresAndTheNextCompletes) {
  StartCluster(1);
  std::string error;
  const std::string job = cluster_->Submit(
      kJobs + "/test/slow_checkpoint.so",
      {"-p", "1", "-Dexecution.checkpointing.interval=200ms", "-Dexecution.checkpointing.timeout=1s"},
      {"--slow-checkpoint", "2", "--sleep-ms", "2500"}, &error);
  ASSERT_FALSE(job.empty()) << error << cluster_->Logs();
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
  ASSERT_TRUE(WaitForCompletedCheckpoint(job, 1, /*after_id=*/2)) << cluster_->Logs();

  nlohmann::json c = cluster_->WeirJson({"checkpoints", job});
  ASSERT_FALSE(c.is_null());
  bool expired = false, completed_after = false;
  for (const auto& cp : c["checkpoints"]) {
    if (cp["id"] == 2) {
      EXPECT_EQ(cp["status"], "FAILED") << cp.dump();
      EXPECT_TRUE(absl::StrContains(cp["failure_reason"].get<std::string>(), "expired after")) << cp.dump();
      expired = true;
    }
    if (cp["id"].get<int64_t>() > 2 && cp["status"] == "COMPLETED") completed_after = true;
  }
  EXPECT_TRUE(expired) << c.dump(2);
  EXPECT_TRUE(completed_after) << c.dump(2);
  const std::string log = cluster_->jobmanager().Log();
  EXPECT_TRUE(absl::StrContains(log, "expired after")) << log;
  nlohmann::json status = cluster_->WeirJson({"status", job});
  EXPECT_EQ(status["state"], "RUNNING") << status.dump(2);
  EXPECT_EQ(status["restarts"].get<int>(), 0) << status.dump(2);
  cluster_->Weir({"cancel", job});
}

}  // namespace
}  // namespace weir
