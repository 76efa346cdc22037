// Jobs on a real cluster against the real Kafka broker: the example jobs
// end to end, backpressure, and every kind of bad input a user can hand in.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "librdkafka/rdkafkacpp.h"
#include "tests/kafka/cluster_job_test.h"
#include "tests/kafka/kafka_io.h"
#include "tests/kafka/test_kafka.h"
#include "tests/testing/certificates.h"
#include "tests/testing/http_get.h"
#include "tests/testing/local_cluster.h"

namespace weir {
namespace {

using testing::LocalCluster;
using testing::WaitFor;
using test::KafkaMessage;

const std::string kJobs = WEIR_JOBS_DIR;

class JobPipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    bootstrap_ = test::TestKafkaBootstrap();
    ASSERT_FALSE(bootstrap_.empty());
  }

  // A cluster of two TaskManagers with one slot each, so that a job with
  // parallelism 2 spans both.
  void StartCluster(std::vector<std::string> config = {}, std::string auth_token = "") {
    cluster_ = std::make_unique<LocalCluster>(LocalCluster::Options{2, 1, std::move(config), std::move(auth_token)});
    cluster_->Start();
  }

  std::string NewTopic(const std::string& prefix, int partitions = 4) {
    std::string topic = test::UniqueTopicName(prefix);
    absl::Status created = test::CreateTopic(bootstrap_, topic, partitions);
    EXPECT_TRUE(created.ok()) << created;
    return topic;
  }

  std::string SubmitOrFail(const std::string& binary, std::vector<std::string> options, std::vector<std::string> args) {
    std::string error;
    std::string job = cluster_->Submit(binary, options, args, &error);
    EXPECT_FALSE(job.empty()) << error << cluster_->Logs();
    return job;
  }

  // Waits until the job and every one of its tasks are RUNNING.
  bool WaitUntilRunning(const std::string& job) {
    return WaitFor([&] {
      nlohmann::json s = cluster_->WeirJson({"status", job});
      if (s.is_null() || s["state"] != "RUNNING") return false;
      for (const auto& t : s["tasks"]) {
        if (t["state"] != "RUNNING") return false;
      }
      return true;
    }, absl::Seconds(60));
  }

  std::string bootstrap_;
  std::unique_ptr<LocalCluster> cluster_;
};

std::vector<KafkaMessage> NumberedInput(int n, int distinct_values) {
  std::vector<KafkaMessage> input;
  for (int i = 0; i < n; ++i) {
    input.push_back({absl::StrCat("id-", i), absl::StrCat("value-", i % distinct_values)});
  }
  return input;
}

TEST_F(JobPipelineTest, KafkaCopyCopiesEveryRecordAcrossTwoTaskManagers) {
  // With a shared secret, as a cluster beyond loopback must have: submission,
  // deployment, binary download and data exchange all carry it.
  StartCluster({}, "pipeline-secret");
  std::string in = NewTopic("copy-in"), out = NewTopic("copy-out");
  std::vector<KafkaMessage> input = NumberedInput(40000, 40000);
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, input).ok());

  // The parallelism as -Dparallelism.default, which the client takes when
  // -p is not given.
  std::string job = SubmitOrFail(kJobs + "/kafka_copy.so", {"-Dparallelism.default=2"},
                                 {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", out,
                                  "--guarantee", "at-least-once", "--bounded"});
  ASSERT_FALSE(job.empty());
  nlohmann::json status = cluster_->WaitForJobEnd(job);
  ASSERT_EQ(status["state"], "FINISHED") << status.dump(2) << cluster_->Logs();
  EXPECT_EQ(status["parallelism"], 2) << status.dump(2);

  // Both TaskManagers ran a subtask.
  std::set<std::string> taskmanagers;
  int64_t records_in = 0;
  for (const auto& task : status["tasks"]) {
    taskmanagers.insert(task["taskmanager_id"].get<std::string>());
    records_in += task["records_in"].get<int64_t>();
    EXPECT_EQ(task["state"], "FINISHED");
  }
  EXPECT_EQ(taskmanagers.size(), 2u) << status.dump(2);
  EXPECT_EQ(records_in, 40000) << status.dump(2);

  auto output = test::ReadTopic(bootstrap_, out);
  ASSERT_TRUE(output.ok()) << output.status();
  std::multiset<std::pair<std::string, std::string>> expected, actual;
  for (const auto& m : input) expected.insert({*m.key, m.value});
  for (const auto& m : *output) actual.insert({m.key.value_or("<null>"), m.value});
  EXPECT_EQ(actual.size(), expected.size());
  EXPECT_TRUE(actual == expected) << "the output differs from the input";
}

// How a task ended reaches the JobManager even when the task's own final
// report is lost: from its TaskManager's metrics report (which carries the
// final state once), and failing that from the task's absence in several of
// those reports in a row, which fails the attempt instead of leaving the job
// RUNNING forever.
TEST_F(JobPipelineTest, HowTasksEndedReachesTheJobManagerWhenTheirReportsAreLost) {
  StartCluster({"-Dtest.drop-final-task-reports=state-reports"});
  const std::string in = NewTopic("lost-reports-in"), out = NewTopic("lost-reports-out");
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, NumberedInput(2000, 2000)).ok());
  const std::vector<std::string> args = {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", out,
                                         "--guarantee", "at-least-once", "--bounded"};
  std::string job = SubmitOrFail(kJobs + "/kafka_copy.so", {"-p", "2"}, args);
  ASSERT_FALSE(job.empty());
  nlohmann::json status = cluster_->WaitForJobEnd(job, absl::Seconds(120));
  EXPECT_EQ(status["state"], "FINISHED") << status.dump(2) << cluster_->Logs();
  std::string logs = cluster_->Logs();
  EXPECT_TRUE(absl::StrContains(logs, "TEST: dropping the final state report (TASK_FINISHED)")) << logs;
  EXPECT_TRUE(absl::StrContains(logs, "which its own report did not tell")) << logs;

  // Nothing tells how the tasks ended: after a few reports without them
  // the attempt fails, saying why.
  cluster_.reset();
  StartCluster({"-Dtest.drop-final-task-reports=all"});
  job = SubmitOrFail(kJobs + "/kafka_copy.so", {"-p", "2", "-Drestart-strategy.type=none"}, args);
  ASSERT_FALSE(job.empty());
  status = cluster_->WaitForJobEnd(job, absl::Seconds(120));
  EXPECT_EQ(status["state"], "FAILED") << status.dump(2) << cluster_->Logs();
  EXPECT_TRUE(absl::StrContains(status["error"].get<std::string>(), "no longer runs it, and how it ended never arrived"))
      << status.dump(2);
}

// Under mutual TLS and a token, as a production cluster runs: deployment,
// binary download and the keyed exchange between the TaskManagers all go
// over TLS.
TEST_F(JobPipelineTest, KeyedCountCountsExactlyPerKeyAcrossTaskManagersOverTls) {
  const std::string certs = testing::MakeTempDir("weir-pipeline-certs");
  const testing::CertificateFiles ca = testing::MakeCertificateAuthority(certs, "ca");
  const testing::CertificateFiles member = testing::IssueCertificate(ca, certs, "member");
  const std::vector<std::string> tls = testing::TlsSettings(member, ca.cert);
  cluster_ = std::make_unique<LocalCluster>(LocalCluster::Options{
      .taskmanagers = 2, .slots_per_taskmanager = 1, .config = tls, .auth_token = "tls-secret", .client_config = tls});
  cluster_->Start();
  EXPECT_TRUE(absl::StrContains(cluster_->Logs(), "TLS on for every RPC")) << cluster_->Logs();
  std::string in = NewTopic("count-in"), out = NewTopic("count-out");
  const int n = 30000, distinct = 1000;
  std::vector<KafkaMessage> input = NumberedInput(n, distinct);
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, input).ok());

  std::string job = SubmitOrFail(kJobs + "/keyed_count.so", {"-p", "2"},
                                 {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", out, "--bounded"});
  ASSERT_FALSE(job.empty());
  nlohmann::json status = cluster_->WaitForJobEnd(job);
  ASSERT_EQ(status["state"], "FINISHED") << status.dump(2) << cluster_->Logs();

  // The keyed part ran on both TaskManagers, so records crossed between them.
  std::set<std::string> counting_taskmanagers;
  for (const auto& task : status["tasks"]) {
    if (absl::StrContains(task["name"].get<std::string>(), "CountPerKey")) {
      counting_taskmanagers.insert(task["taskmanager_id"].get<std::string>());
      EXPECT_GT(task["records_in"].get<int64_t>(), 0) << status.dump(2);
    }
  }
  EXPECT_EQ(counting_taskmanagers.size(), 2u) << status.dump(2);

  auto output = test::ReadTopic(bootstrap_, out);
  ASSERT_TRUE(output.ok()) << output.status();
  ASSERT_EQ(output->size(), static_cast<size_t>(n));
  // For every key: the counts 1..c, each once, in increasing order (a key's
  // records all go to one partition, in the order they were counted).
  std::map<std::string, std::vector<int64_t>> counts;
  for (const auto& m : *output) {
    ASSERT_TRUE(m.key.has_value());
    int64_t c = 0;
    ASSERT_TRUE(absl::SimpleAtoi(m.value, &c)) << m.value;
    counts[*m.key].push_back(c);
  }
  ASSERT_EQ(counts.size(), static_cast<size_t>(distinct));
  for (const auto& [key, seen] : counts) {
    ASSERT_EQ(seen.size(), static_cast<size_t>(n / distinct)) << key;
    for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], static_cast<int64_t>(i + 1)) << key;
  }
}

// A vertex that fans out to forward edges at parallelism 2 (not chained):
// the job finishes, with checkpoints on, and both sinks write everything.
TEST_F(JobPipelineTest, FanOutToForwardEdgesFinishesWithCheckpoints) {
  StartCluster();
  std::string in = NewTopic("fanout-in"), out = NewTopic("fanout-out");
  const int n = 4000;
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, NumberedInput(n, 100)).ok());
  std::string job = SubmitOrFail(kJobs + "/test/fan_out.so", {"-p", "2", "-Dexecution.checkpointing.interval=100ms"},
                                 {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", out, "--bounded"});
  ASSERT_FALSE(job.empty());
  nlohmann::json status = cluster_->WaitForJobEnd(job, absl::Seconds(120));
  ASSERT_EQ(status["state"], "FINISHED") << status.dump(2) << cluster_->Logs();
  auto output = test::ReadTopic(bootstrap_, out);
  ASSERT_TRUE(output.ok()) << output.status();
  EXPECT_EQ(output->size(), static_cast<size_t>(2 * n));
}

TEST_F(JobPipelineTest, SlowSinkSlowsTheSourceAndBuffersStayBounded) {
  // Small network buffers make the bound tight.
  StartCluster({"-Dtaskmanager.memory.segment-size=4kb", "-Dtaskmanager.network.memory.buffers-per-channel=2"});
  std::string in = NewTopic("slow-in", 1);
  const int n = 100000;
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, NumberedInput(n, n)).ok());
  std::string job = SubmitOrFail(kJobs + "/test/slow_sink.so", {"-p", "1"},
                                 {"--brokers", bootstrap_, "--input-topic", in, "--sleep-us", "500"});
  ASSERT_FALSE(job.empty());

  int64_t source_in = 0, sink_in = 0;
  auto read_counts = [&] {
    nlohmann::json status = cluster_->WeirJson({"status", job});
    if (status.is_null()) return false;
    for (const auto& task : status["tasks"]) {
      if (absl::StrContains(task["name"].get<std::string>(), "SlowSink")) {
        sink_in = task["records_in"];
      } else {
        source_in = task["records_in"];
      }
    }
    return sink_in >= 4000;
  };
  ASSERT_TRUE(WaitFor(read_counts, absl::Seconds(120))) << cluster_->Logs();
  // The source has all 100000 records available, yet it may be ahead of the
  // sink only by what fits in the buffers between them: producer queue and
  // consumer credits of 2 buffers of 4 KiB each, a buffer being filled, the
  // source's poll batch and the metrics' reporting lag (one second of sink
  // progress at 500 us per record).
  EXPECT_LT(source_in, n / 2) << "the source did not slow down";
  EXPECT_LE(source_in - sink_in, 8000) << "source " << source_in << ", sink " << sink_in;

  ASSERT_EQ(cluster_->Weir({"cancel", job}).exit_code, 0);
  nlohmann::json status = cluster_->WaitForJobEnd(job);
  EXPECT_EQ(status["state"], "CANCELED") << status.dump(2);
}

// The value of the first sample of `name` whose labels contain `label`
// (e.g. job_id="..."), or -1.
double MetricValue(const std::string& text, const std::string& name, const std::string& label) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, name + "{") || !absl::StrContains(line, label)) continue;
    double value = -1;
    if (absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &value)) return value;
  }
  return -1;
}

// What an operator watches while a job runs: the REST API and /metrics of the
// JobManager and the TaskManagers follow checkpoints, records and
// backpressure as they happen.
TEST_F(JobPipelineTest, RestApiAndMetricsFollowARunningJob) {
  StartCluster({}, "metrics-secret");
  std::string in = NewTopic("metrics-in", 1);
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, NumberedInput(30000, 30000)).ok());
  // A slow sink keeps the job running and its source backpressured.
  std::string job = SubmitOrFail(kJobs + "/test/slow_sink.so", {"-p", "1", "-Dexecution.checkpointing.interval=200ms"},
                                 {"--brokers", bootstrap_, "--input-topic", in, "--sleep-us", "200"});
  ASSERT_FALSE(job.empty());
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
  const std::string job_label = absl::StrCat("job_id=\"", job, "\"");

  // Each TaskManager serves its own tasks' figures; the source's Kafka lag
  // is there, first behind the input, then down to zero once the slow sink
  // has taken everything.
  nlohmann::json tms = nlohmann::json::parse(cluster_->RestGet("/taskmanagers").body)["taskmanagers"];
  ASSERT_EQ(tms.size(), 2u);
  auto scrape_taskmanagers = [&] {
    std::string all;
    for (const auto& tm : tms) {
      testing::HttpResult metrics = testing::HttpGet(tm["restPort"].get<int>(), "/metrics", "metrics-secret");
      EXPECT_EQ(metrics.status, 200);
      all += metrics.body;
    }
    return all;
  };
  const std::string lag_label = absl::StrCat("topic=\"", in, "\",partition=\"0\"");
  double lag = -1;
  ASSERT_TRUE(WaitFor([&] {
    lag = MetricValue(scrape_taskmanagers(), "weir_kafka_consumer_lag_records", lag_label);
    return lag > 0;
  }, absl::Seconds(30))) << "lag " << lag << "\n" << scrape_taskmanagers();

  EXPECT_EQ(cluster_->RestGet("/metrics").status, 200);
  EXPECT_EQ(testing::HttpGet(cluster_->rest_port(), "/metrics").status, 401);  // no token

  // Checkpoints complete, and both the REST API and /metrics count them up.
  auto completed = [&] {
    testing::HttpResult r = cluster_->RestGet(absl::StrCat("/jobs/", job, "/checkpoints"));
    return r.status == 200 ? nlohmann::json::parse(r.body)["counts"]["completed"].get<int64_t>() : -1;
  };
  int64_t first = -1;
  ASSERT_TRUE(WaitFor([&] { return (first = completed()) >= 1; }, absl::Seconds(60))) << cluster_->Logs();
  const double first_metric =
      MetricValue(cluster_->RestGet("/metrics").body, "weir_job_checkpoints_completed_total", job_label);
  EXPECT_GE(first_metric, 1);
  ASSERT_TRUE(WaitFor([&] { return completed() >= first + 2; }, absl::Seconds(60))) << cluster_->Logs();
  ASSERT_TRUE(WaitFor([&] {
    return MetricValue(cluster_->RestGet("/metrics").body, "weir_job_checkpoints_completed_total", job_label) >
           first_metric;
  }, absl::Seconds(30)));
  testing::HttpResult checkpoints = cluster_->RestGet(absl::StrCat("/jobs/", job, "/checkpoints"));
  const nlohmann::json latest = nlohmann::json::parse(checkpoints.body)["latest"]["completed"];
  ASSERT_FALSE(latest.is_null()) << checkpoints.body;
  EXPECT_EQ(latest["status"], "COMPLETED");
  EXPECT_GT(latest["state_size"].get<int64_t>(), 0) << latest.dump();  // the source's offsets at least
  EXPECT_EQ(latest["num_acknowledged_subtasks"], latest["num_subtasks"]);

  // Nothing the daemons wrote (the submission with its arguments, the job
  // binary, checkpoints, the job store) is readable by other users.
  int checked_files = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(cluster_->dir() + "/ha")) {
    const std::filesystem::perms perms = entry.symlink_status().permissions();
    EXPECT_EQ(perms & std::filesystem::perms::others_all, std::filesystem::perms::none) << entry.path();
    ++checked_files;
  }
  EXPECT_GT(checked_files, 3);

  // The job and its vertices, with records moving.
  nlohmann::json detail;
  ASSERT_TRUE(WaitFor([&] {
    detail = nlohmann::json::parse(cluster_->RestGet(absl::StrCat("/jobs/", job)).body);
    return !detail["vertices"].empty() && detail["vertices"].back()["metrics"]["read-records"].get<int64_t>() > 0;
  }, absl::Seconds(30))) << detail.dump(2);
  EXPECT_EQ(detail["state"], "RUNNING");
  EXPECT_EQ(detail["jid"], job);
  nlohmann::json jobs = nlohmann::json::parse(cluster_->RestGet("/jobs").body)["jobs"];
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0]["status"], "RUNNING");

  // The source waits for the slow sink: backpressured time grows, in the
  // JobManager's metrics and in its TaskManager's own.
  ASSERT_TRUE(WaitFor([&] {
    return MetricValue(cluster_->RestGet("/metrics").body, "weir_job_task_backpressured_seconds_total", job_label) > 0;
  }, absl::Seconds(60))) << cluster_->RestGet("/metrics").body;
  const std::string later_scrape = scrape_taskmanagers();
  EXPECT_GT(MetricValue(later_scrape, "weir_task_records_in_total", job_label), 0) << later_scrape;
  ASSERT_TRUE(WaitFor([&] {
    lag = MetricValue(scrape_taskmanagers(), "weir_kafka_consumer_lag_records", lag_label);
    return lag == 0;
  }, absl::Seconds(120))) << "lag " << lag << "\n" << scrape_taskmanagers();

  ASSERT_EQ(cluster_->Weir({"cancel", job}).exit_code, 0);
  nlohmann::json status = cluster_->WaitForJobEnd(job);
  EXPECT_EQ(status["state"], "CANCELED") << status.dump(2);
  testing::HttpResult after = cluster_->RestGet("/overview");
  EXPECT_EQ(nlohmann::json::parse(after.body)["jobs-cancelled"], 1) << after.body;
}

// The exactly-once sink's commits show on its TaskManager's /metrics, one
// per completed checkpoint that had records.
TEST_F(JobPipelineTest, ExactlyOnceSinkCountsItsCommittedTransactions) {
  StartCluster();
  std::string in = NewTopic("txn-metrics-in", 1), out = NewTopic("txn-metrics-out", 1);
  std::string job = SubmitOrFail(kJobs + "/kafka_copy.so", {"-p", "1", "-Dexecution.checkpointing.interval=200ms"},
                                 {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", out, "--guarantee",
                                  "exactly-once"});
  ASSERT_FALSE(job.empty());
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
  const std::string topic_label = absl::StrCat("topic=\"", out, "\"");
  std::string scraped;
  auto committed = [&] {
    double total = 0;
    testing::HttpResult listed = cluster_->RestGet("/taskmanagers");
    scraped = absl::StrCat("/taskmanagers: ", listed.status, " ", listed.body, "\n");
    const nlohmann::json taskmanagers = nlohmann::json::parse(listed.body)["taskmanagers"];
    for (const auto& tm : taskmanagers) {
      testing::HttpResult metrics = testing::HttpGet(tm["restPort"].get<int>(), "/metrics");
      scraped += metrics.body;
      total += std::max(0.0, MetricValue(metrics.body, "weir_kafka_transactions_committed_total", topic_label));
    }
    return total;
  };
  EXPECT_EQ(committed(), 0);  // no records yet: no transaction to commit
  // Three rounds of input, each seen through a commit before the next.
  for (int round = 1; round <= 3; ++round) {
    ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, NumberedInput(100, 100)).ok());
    ASSERT_TRUE(WaitFor([&] { return committed() >= round; }, absl::Seconds(60)))
        << "round " << round << ": " << committed() << " commits\n" << scraped;
  }
  ASSERT_EQ(cluster_->Weir({"cancel", job}).exit_code, 0);
  EXPECT_EQ(cluster_->WaitForJobEnd(job)["state"], "CANCELED");
}

// TaskManagers that do not take checkpoint messages on their membership
// sessions (as those of an older version) get triggers and notifications
// as calls: checkpoints complete and the exactly-once sink commits.
TEST_F(JobPipelineTest, CheckpointsGoByCallToTaskManagersThatDoNotTakeMessages) {
  StartCluster({"-Dtaskmanager.checkpoint-messages=false"});
  std::string in = NewTopic("by-call-in", 1), out = NewTopic("by-call-out", 1);
  std::string job = SubmitOrFail(kJobs + "/kafka_copy.so", {"-p", "2", "-Dexecution.checkpointing.interval=200ms"},
                                 {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", out, "--guarantee",
                                  "exactly-once"});
  ASSERT_FALSE(job.empty());
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
  const std::vector<test::KafkaMessage> input = NumberedInput(500, 500);
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, input).ok());
  // read_committed: only what a notification let the sink commit.
  std::vector<test::KafkaMessage> output;
  EXPECT_TRUE(testing::ReadUntil(bootstrap_, out, absl::Seconds(60), &output,
                                 [&](const auto& o) { return o.size() >= input.size(); }))
      << output.size() << " committed\n" << cluster_->Logs();
  std::multiset<std::string> want, got;
  for (const auto& m : input) want.insert(m.value);
  for (const auto& m : output) got.insert(m.value);
  EXPECT_EQ(got, want);
  const std::string logs = cluster_->Logs();
  EXPECT_TRUE(absl::StrContains(logs, "checkpoint triggers and notifications go to it as calls")) << logs;
  ASSERT_EQ(cluster_->Weir({"cancel", job}).exit_code, 0);
  EXPECT_EQ(cluster_->WaitForJobEnd(job)["state"], "CANCELED");
}

// A partition without records holds event time back: windowed_count over
// two partitions with records in one only emits no window, and the source
// says which partition holds it (pipeline.watermark.stall-warning, 1 s
// here). With an idleness setting the quiet partition goes idle (logged),
// and every window before the newest record fires with its count.
TEST_F(JobPipelineTest, AQuietPartitionHoldsEventTimeUntilItIsIdleAndTheLogSaysSo) {
  StartCluster({"-Dpipeline.watermark.stall-warning=1s"});
  const std::string in = NewTopic("quiet-in", 2);
  const int64_t base = (absl::ToUnixMillis(absl::Now()) - 3600 * 1000) / 1000 * 1000;
  std::vector<KafkaMessage> input;
  std::map<std::string, int> closed;  // windows before the newest record's
  for (int i = 0; i < 300; ++i) {
    const int64_t t = base + 10 * int64_t{i};  // 3 s of event time
    input.push_back({absl::StrCat("k", i % 3), absl::StrCat(t), /*partition=*/0});
    if (t < base + 2000) ++closed[absl::StrCat("k", i % 3, "@", t - t % 1000)];
  }
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, input).ok());
  auto run = [&](const std::string& idleness, const std::string& out) {
    const std::string job =
        SubmitOrFail(kJobs + "/windowed_count.so", {"-p", "1", "-Dexecution.checkpointing.interval=200ms"},
                     {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", out, "--window-ms", "1000",
                      "--out-of-orderness-ms", "0", "--event-time", "value", "--idleness-ms", idleness});
    EXPECT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
    return job;
  };

  const std::string held = NewTopic("quiet-held-out", 1);
  const std::string first = run("0", held);
  const std::string stall = absl::StrCat("partition ", in, "[1] has had no record for");
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(cluster_->Logs(), stall); }, absl::Seconds(60)))
      << cluster_->Logs();
  EXPECT_TRUE(absl::StrContains(cluster_->Logs(), absl::StrCat("while partition ", in, "[0] is at")));
  // Checkpoints complete (the sink commits), but no window fired.
  const int64_t seen = cluster_->WeirJson({"checkpoints", first})["completed"].get<int64_t>();
  ASSERT_TRUE(WaitFor([&] { return cluster_->WeirJson({"checkpoints", first})["completed"].get<int64_t>() > seen + 2; },
                      absl::Seconds(60)));
  auto held_output = test::ReadTopic(bootstrap_, held);
  ASSERT_TRUE(held_output.ok());
  EXPECT_TRUE(held_output->empty()) << held_output->size() << " windows fired while partition 1 held event time";
  ASSERT_EQ(cluster_->Weir({"cancel", first}).exit_code, 0);

  const std::string out = NewTopic("quiet-idle-out", 1);
  const std::string second = run("500", out);
  std::vector<KafkaMessage> output;
  EXPECT_TRUE(testing::ReadUntil(bootstrap_, out, absl::Seconds(60), &output,
                                 [&](const auto& read) { return read.size() >= closed.size(); }))
      << cluster_->Logs();
  std::map<std::string, int> results;
  for (const KafkaMessage& m : output) results[m.key.value_or("")] = std::stoi(m.value);
  EXPECT_EQ(results, closed);
  EXPECT_TRUE(absl::StrContains(cluster_->Logs(), absl::StrCat("partition ", in, "[1] idle (no record for")))
      << cluster_->Logs();
  ASSERT_EQ(cluster_->Weir({"cancel", second}).exit_code, 0);
}

// Bad event times through real daemons (windowed_count reading each
// record's time from its value): a time before 1970 fails the job at once,
// naming the partition and offset, and no restart is tried; with
// --invalid-timestamps drop, that record and one two days ahead of the wall
// clock are dropped and counted in weir_event_time_dropped_records_total,
// and every window of the good records fires with its count.
TEST_F(JobPipelineTest, BadEventTimesFailTheJobOrAreDroppedAndCounted) {
  StartCluster({}, "metrics-secret");
  const std::string in = NewTopic("bad-time-in", 1);
  const int64_t now = absl::ToUnixMillis(absl::Now());
  const int64_t base = (now - 3600 * 1000) / 1000 * 1000;
  std::vector<KafkaMessage> input;
  std::map<std::string, int> windows;  // the good records' windows before the closing record
  for (int i = 0; i < 200; ++i) {
    const std::string key = absl::StrCat("k", i % 3);
    const int64_t t = base + 10 * int64_t{i};  // 2 s of event time
    if (i == 50) {
      input.push_back({key, "-5"});  // offset 50
    } else if (i == 120) {
      input.push_back({key, absl::StrCat(now + 2 * 24 * 3600 * 1000)});  // offset 120
    } else {
      input.push_back({key, absl::StrCat(t)});
      ++windows[absl::StrCat(key, "@", t - t % 1000)];
    }
  }
  input.push_back({"closing", absl::StrCat(base + 10000)});  // fires every window above
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, input).ok());
  auto submit = [&](const std::string& policy, const std::string& out) {
    return SubmitOrFail(kJobs + "/windowed_count.so",
                        {"-p", "1", "-Dexecution.checkpointing.interval=200ms", "-Drestart-strategy.type=fixed-delay",
                         "-Drestart-strategy.fixed-delay.attempts=3", "-Drestart-strategy.fixed-delay.delay=100ms"},
                        {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", out, "--window-ms", "1000",
                         "--out-of-orderness-ms", "0", "--event-time", "value", "--invalid-timestamps", policy});
  };

  const std::string failed = submit("fail", NewTopic("bad-time-fail-out", 1));
  ASSERT_FALSE(failed.empty());
  const nlohmann::json status = cluster_->WaitForJobEnd(failed);
  ASSERT_EQ(status["state"], "FAILED") << status.dump(2) << cluster_->Logs();
  EXPECT_EQ(status["restarts"], 0) << status.dump(2);
  const std::string error = status["error"].get<std::string>();
  EXPECT_TRUE(absl::StrContains(error, absl::StrCat("the record at offset 50 of partition ", in, "[0]"))) << error;
  EXPECT_TRUE(absl::StrContains(error, "before 1970")) << error;
  EXPECT_TRUE(absl::StrContains(error, "not restarted")) << error;

  const std::string out = NewTopic("bad-time-drop-out", 1);
  const std::string dropping = submit("drop", out);
  ASSERT_FALSE(dropping.empty());
  std::vector<KafkaMessage> output;
  EXPECT_TRUE(testing::ReadUntil(bootstrap_, out, absl::Seconds(60), &output,
                                 [&](const auto& read) { return read.size() >= windows.size(); }))
      << cluster_->Logs();
  std::map<std::string, int> results;
  for (const KafkaMessage& m : output) results[m.key.value_or("")] = std::stoi(m.value);
  EXPECT_EQ(results, windows);
  nlohmann::json tms = nlohmann::json::parse(cluster_->RestGet("/taskmanagers").body)["taskmanagers"];
  double dropped = 0;
  for (const auto& tm : tms) {
    const std::string body = testing::HttpGet(tm["restPort"].get<int>(), "/metrics", "metrics-secret").body;
    dropped += std::max(0.0, MetricValue(body, "weir_event_time_dropped_records_total", absl::StrCat("job_id=\"", dropping, "\"")));
  }
  EXPECT_EQ(dropped, 2) << cluster_->Logs();
  const std::string logs = cluster_->Logs();
  EXPECT_TRUE(absl::StrContains(logs, absl::StrCat("dropped the record at offset 50 of partition ", in, "[0]")))
      << logs;
  ASSERT_EQ(cluster_->Weir({"cancel", dropping}).exit_code, 0);
}

// `weir kafka`: a new user's topic chores without Kafka's tools.
TEST_F(JobPipelineTest, WeirKafkaCreatesWritesAndReadsTopics) {
  const std::string weir = testing::BinDir() + "/weir";
  const std::string topic = test::UniqueTopicName("weir-kafka-cli");
  auto run = [&](const std::string& command) { return testing::RunCommand({"/bin/sh", "-c", command}); };
  testing::CommandResult created =
      testing::RunCommand({weir, "kafka", "create-topic", "--brokers", bootstrap_, topic, "--partitions", "3"});
  ASSERT_EQ(created.exit_code, 0) << created.err;
  EXPECT_EQ(created.out, absl::StrCat("created topic ", topic, " (3 partitions, replication factor 1)\n"));
  testing::CommandResult again = testing::RunCommand({weir, "kafka", "create-topic", "--brokers", bootstrap_, topic});
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(again.err, "already exists")) << again.err;

  testing::CommandResult produced = run(absl::StrCat("printf 'k1\\tv1\\nk2\\tv2\\nk3\\tv3\\n' | ", weir,
                                                     " kafka produce --brokers ", bootstrap_, " ", topic, " --keyed"));
  ASSERT_EQ(produced.exit_code, 0) << produced.err;
  EXPECT_EQ(produced.out, absl::StrCat("wrote 3 records to ", topic, "\n"));

  // Read back by the test's own reader, and by weir kafka consume.
  absl::StatusOr<std::vector<KafkaMessage>> read = test::ReadTopic(bootstrap_, topic);
  ASSERT_TRUE(read.ok()) << read.status();
  std::set<std::pair<std::string, std::string>> records;
  for (const KafkaMessage& m : *read) records.insert({m.key.value_or(""), m.value});
  EXPECT_EQ(records, (std::set<std::pair<std::string, std::string>>{{"k1", "v1"}, {"k2", "v2"}, {"k3", "v3"}}));
  testing::CommandResult consumed =
      testing::RunCommand({weir, "kafka", "consume", "--brokers", bootstrap_, topic, "--keyed"});
  ASSERT_EQ(consumed.exit_code, 0) << consumed.err;
  std::vector<std::string> lines = absl::StrSplit(consumed.out, '\n', absl::SkipEmpty());
  EXPECT_EQ(std::set<std::string>(lines.begin(), lines.end()), (std::set<std::string>{"k1\tv1", "k2\tv2", "k3\tv3"}));

  testing::CommandResult missing = testing::RunCommand({weir, "kafka", "consume", "--brokers", bootstrap_, "no-such"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(missing.err, "weir kafka create-topic")) << missing.err;
}

// Kafka's security settings pass through to librdkafka (they are on the
// allow-list): kafka_copy reads and writes over TLS, the broker's CA given
// inline, logged in with SASL PLAIN. SCRAM-SHA-256 works the same where the
// librdkafka linked here can log in to this (4.x) broker; where it cannot
// (before 2.6.1, as Debian 12's), the job fails saying so. A wrong
// password fails the job, saying that authentication failed.
TEST_F(JobPipelineTest, KafkaCopyReadsAndWritesOverSaslSsl) {
  const test::SecureListener secure = test::TestKafkaSaslSsl();
  ASSERT_FALSE(secure.bootstrap.empty());
  StartCluster();
  std::string in = NewTopic("sasl-in");
  std::vector<KafkaMessage> input = NumberedInput(5000, 5000);
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, input).ok());
  auto properties = [&](const std::string& mechanism, const std::string& password) {
    return absl::StrCat("security.protocol=sasl_ssl,sasl.mechanisms=", mechanism, ",sasl.username=", secure.username,
                        ",sasl.password=", password, ",ssl.ca.pem=", secure.ca_pem);
  };
  // The job's final state, and the output topic it wrote.
  auto copy = [&](const std::string& mechanism, const std::string& password, std::string* out) {
    *out = NewTopic("sasl-out");
    std::string job = SubmitOrFail(kJobs + "/kafka_copy.so", {"-p", "2", "-Drestart-strategy.type=none"},
                                   {"--brokers", secure.bootstrap, "--input-topic", in, "--output-topic", *out,
                                    "--guarantee", "at-least-once", "--bounded", "--source-properties",
                                    properties(mechanism, password), "--sink-properties",
                                    properties(mechanism, password)});
    return job.empty() ? nlohmann::json() : cluster_->WaitForJobEnd(job);
  };
  auto expect_copied = [&](const std::string& out) {
    auto output = test::ReadTopic(bootstrap_, out);
    ASSERT_TRUE(output.ok()) << output.status();
    std::multiset<std::string> expected, actual;
    for (const auto& m : input) expected.insert(m.value);
    for (const auto& m : *output) actual.insert(m.value);
    EXPECT_TRUE(actual == expected) << actual.size() << " records out of " << expected.size();
  };

  std::string out;
  nlohmann::json status = copy("PLAIN", secure.password, &out);
  ASSERT_EQ(status["state"], "FINISHED") << status.dump(2) << cluster_->Logs();
  expect_copied(out);

  status = copy("SCRAM-SHA-256", secure.password, &out);
  if (RdKafka::version() >= 0x020601ff) {
    ASSERT_EQ(status["state"], "FINISHED") << status.dump(2);
    expect_copied(out);
  } else {
    ASSERT_EQ(status["state"], "FAILED") << status.dump(2);
    EXPECT_TRUE(absl::StrContains(status["error"].get<std::string>(),
                                  "cannot log in with SCRAM to Kafka 4.0 or later brokers"))
        << status.dump(2);
  }

  status = copy("PLAIN", "not-the-password", &out);
  ASSERT_EQ(status["state"], "FAILED") << status.dump(2);
  EXPECT_TRUE(absl::StrContains(status["error"].get<std::string>(), "Authentication failed")) << status.dump(2);
}

// Deployments carry the fingerprint of the submitted graph, not the graph:
// a TaskManager whose load of the binary builds another graph refuses it.
TEST_F(JobPipelineTest, ABinaryThatBuildsAnotherGraphOnTheTaskManagerIsRefused) {
  StartCluster();
  std::string in = NewTopic("shift-in"), out = NewTopic("shift-out");
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, NumberedInput(10, 10)).ok());
  std::string job = SubmitOrFail(kJobs + "/test/shifting_graph.so", {"-Drestart-strategy.type=none"},
                                 {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", out});
  ASSERT_FALSE(job.empty());
  nlohmann::json status = cluster_->WaitForJobEnd(job);
  ASSERT_EQ(status["state"], "FAILED") << status.dump(2);
  EXPECT_TRUE(absl::StrContains(status["error"].get<std::string>(), "builds a different graph here than at submission"))
      << status.dump(2);
}

TEST_F(JobPipelineTest, ExceptionInUserCodeFailsTheJobWithItsMessage) {
  StartCluster();
  std::string in = NewTopic("throw-in"), out = NewTopic("throw-out");
  std::vector<KafkaMessage> input = NumberedInput(100, 100);
  input.push_back({"id-poison", "poison"});
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, input).ok());
  std::string job = SubmitOrFail(kJobs + "/test/throwing_map.so", {"-p", "2"},
                                 {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", out});
  ASSERT_FALSE(job.empty());
  nlohmann::json status = cluster_->WaitForJobEnd(job);
  ASSERT_EQ(status["state"], "FAILED") << status.dump(2);
  EXPECT_TRUE(absl::StrContains(status["error"].get<std::string>(), "cannot handle record 'poison'"))
      << status.dump(2);
  // The TaskManagers survive and free their slots.
  EXPECT_TRUE(cluster_->taskmanager(0).running());
  EXPECT_TRUE(cluster_->taskmanager(1).running());
  EXPECT_TRUE(WaitFor(
      [&] {
        nlohmann::json c = cluster_->WeirJson({"cluster"});
        if (c.is_null() || c["taskmanagers"].size() != 2) return false;
        for (const auto& tm : c["taskmanagers"]) {
          if (tm["slots_free"] != 1) return false;
        }
        return true;
      },
      absl::Seconds(30)));
}

// An ordinary exception fails the attempt and the job restarts under its
// strategy; weir::UnrecoverableError (a connector's DATA LOSS, say) fails
// the job at once, with the same strategy.
TEST_F(JobPipelineTest, UnrecoverableErrorFailsTheJobWithoutRestarts) {
  StartCluster();
  const std::vector<std::string> restarting = {"-p", "1", "-Drestart-strategy.type=fixed-delay",
                                               "-Drestart-strategy.fixed-delay.attempts=2",
                                               "-Drestart-strategy.fixed-delay.delay=100ms"};
  for (const std::string value : {"poison", "unrecoverable"}) {
    std::string in = NewTopic(absl::StrCat(value, "-in")), out = NewTopic(absl::StrCat(value, "-out"));
    ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, {{"k", "fine"}, {"k", value}}).ok());
    std::string job = SubmitOrFail(kJobs + "/test/throwing_map.so", restarting,
                                   {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", out});
    ASSERT_FALSE(job.empty());
    nlohmann::json status = cluster_->WaitForJobEnd(job);
    ASSERT_EQ(status["state"], "FAILED") << status.dump(2);
    const std::string error = status["error"].get<std::string>();
    if (value == "poison") {
      EXPECT_EQ(status["restarts"], 2) << status.dump(2);
      EXPECT_TRUE(absl::StrContains(error, "no more restarts")) << error;
    } else {
      EXPECT_EQ(status["restarts"], 0) << status.dump(2);
      EXPECT_TRUE(absl::StrContains(error, "cannot be handled by any attempt")) << error;
      EXPECT_TRUE(absl::StrContains(error, "not restarted")) << error;
    }
  }
}

TEST_F(JobPipelineTest, CrashInUserCodeKillsOneTaskManagerAndFailsTheJob) {
  StartCluster();
  std::string in = NewTopic("crash-in", 2), out = NewTopic("crash-out");
  // The poison record sits in partition 0, read by subtask 0 alone.
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, {{"k", "fine", 1}, {"k", "poison", 0}}).ok());
  std::string job = SubmitOrFail(kJobs + "/test/crashing_map.so", {"-p", "2"},
                                 {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", out});
  ASSERT_FALSE(job.empty());
  nlohmann::json status = cluster_->WaitForJobEnd(job);
  ASSERT_EQ(status["state"], "FAILED") << status.dump(2);
  EXPECT_TRUE(absl::StrContains(status["error"].get<std::string>(), "lost")) << status.dump(2);
  // Exactly one TaskManager died; the other keeps running and stays a member.
  int alive = (cluster_->taskmanager(0).running() ? 1 : 0) + (cluster_->taskmanager(1).running() ? 1 : 0);
  EXPECT_EQ(alive, 1);
  // Its log says why it died, and in which task.
  const int dead = cluster_->taskmanager(0).running() ? 1 : 0;
  std::string log = cluster_->taskmanager(dead).Log();
  EXPECT_TRUE(absl::StrContains(log, "fatal signal SEGV")) << log;
  EXPECT_TRUE(absl::StrContains(log, "while running task " + job + "/1/c0s0")) << log;
  EXPECT_TRUE(WaitFor([&] {
    nlohmann::json c = cluster_->WeirJson({"cluster"});
    return !c.is_null() && c["taskmanagers"].size() == 1;
  }, absl::Seconds(30)));
}

// A topic that does not exist is found by `weir submit`, which names it and
// submits nothing (the source's own check at run time is in
// kafka_connector_test).
TEST_F(JobPipelineTest, MissingTopicIsRefusedAtSubmissionNamingTheTopic) {
  StartCluster();
  std::string in = NewTopic("missing-in"), out = NewTopic("missing-out");
  std::string error;
  std::string job = cluster_->Submit(kJobs + "/kafka_copy.so", {"-p", "1"},
                                     {"--brokers", bootstrap_, "--input-topic", "no-such-topic-here", "--output-topic",
                                      out, "--bounded"},
                                     &error);
  EXPECT_TRUE(job.empty());
  EXPECT_TRUE(absl::StrContains(error, "Kafka topic 'no-such-topic-here' does not exist")) << error;
  EXPECT_TRUE(absl::StrContains(error, "the job's source")) << error;
  EXPECT_TRUE(absl::StrContains(error, "nothing was submitted")) << error;

  job = cluster_->Submit(kJobs + "/kafka_copy.so", {"-p", "1"},
                         {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", "no-such-output", "--bounded"},
                         &error);
  EXPECT_TRUE(job.empty());
  EXPECT_TRUE(absl::StrContains(error, "Kafka topic 'no-such-output' does not exist")) << error;
  EXPECT_TRUE(absl::StrContains(error, "the job's sink")) << error;
  EXPECT_TRUE(cluster_->WeirJson({"list"})["jobs"].empty()) << cluster_->WeirJson({"list"}).dump();
}

TEST_F(JobPipelineTest, BrokerDownFailsTheJobClearly) {
  StartCluster();
  std::string dead = absl::StrCat("127.0.0.1:", testing::FreePort());
  std::string job = SubmitOrFail(kJobs + "/kafka_copy.so", {"-p", "1"},
                                 {"--brokers", dead, "--input-topic", "in", "--output-topic", "out", "--bounded"});
  ASSERT_FALSE(job.empty());
  nlohmann::json status = cluster_->WaitForJobEnd(job);
  ASSERT_EQ(status["state"], "FAILED") << status.dump(2);
  EXPECT_TRUE(absl::StrContains(status["error"].get<std::string>(), dead)) << status.dump(2);
}

TEST_F(JobPipelineTest, BadJobBinariesAreRejectedAtSubmission) {
  StartCluster();
  // Topics that exist: the client checks them before submitting.
  const std::string a = NewTopic("bad-a", 1), b = NewTopic("bad-b", 1);
  std::string not_elf = cluster_->dir() + "/not-a-job.so";
  std::ofstream(not_elf) << "#!/bin/sh\necho hello\n";
  struct Case {
    std::string binary;
    std::vector<std::string> args;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {not_elf, {}, "not a shared library"},
      {cluster_->dir() + "/missing.so", {}, "cannot read job binary"},
      {kJobs + "/test/no_entry_point.so", {}, "Add WEIR_JOB"},
      {kJobs + "/test/wrong_abi.so", {}, "built for a different Weir job API"},
      {kJobs + "/test/no_sink.so", {}, "is not a sink"},
      {kJobs + "/kafka_copy.so", {"--input-topic", "x"}, "missing required job argument --brokers"},
      {kJobs + "/kafka_copy.so",
       {"--brokers", bootstrap_, "--input-topic", a, "--output-topic", b, "--guarantee", "exactly-once"},
       "exactly-once"},
  };
  for (const Case& c : cases) {
    std::string error;
    std::string job = cluster_->Submit(c.binary, {"-p", "1"}, c.args, &error);
    EXPECT_TRUE(job.empty()) << c.binary;
    EXPECT_TRUE(absl::StrContains(error, c.expected)) << c.binary << ": " << error;
    EXPECT_EQ(std::count(error.begin(), error.end(), '\n'), 0) << "one line: " << error;
  }
  // Too few slots: a clear error, not a wait.
  std::string error;
  std::string job = cluster_->Submit(kJobs + "/kafka_copy.so", {"-p", "3"},
                                     {"--brokers", bootstrap_, "--input-topic", a, "--output-topic", b}, &error);
  EXPECT_TRUE(job.empty());
  EXPECT_TRUE(absl::StrContains(error, "needs 3 slots but the cluster has 2 free")) << error;
  // Nothing was harmed: both TaskManagers still run with all slots free.
  nlohmann::json c = cluster_->WeirJson({"cluster"});
  ASSERT_FALSE(c.is_null());
  ASSERT_EQ(c["taskmanagers"].size(), 2u);
  for (const auto& tm : c["taskmanagers"]) EXPECT_EQ(tm["slots_free"], 1);
}

TEST_F(JobPipelineTest, ListStatusAndCancel) {
  StartCluster();
  std::string in = NewTopic("cancel-in"), out = NewTopic("cancel-out");
  // Unbounded: runs until canceled.
  std::string job = SubmitOrFail(kJobs + "/kafka_copy.so", {"-p", "2"},
                                 {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", out});
  ASSERT_FALSE(job.empty());
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
  nlohmann::json list = cluster_->WeirJson({"list"});
  ASSERT_FALSE(list.is_null());
  ASSERT_EQ(list["jobs"].size(), 1u);
  EXPECT_EQ(list["jobs"][0]["job_id"], job);
  EXPECT_EQ(list["jobs"][0]["name"], "kafka_copy");
  EXPECT_EQ(cluster_->WeirJson({"list", "-r"})["jobs"].size(), 1u);

  auto text = cluster_->Weir({"status", job});
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(text.out, "KafkaSource -> Copy -> KafkaSink")) << text.out;

  ASSERT_EQ(cluster_->Weir({"cancel", job}).exit_code, 0);
  nlohmann::json status = cluster_->WaitForJobEnd(job);
  EXPECT_EQ(status["state"], "CANCELED") << status.dump(2) << cluster_->Logs();
  auto again = cluster_->Weir({"cancel", job});
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(again.err, "already ended")) << again.err;
  // Flink's `list -r`: only the jobs not ended; -a (the default) all.
  nlohmann::json running = cluster_->WeirJson({"list", "-r"});
  ASSERT_FALSE(running.is_null());
  EXPECT_TRUE(running["jobs"].empty()) << running.dump();
  EXPECT_EQ(cluster_->WeirJson({"list", "-a"})["jobs"].size(), 1u);
  auto unknown = cluster_->Weir({"status", "0123456789abcdef"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(unknown.err, "no job 0123456789abcdef")) << unknown.err;
}

TEST_F(JobPipelineTest, StoppingATaskManagerFailsItsJobs) {
  StartCluster();
  std::string in = NewTopic("stop-in"), out = NewTopic("stop-out");
  std::string job = SubmitOrFail(kJobs + "/kafka_copy.so", {"-p", "2"},
                                 {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", out});
  ASSERT_FALSE(job.empty());
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
  // An orderly stop cancels its tasks first; the job must not stay RUNNING
  // with a part of it gone.
  cluster_->taskmanager(1).Signal(SIGTERM);
  EXPECT_EQ(cluster_->taskmanager(1).Wait(absl::Seconds(60)), 0);
  nlohmann::json status = cluster_->WaitForJobEnd(job, absl::Seconds(60));
  EXPECT_EQ(status["state"], "FAILED") << status.dump(2);
}

// A task stuck in user code (it ignores cancellation) does not hold a
// stopping TaskManager forever: after task.cancellation.timeout it exits
// without the task, saying which.
TEST_F(JobPipelineTest, AStuckTaskDoesNotHoldAStoppingTaskManager) {
  StartCluster({"-Dtask.cancellation.timeout=1s"});
  std::string in = NewTopic("stuck-in"), out = NewTopic("stuck-out");
  std::string job = SubmitOrFail(kJobs + "/test/stuck_map.so", {"-p", "1"},
                                 {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", out});
  ASSERT_FALSE(job.empty());
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, {{"k", "v"}}).ok());
  const nlohmann::json status = cluster_->WeirJson({"status", job});
  const std::string where = status["tasks"][0]["taskmanager_id"];
  const int tm = where == cluster_->taskmanager_id(0) ? 0 : 1;
  absl::SleepFor(absl::Seconds(2));  // the record reaches the map, which then never returns
  cluster_->taskmanager(tm).Signal(SIGTERM);
  EXPECT_EQ(cluster_->taskmanager(tm).Wait(absl::Seconds(30)), 1) << cluster_->taskmanager(tm).Log();
  EXPECT_TRUE(absl::StrContains(cluster_->taskmanager(tm).Log(), "did not stop within task.cancellation.timeout"))
      << cluster_->taskmanager(tm).Log();
}

// A cancelled task whose user code never returns makes its TaskManager
// exit once task.cancellation.timeout has passed (the cancellation
// watchdog), naming the task and writing where its thread hangs, so that
// systemd or Kubernetes restarts the process; the job itself ends CANCELED.
TEST_F(JobPipelineTest, ACancelledTaskStuckInUserCodeMakesItsTaskManagerExit) {
  StartCluster({"-Dtask.cancellation.timeout=2s"});
  std::string in = NewTopic("stuck-cancel-in"), out = NewTopic("stuck-cancel-out");
  std::string job = SubmitOrFail(kJobs + "/test/stuck_map.so", {"-p", "1"},
                                 {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", out});
  ASSERT_FALSE(job.empty());
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, {{"k", "v"}}).ok());
  // The record entered the chain: the map now never returns.
  std::string where, task_id;
  ASSERT_TRUE(WaitFor(
      [&] {
        const nlohmann::json status = cluster_->WeirJson({"status", job});
        if (status.is_null() || status["tasks"].empty() || status["tasks"][0]["records_in"] < 1) return false;
        where = status["tasks"][0]["taskmanager_id"];
        task_id = status["tasks"][0]["task_id"];
        return true;
      },
      absl::Seconds(60)))
      << cluster_->Logs();
  const int tm = where == cluster_->taskmanager_id(0) ? 0 : 1;
  ASSERT_EQ(cluster_->Weir({"cancel", job}).exit_code, 0);
  EXPECT_EQ(cluster_->taskmanager(tm).Wait(absl::Seconds(60)), 1) << cluster_->taskmanager(tm).Log();
  const std::string log = cluster_->taskmanager(tm).Log();
  EXPECT_TRUE(absl::StrContains(log, "has not ended")) << log;  // the warning at half the timeout
  EXPECT_TRUE(absl::StrContains(log, "did not stop within task.cancellation.timeout (2 s)")) << log;
  EXPECT_TRUE(absl::StrContains(log, task_id)) << log;
  EXPECT_TRUE(absl::StrContains(log, "Stuck")) << log;
  EXPECT_TRUE(absl::StrContains(log, absl::StrCat("backtrace of thread"))) << log;
  EXPECT_TRUE(absl::StrContains(log, absl::StrCat("running task ", task_id))) << log;
  // The other TaskManager was not involved, and the job ended as asked.
  EXPECT_TRUE(cluster_->taskmanager(1 - tm).running());
  nlohmann::json status = cluster_->WaitForJobEnd(job, absl::Seconds(60));
  EXPECT_EQ(status["state"], "CANCELED") << status.dump(2);
}

TEST_F(JobPipelineTest, TasksOfAJobManagerThatDiedAreCanceledWhenANewOneTakesOver) {
  StartCluster();
  std::string in = NewTopic("orphan-in"), out = NewTopic("orphan-out");
  std::string job = SubmitOrFail(kJobs + "/kafka_copy.so", {"-p", "2"},
                                 {"--brokers", bootstrap_, "--input-topic", in, "--output-topic", out});
  ASSERT_FALSE(job.empty());
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
  cluster_->RestartJobManager();
  // The new JobManager takes the job over with a new attempt: the tasks of
  // the old one must not keep running unsupervised beside it.
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(WaitFor([&] { return absl::StrContains(cluster_->taskmanager(i).Log(), "TASK_CANCELED"); },
                        absl::Seconds(60)))
        << cluster_->taskmanager(i).Log();
    EXPECT_TRUE(absl::StrContains(cluster_->taskmanager(i).Log(), "runs the job with a new attempt"));
  }
  nlohmann::json c = cluster_->WeirJson({"cluster"});
  ASSERT_FALSE(c.is_null());
  EXPECT_EQ(c["taskmanagers"].size(), 2u);
}

}  // namespace
}  // namespace weir
