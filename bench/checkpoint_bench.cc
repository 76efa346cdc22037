// checkpoint_bench: what checkpoints cost and how fast a job recovers.
//
//   bench/run.sh checkpoint [--records N] [--keys K] [--parallelism P] [--state-backend rocksdb|hashmap]
//
// 1. keyed_count (bounded) over N records with K distinct keys, run twice on
//    the same input in one run: checkpoints off, then every second. Prints
//    both rates, their ratio, and the checkpoints' duration p50/p99, size
//    and longest alignment.
// 2. keyed_count (unbounded) with checkpoints every second while records
//    arrive: SIGKILL a TaskManager that runs tasks and start a replacement;
//    the time from the kill until the new attempt has processed a record,
//    with the default restart strategy and with a tuned one.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/bench_flags.h"
#include "tests/kafka/kafka_io.h"
#include "tests/kafka/test_kafka.h"
#include "tests/testing/local_cluster.h"

namespace {

using weir::testing::LocalCluster;
using weir::testing::WaitFor;

struct Flags {
  int64_t records = 1000000;
  int64_t keys = 100000;
  int parallelism = 2;
  std::string state_backend = "rocksdb";
};

std::string NewTopic(const std::string& bootstrap, const std::string& prefix, int partitions = 4) {
  std::string topic = weir::test::UniqueTopicName(prefix);
  if (auto s = weir::test::CreateTopic(bootstrap, topic, partitions); !s.ok()) {
    std::fprintf(stderr, "bench: %s\n", std::string(s.message()).c_str());
    std::exit(1);
  }
  return topic;
}

void Produce(const std::string& bootstrap, const std::string& topic, int64_t first, int64_t n, int64_t keys) {
  std::vector<weir::test::KafkaMessage> batch;
  batch.reserve(std::min<int64_t>(n, 200000));
  for (int64_t i = first; i < first + n; ++i) {
    batch.push_back({absl::StrCat("id-", i), absl::StrCat("key-", i % keys)});
    if (static_cast<int64_t>(batch.size()) == 200000 || i + 1 == first + n) {
      if (auto s = weir::test::ProduceMessages(bootstrap, topic, batch); !s.ok()) {
        std::fprintf(stderr, "bench: %s\n", std::string(s.message()).c_str());
        std::exit(1);
      }
      batch.clear();
    }
  }
}

double Percentile(std::vector<int64_t> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  size_t index = static_cast<size_t>(p * (values.size() - 1) + 0.5);
  return static_cast<double>(values[std::min(index, values.size() - 1)]);
}

struct RunResult {
  double seconds = 0;
  std::vector<int64_t> durations_ms, alignments_ms, sizes;
};

RunResult RunKeyedCount(const std::string& bootstrap, const std::string& in, const Flags& flags,
                        const std::vector<std::string>& config) {
  LocalCluster cluster({.taskmanagers = flags.parallelism, .slots_per_taskmanager = 1});
  cluster.Start();
  const std::string out = NewTopic(bootstrap, "bench-ckpt-out");
  std::vector<std::string> options = {"-p", std::to_string(flags.parallelism)};
  options.insert(options.end(), config.begin(), config.end());
  options.push_back("-Dstate.backend.type=" + flags.state_backend);
  std::string error;
  absl::Time start = absl::Now();
  std::string job = cluster.Submit(std::string(WEIR_JOBS_DIR) + "/keyed_count.so", options,
                                   {"--brokers", bootstrap, "--input-topic", in, "--output-topic", out, "--bounded"},
                                   &error);
  if (job.empty()) {
    std::fprintf(stderr, "bench: submission failed: %s\n", error.c_str());
    std::exit(1);
  }
  nlohmann::json status = cluster.WaitForJobEnd(job, absl::Minutes(30));
  RunResult result;
  result.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (status.is_null() || status["state"] != "FINISHED") {
    std::fprintf(stderr, "bench: the job did not finish: %s\n%s\n", status.dump(2).c_str(), cluster.Logs().c_str());
    std::exit(1);
  }
  nlohmann::json checkpoints = cluster.WeirJson({"checkpoints", job});
  if (!checkpoints.is_null()) {
    for (const auto& c : checkpoints["checkpoints"]) {
      if (c["status"] != "COMPLETED") continue;
      result.durations_ms.push_back(c["duration_ms"].get<int64_t>());
      result.alignments_ms.push_back(c["longest_alignment_ms"].get<int64_t>());
      result.sizes.push_back(c["size_bytes"].get<int64_t>());
    }
  }
  return result;
}

// Seconds from a SIGKILL of a busy TaskManager until the next attempt has
// processed records.
double MeasureRecovery(const std::string& bootstrap, const Flags& flags, const std::vector<std::string>& config) {
  LocalCluster cluster({.taskmanagers = flags.parallelism + 1, .slots_per_taskmanager = 1});
  cluster.Start();
  const std::string in = NewTopic(bootstrap, "bench-rec-in"), out = NewTopic(bootstrap, "bench-rec-out");
  std::vector<std::string> options = {"-p", std::to_string(flags.parallelism), "-Dexecution.checkpointing.interval=1s"};
  options.insert(options.end(), config.begin(), config.end());
  options.push_back("-Dstate.backend.type=" + flags.state_backend);
  std::string error;
  std::string job = cluster.Submit(std::string(WEIR_JOBS_DIR) + "/keyed_count.so", options,
                                   {"--brokers", bootstrap, "--input-topic", in, "--output-topic", out}, &error);
  auto attempt_running_with_records = [&](int attempt) {
    nlohmann::json s = cluster.WeirJson({"status", job});
    if (s.is_null() || s["state"] != "RUNNING" || s["attempt"].get<int>() < attempt) return false;
    int64_t in_records = 0;
    for (const auto& t : s["tasks"]) in_records += t["records_in"].get<int64_t>();
    return in_records > 0;
  };
  Produce(bootstrap, in, 0, 20000, 1000);
  if (job.empty() || !WaitFor([&] { return attempt_running_with_records(1); }, absl::Seconds(60))) {
    std::fprintf(stderr, "bench: the job did not run: %s\n%s\n", error.c_str(), cluster.Logs().c_str());
    std::exit(1);
  }
  // Records keep arriving while the job recovers.
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int64_t first = 20000; !stop; first += 2000) Produce(bootstrap, in, first, 2000, 1000);
  });
  absl::SleepFor(absl::Seconds(2));  // let a checkpoint complete
  nlohmann::json s = cluster.WeirJson({"status", job});
  std::string victim = s["tasks"][0]["taskmanager_id"];
  int index = 0;
  absl::SimpleAtoi(victim.substr(3), &index);
  const absl::Time killed = absl::Now();
  cluster.KillTaskManager(index);
  cluster.StartTaskManager();
  const bool recovered = WaitFor([&] { return attempt_running_with_records(2); }, absl::Seconds(120),
                                 absl::Milliseconds(20));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - killed);
  stop = true;
  writer.join();
  if (!recovered) {
    std::fprintf(stderr, "bench: no recovery within 120 s\n%s\n", cluster.Logs().c_str());
    std::exit(1);
  }
  return seconds;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  weir::bench::BenchFlags parser("bench");
  parser.Int("--records", &flags.records);
  parser.Int("--keys", &flags.keys);
  parser.Int("--parallelism", &flags.parallelism);
  parser.String("--state-backend", &flags.state_backend);
  if (!parser.Parse(argc, argv)) return 2;
  const std::string bootstrap = weir::test::TestKafkaBootstrap();
  if (bootstrap.empty()) return 1;
  const std::string in = NewTopic(bootstrap, "bench-ckpt-in");
  std::fprintf(stderr, "bench: producing %lld records over %lld keys\n", static_cast<long long>(flags.records),
               static_cast<long long>(flags.keys));
  Produce(bootstrap, in, 0, flags.records, flags.keys);

  RunResult off = RunKeyedCount(bootstrap, in, flags, {});
  RunResult on = RunKeyedCount(bootstrap, in, flags, {"-Dexecution.checkpointing.interval=1s"});
  const double off_rate = flags.records / off.seconds, on_rate = flags.records / on.seconds;
  std::printf("checkpoint benchmark: keyed_count, %lld records over %lld keys, parallelism %d, state backend %s\n",
              static_cast<long long>(flags.records), static_cast<long long>(flags.keys), flags.parallelism,
              flags.state_backend.c_str());
  std::printf("  checkpoints off:          %10.0f records/s (%.2f s, submission to FINISHED)\n", off_rate, off.seconds);
  std::printf("  checkpoints every second: %10.0f records/s (%.2f s)\n", on_rate, on.seconds);
  std::printf("  ratio on/off: %.3f\n", on_rate / off_rate);
  std::printf("  %zu checkpoints completed: duration p50 %.0f ms, p99 %.0f ms; size p50 %.0f bytes; "
              "longest alignment p50 %.0f ms, p99 %.0f ms\n",
              on.durations_ms.size(), Percentile(on.durations_ms, 0.5), Percentile(on.durations_ms, 0.99),
              Percentile(on.sizes, 0.5), Percentile(on.alignments_ms, 0.5), Percentile(on.alignments_ms, 0.99));

  const double default_recovery = MeasureRecovery(bootstrap, flags, {});
  const double tuned_recovery = MeasureRecovery(
      bootstrap, flags, {"-Drestart-strategy.type=fixed-delay", "-Drestart-strategy.fixed-delay.delay=0ms"});
  std::printf("  recovery, SIGKILL of a TaskManager to records processed by the new attempt:\n");
  std::printf("    default restart strategy (exponential-delay, 1 s initial backoff): %.2f s\n", default_recovery);
  std::printf("    restart-strategy fixed-delay, delay 0:                              %.2f s\n", tuned_recovery);
  return 0;
}
