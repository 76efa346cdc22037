// Exactly-once through broker faults: kafka_copy and keyed_count run
// exactly-once on a real Weir cluster against a three-node Kafka cluster
// (scripts/kafka.sh start-cluster: replication 3, min.insync.replicas 2,
// the transaction state log replicated 3) while the test SIGKILLs and
// restarts one broker at a time — the transaction coordinator of one of the
// sink's transactional ids, the leader of an output partition, the leader of
// an input partition, and a coordinator again together with a TaskManager
// (the job restarts and its recovery commit has to find the coordinator's
// successor) — with input arriving all along. Afterwards every
// input record is in the read_committed output exactly once (keyed_count:
// every word counted 1, 2, ..., n), no transaction is left open, and the job
// is RUNNING: it may have restarted, never failed.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "connectors/kafka/kafka_admin.h"
#include "gtest/gtest.h"
#include "tests/kafka/cluster_job_test.h"
#include "tests/kafka/kafka_cluster.h"
#include "tests/kafka/kafka_io.h"
#include "tests/kafka/test_kafka.h"
#include "tests/testing/local_cluster.h"

namespace weir {
namespace {

using test::KafkaMessage;
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

// What one bounce hit, for the report the test prints.
struct Bounce {
  std::string aimed_at;  // the role the node was picked for
  int node = 0;
  std::string roles;     // everything it held when it was killed
  int written = 0;       // input records written by then
  int64_t down_ms = 0;   // SIGKILL until it served again
};

class BrokerChaosTest : public testing::ClusterJobTest {
 protected:
  void SetUp() override {
    ClusterJobTest::SetUp();
    kafka_ = test::TestKafkaCluster::FromEnvironment();
    ASSERT_TRUE(kafka_.has_value());
    ASSERT_EQ(kafka_->nodes(), 3) << "these tests need the three-node cluster of the kafka_cluster fixture";
    // A node bounced by an earlier test is back in every ISR.
    ASSERT_TRUE(WaitUntilInSync()) << LaggingPartitions();
  }

  // A topic of 4 partitions on all three nodes.
  std::string NewReplicatedTopic(const std::string& prefix) {
    const std::string topic = test::UniqueTopicName(prefix);
    const absl::Status created = connectors::kafka_admin::CreateTopic(bootstrap_, topic, 4, /*replication_factor=*/3);
    EXPECT_TRUE(created.ok()) << created;
    const absl::Status everywhere = kafka_->WaitForTopicOnEveryNode(topic, 4);
    EXPECT_TRUE(everywhere.ok()) << everywhere;
    return topic;
  }

  std::string LaggingPartitions() const {
    auto lagging = kafka_->UnderReplicated();
    if (!lagging.ok()) return std::string(lagging.status().message());
    return absl::StrJoin(*lagging, "; ");
  }

  // Every partition of every topic (the transaction state log and the
  // consumer offsets too) with all its replicas in sync.
  bool WaitUntilInSync() {
    return WaitFor([&] {
      auto lagging = kafka_->UnderReplicated();
      return lagging.ok() && lagging->empty();
    }, absl::Seconds(120), absl::Milliseconds(250));
  }

  // The sink's transactional ids, from the sinks' start lines
  // ("transactional ids <prefix>-<subtask>-0..<n>").
  std::vector<std::string> TransactionalIds() const {
    std::set<std::string> ids;
    const std::string logs = cluster_->Logs();
    const std::string kMarker = "transactional ids ";
    for (size_t at = logs.find(kMarker); at != std::string::npos; at = logs.find(kMarker, at + 1)) {
      const size_t begin = at + kMarker.size();
      const size_t end = logs.find_first_of(" ,;\n", begin);
      const std::string range = logs.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
      const std::vector<std::string> parts = absl::StrSplit(range, "..");
      int last = 0;
      if (parts.size() == 2 && absl::EndsWith(parts[0], "-0") && absl::SimpleAtoi(parts[1], &last)) {
        const std::string stem = parts[0].substr(0, parts[0].size() - 1);
        for (int k = 0; k <= last; ++k) ids.insert(absl::StrCat(stem, k));
      } else {
        ids.insert(parts[0]);
      }
    }
    return {ids.begin(), ids.end()};
  }

  // What `node` is to the job now: coordinator of which transactional ids,
  // leader of which input and output partitions.
  std::string RolesOf(int node, const std::vector<std::string>& ids, const std::string& in, const std::string& out) {
    std::vector<std::string> roles;
    int coordinated = 0;
    for (const std::string& id : ids) {
      auto coordinator = kafka_->TransactionCoordinator(id);
      if (coordinator.ok() && *coordinator == node) ++coordinated;
    }
    if (coordinated > 0) roles.push_back(absl::StrCat("coordinator of ", coordinated, "/", ids.size(), " sink ids"));
    for (const auto& [what, topic] : {std::pair<std::string, std::string>{"input", in}, {"output", out}}) {
      auto leaders = kafka_->Leaders(topic);
      if (!leaders.ok()) continue;
      std::vector<int32_t> led;
      for (const auto& [partition, leader] : *leaders) {
        if (leader == node) led.push_back(partition);
      }
      if (!led.empty()) roles.push_back(absl::StrCat("leader of ", what, " partitions ", absl::StrJoin(led, ",")));
    }
    return roles.empty() ? "nothing of the job's" : absl::StrJoin(roles, ", ");
  }

  // The node to kill for `aim`: "coordinator" (of one of the sink's
  // transactional ids, at random), "output leader", "input leader" (of a
  // partition at random). 0 when it cannot be found.
  int PickNode(const std::string& aim, const std::vector<std::string>& ids, const std::string& in,
               const std::string& out, std::mt19937& random, std::string* detail) {
    if (absl::StartsWith(aim, "coordinator")) {
      if (ids.empty()) {
        *detail = "no transactional id found in the sinks' start lines (\"transactional ids <prefix>-<subtask>-0..<n>\")";
        return 0;
      }
      const std::string& id = ids[std::uniform_int_distribution<size_t>(0, ids.size() - 1)(random)];
      auto coordinator = kafka_->TransactionCoordinator(id);
      if (!coordinator.ok()) {
        *detail = std::string(coordinator.status().message());
        return 0;
      }
      *detail = absl::StrCat("transaction coordinator of '", id, "'");
      return *coordinator;
    }
    const std::string& topic = aim == "output leader" ? out : in;
    auto leaders = kafka_->Leaders(topic);
    if (!leaders.ok() || leaders->empty()) {
      *detail = leaders.ok() ? "no partitions" : std::string(leaders.status().message());
      return 0;
    }
    auto it = leaders->begin();
    std::advance(it, std::uniform_int_distribution<size_t>(0, leaders->size() - 1)(random));
    *detail = absl::StrCat("leader of ", aim == "output leader" ? "output" : "input", " partition ", it->first);
    return it->second;
  }

  // The newest checkpoint id the JobManager knows of (any status), or 0.
  int64_t NewestCheckpoint(const std::string& job) {
    int64_t newest = 0;
    nlohmann::json c = cluster_->WeirJson({"checkpoints", job});
    if (c.is_null()) return newest;
    for (const auto& cp : c["checkpoints"]) newest = std::max(newest, cp["id"].get<int64_t>());
    return newest;
  }

  // Writes make(first, kBatch) batches to `in` every 100 ms while SIGKILLing
  // and restarting one broker per entry of `aims`; each bounce waits for a
  // checkpoint completed since the previous one and for every replica back
  // in sync (min.insync.replicas 2 of 3 tolerates one node down, not two).
  // Returns the records written (a multiple of kBatch), or -1 after a
  // failure it recorded.
  template <typename MakeBatch>
  int WriteWhileBouncingBrokers(const std::string& job, const std::string& in, const std::string& out,
                                const std::vector<std::string>& aims, MakeBatch make, std::vector<Bounce>* bounces) {
    std::atomic<bool> stop{false}, writer_failed{false};
    std::atomic<int> written{0};
    std::thread writer([&] {
      // Some input before the first kill and some after the last.
      while (!stop) {
        const int first = written.load();
        if (!test::ProduceMessages(bootstrap_, in, make(first, kBatch)).ok()) writer_failed = true;
        written = first + kBatch;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
    struct StopWriter {
      std::atomic<bool>* stop;
      std::thread* writer;
      ~StopWriter() {
        *stop = true;
        if (writer->joinable()) writer->join();
      }
    } stop_writer{&stop, &writer};

    std::mt19937 random(std::random_device{}());
    bool ok = true;
    int64_t checkpoint = 0;
    for (size_t b = 0; b < aims.size() && ok; ++b) {
      // The job made progress since the last bounce: a checkpoint completed.
      if (!WaitForCompletedCheckpoint(job, 1, checkpoint)) {
        ADD_FAILURE() << "no checkpoint completed before bounce " << b + 1;
        ok = false;
        break;
      }
      if (JobFailed(job)) {
        ok = false;
        break;
      }
      const std::vector<std::string> ids = TransactionalIds();
      Bounce bounce;
      bounce.node = PickNode(aims[b], ids, in, out, random, &bounce.aimed_at);
      if (bounce.node < 1 || bounce.node > kafka_->nodes()) {
        ADD_FAILURE() << "cannot find the " << aims[b] << " (node " << bounce.node << "): " << bounce.aimed_at;
        ok = false;
        break;
      }
      bounce.roles = RolesOf(bounce.node, ids, in, out);
      absl::SleepFor(absl::Milliseconds(std::uniform_int_distribution<int>(0, 500)(random)));
      bounce.written = written.load();
      const nlohmann::json before = cluster_->WeirJson({"status", job});
      const int attempt = before.is_null() ? 1 : before["attempt"].get<int>();
      const absl::Time killed = absl::Now();
      if (absl::Status s = kafka_->KillNode(bounce.node); !s.ok()) {
        ADD_FAILURE() << s;
        ok = false;
        break;
      }
      const bool with_taskmanager = absl::EndsWith(aims[b], "and a TaskManager");
      if (with_taskmanager) {
        // The job restarts while the coordinator is down or moving: the
        // recovery commit of the restored checkpoint's transactions has to
        // find the new one.
        const int taskmanager = BusyTaskManager(job, random);
        cluster_->KillTaskManager(taskmanager);
        cluster_->StartTaskManager();
        absl::StrAppend(&bounce.roles, "; with TaskManager ", cluster_->taskmanager_id(taskmanager));
      }
      std::printf("bounce %zu: SIGKILLed node %d, the %s (%s), at %d records written\n", b + 1, bounce.node,
                  bounce.aimed_at.c_str(), bounce.roles.c_str(), bounce.written);
      std::fflush(stdout);
      checkpoint = NewestCheckpoint(job);
      if (absl::Status s = kafka_->StartNode(bounce.node); !s.ok()) {
        ADD_FAILURE() << s;
        ok = false;
        break;
      }
      bounce.down_ms = absl::ToInt64Milliseconds(absl::Now() - killed);
      if (with_taskmanager && !WaitUntilRunning(job, attempt + 1)) {
        ADD_FAILURE() << "the job did not come back after bounce " << b + 1;
        ok = false;
      }
      if (!WaitUntilInSync()) {
        ADD_FAILURE() << "node " << bounce.node << " did not rejoin every ISR: " << LaggingPartitions();
        ok = false;
      }
      bounces->push_back(bounce);
    }
    // One more completed checkpoint with the cluster whole, then the last
    // input.
    if (ok && !WaitForCompletedCheckpoint(job, 1, checkpoint)) {
      ADD_FAILURE() << "no checkpoint completed after the last bounce";
      ok = false;
    }
    stop = true;
    writer.join();
    EXPECT_FALSE(writer_failed.load()) << "the test's own writer failed to produce";
    return ok && !writer_failed.load() && !JobFailed(job) ? written.load() : -1;
  }

  // Whether the job has ended FAILED (recorded as a test failure).
  bool JobFailed(const std::string& job) {
    nlohmann::json s = cluster_->WeirJson({"status", job});
    if (!s.is_null() && s["state"] == "FAILED") {
      ADD_FAILURE() << "the job FAILED: " << s.dump(2);
      return true;
    }
    return false;
  }

  // The output once the input is drained: reads `out` until it holds
  // `records` records (180 s at most), waits until no transaction stays
  // open on it, then reads it again, so that a duplicate committed late
  // shows. `what` names the records in the failure.
  std::vector<KafkaMessage> ReadSettledOutput(const std::string& out, int records, const std::string& what) {
    std::vector<KafkaMessage> output;
    const bool complete = ReadUntil(bootstrap_, out, absl::Seconds(180), &output, [&](const auto& read) {
      return static_cast<int>(read.size()) >= records;
    });
    EXPECT_TRUE(complete) << "the output did not reach " << records << " " << what << "\n" << cluster_->Logs();
    EXPECT_TRUE(NoTransactionStaysOpen(bootstrap_, out)) << "a transaction is still open on the output";
    if (auto again = test::ReadTopic(bootstrap_, out); again.ok()) {
      output = *std::move(again);
    } else {
      ADD_FAILURE() << again.status();
    }
    return output;
  }

  // The figures line of a test, and its job's end state checks: RUNNING,
  // restarts counted, no data loss in any log.
  void CheckJobAndReport(const std::string& what, const std::string& job, int records, size_t output,
                         const std::vector<Bounce>& bounces, absl::Time started) {
    const nlohmann::json status = cluster_->WeirJson({"status", job});
    ASSERT_FALSE(status.is_null());
    EXPECT_EQ(status["state"], "RUNNING") << status.dump(2);
    const std::string logs = cluster_->Logs();
    EXPECT_FALSE(absl::StrContains(logs, "DATA LOSS")) << logs;
    int64_t down_ms = 0;
    for (const Bounce& b : bounces) down_ms += b.down_ms;
    int recovery_commits = 0;
    for (size_t at = logs.find("of restored checkpoint"); at != std::string::npos;
         at = logs.find("of restored checkpoint", at + 1)) {
      ++recovery_commits;
    }
    std::printf("%s: %d records in, %zu read_committed out, %zu broker bounces (%.1f s down in all), "
                "%d job restarts (attempt %d), %d transactions committed at recovery, %.0f s\n",
                what.c_str(), records, output, bounces.size(), down_ms / 1000.0, status["restarts"].get<int>(),
                status["attempt"].get<int>(), recovery_commits, absl::ToDoubleSeconds(absl::Now() - started));
    // How the recovery commits went (the protocol client's last line for
    // each: at which coordinator, after how many attempts).
    for (absl::string_view line : absl::StrSplit(logs, '\n')) {
      if (absl::StrContains(line, "at coordinator") && absl::StrContains(line, ": done (attempt")) {
        std::printf("  recovery commit: %s\n", std::string(line).c_str());
      }
      if (absl::StrContains(line, " RESTARTING in ")) std::printf("  restart: %s\n", std::string(line).c_str());
    }
    for (size_t i = 0; i < bounces.size(); ++i) {
      std::printf("  bounce %zu: node %d, picked as the %s; it was %s; down %.1f s; %d records written before\n",
                  i + 1, bounces[i].node, bounces[i].aimed_at.c_str(), bounces[i].roles.c_str(),
                  bounces[i].down_ms / 1000.0, bounces[i].written);
    }
  }

  std::string Submit(const std::string& binary, const std::string& in, const std::string& out) {
    std::string error;
    const std::string job = cluster_->Submit(
        kJobs + "/" + binary,
        {"-p", "2", "-Dexecution.checkpointing.interval=500ms", "-Drestart-strategy.type=fixed-delay",
         "-Drestart-strategy.fixed-delay.attempts=50", "-Drestart-strategy.fixed-delay.delay=500ms"},
        {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", out, "--guarantee", "exactly-once"}, &error);
    EXPECT_FALSE(job.empty()) << error << cluster_->Logs();
    return job;
  }

  static constexpr int kBatch = 1000;
  // Each test bounces these, in this order: a node is picked for the role
  // at the moment of the kill (the coordinator of a sink id at random each
  // time, so the second coordinator kill may hit another node). The last
  // one SIGKILLs a TaskManager running the job right after the broker, so
  // that the job restarts and commits its restored checkpoint's
  // transactions while the coordinator is away.
  const std::vector<std::string> kAims = {"coordinator", "output leader", "input leader",
                                          "coordinator and a TaskManager"};

  std::optional<test::TestKafkaCluster> kafka_;
};

TEST_F(BrokerChaosTest, CopyIsExactlyOnceAcrossBrokerBounces) {
  const absl::Time started = absl::Now();
  StartCluster(2);
  const std::string in = NewReplicatedTopic("bc-copy-in"), out = NewReplicatedTopic("bc-copy-out");
  const std::string job = Submit("kafka_copy.so", in, out);
  ASSERT_FALSE(job.empty());
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
  test::LiveReader live(bootstrap_, out);  // a downstream reader during all of it

  std::vector<Bounce> bounces;
  const int records = WriteWhileBouncingBrokers(job, in, out, kAims, Sequence, &bounces);
  ASSERT_GT(records, 0) << cluster_->Logs();

  std::vector<KafkaMessage> output = ReadSettledOutput(out, records, "records");
  const std::vector<KafkaMessage> seen_live = live.Stop();

  int missing = 0, duplicated = 0;
  ASSERT_NO_FATAL_FAILURE(CheckEveryValueOnce(output, records, &missing, &duplicated));
  EXPECT_EQ(missing, 0);
  EXPECT_EQ(duplicated, 0);
  EXPECT_EQ(static_cast<int>(output.size()), records);
  // In order per key.
  int out_of_order = 0;
  ASSERT_NO_FATAL_FAILURE(CheckOrderPerKey(&output, &out_of_order));
  EXPECT_EQ(out_of_order, 0);
  // The reader during the faults never saw a record twice.
  const int live_duplicated = CountSeenTwiceLive(CountValues(seen_live));
  EXPECT_EQ(live_duplicated, 0);
  std::printf("kafka_copy: %d missing, %d duplicated, %d out of order; the reader during the faults saw %zu "
              "records, %d twice\n",
              missing, duplicated, out_of_order, seen_live.size(), live_duplicated);
  CheckJobAndReport("kafka_copy exactly-once", job, records, output.size(), bounces, started);
  EXPECT_EQ(bounces.size(), kAims.size());
  ASSERT_EQ(cluster_->Weir({"cancel", job}).exit_code, 0);
}

TEST_F(BrokerChaosTest, KeyedCountIsExactlyOnceAcrossBrokerBounces) {
  const absl::Time started = absl::Now();
  StartCluster(2);
  const std::string in = NewReplicatedTopic("bc-count-in"), out = NewReplicatedTopic("bc-count-out");
  const std::string job = Submit("keyed_count.so", in, out);
  ASSERT_FALSE(job.empty());
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();

  constexpr int kDistinct = 300;
  auto words = [](int first, int n) {
    std::vector<KafkaMessage> batch;
    for (int i = first; i < first + n; ++i) batch.push_back({absl::StrCat("id-", i), absl::StrCat("w", i % kDistinct)});
    return batch;
  };
  std::vector<Bounce> bounces;
  const int records = WriteWhileBouncingBrokers(job, in, out, kAims, words, &bounces);
  ASSERT_GT(records, 0) << cluster_->Logs();
  std::map<std::string, int> truth;
  for (int i = 0; i < records; ++i) ++truth[absl::StrCat("w", i % kDistinct)];

  std::vector<KafkaMessage> output = ReadSettledOutput(out, records, "counts");
  // Per word, in its partition's order: 1, 2, ..., n.
  std::map<std::string, int> counted;
  int out_of_sequence = 0;
  ASSERT_NO_FATAL_FAILURE(CheckCountSequences(&output, &counted, &out_of_sequence));
  EXPECT_EQ(out_of_sequence, 0);
  EXPECT_EQ(static_cast<int>(output.size()), records);
  EXPECT_EQ(counted, truth);
  std::printf("keyed_count: %zu words, %d counts out of sequence\n", truth.size(), out_of_sequence);
  CheckJobAndReport("keyed_count exactly-once", job, records, output.size(), bounces, started);
  EXPECT_EQ(bounces.size(), kAims.size());
  ASSERT_EQ(cluster_->Weir({"cancel", job}).exit_code, 0);
}

// A job that starts while the leader of one of its input partitions is
// down (SIGKILLed, not yet fenced by the controller, so the metadata still
// names it): its Kafka sources ask every partition's offsets at start, and
// an answer from a broker that is not (or no longer) the leader, or none,
// is retried until the leader moved, within the source's open timeout
// (20 s; the controller fences a dead broker after 9 s). The job ends
// FINISHED with every record, without a restart: a source task that failed
// at the first NOT_LEADER answer would end it FAILED here (no restarts).
TEST_F(BrokerChaosTest, SourcesStartWhileAnInputLeaderIsDown) {
  StartCluster(2);
  const std::string in = NewReplicatedTopic("bc-start-in"), out = NewReplicatedTopic("bc-start-out");
  constexpr int kRecords = 4000;
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, Sequence(0, kRecords)).ok());
  auto leaders = kafka_->Leaders(in);
  ASSERT_TRUE(leaders.ok()) << leaders.status();
  const int node = leaders->begin()->second;
  ASSERT_TRUE(kafka_->KillNode(node).ok());
  struct Restart {
    const test::TestKafkaCluster* kafka;
    int node;
    ~Restart() { EXPECT_TRUE(kafka->StartNode(node).ok()); }
  } restart{&*kafka_, node};
  std::string error;
  const std::string job = cluster_->Submit(
      kJobs + "/kafka_copy.so", {"-p", "2", "-Drestart-strategy.type=none"},
      {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", out, "--guarantee", "at-least-once",
       "--bounded"},
      &error);
  ASSERT_FALSE(job.empty()) << error << cluster_->Logs();
  const nlohmann::json status = cluster_->WaitForJobEnd(job, absl::Seconds(120));
  EXPECT_EQ(status["state"], "FINISHED") << status.dump(2) << cluster_->Logs();
  std::vector<KafkaMessage> output;
  EXPECT_TRUE(ReadUntil(bootstrap_, out, absl::Seconds(60), &output, [&](const auto& read) {
    return static_cast<int>(read.size()) >= kRecords;
  })) << output.size() << " of " << kRecords;
  std::printf("a job started with node %d (leader of input partition %d) down: %s, %zu of %d records copied\n", node,
              leaders->begin()->first, status["state"].get<std::string>().c_str(), output.size(), kRecords);
}

}  // namespace
}  // namespace weir
