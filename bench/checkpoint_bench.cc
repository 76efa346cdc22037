// checkpoint_bench: what checkpoints cost and how fast a job recovers.
//
//   bench/run.sh checkpoint [--records N] [--keys K] [--parallelism P] [--state-backend rocksdb|hashmap]
//                           [--rounds R] [--phases all|throughput|big-state] [--cluster-config -Dk=v,...]
//
// 1. keyed_count (bounded) over N records with K distinct keys on the same
//    input, R rounds of checkpoints off then every second, interleaved.
//    Prints every rate, the ratio of the medians, and the checkpoints'
//    duration p50/p99, size, longest alignment, and longest synchronous and
//    asynchronous part.
// 2. keyed_count (unbounded) with checkpoints every second while records
//    arrive: SIGKILL a TaskManager that runs tasks and start a replacement;
//    the time from the kill until the new attempt has processed a record,
//    with the default restart strategy and with a tuned one.
// 3. Big state, few updates (--state-keys, default 1 M keys loaded, then
//    1 000 records/s over 1 000 keys): bytes each checkpoint writes with
//    incremental checkpoints off and on (rocksdb); the time and size of a
//    savepoint of that state; and the time from a SIGKILL of the JobManager
//    (restarted at once on the same storage directory) until the job
//    processes records again. --phases big-state runs this phase only,
//    --phases throughput phase 1 only. --cluster-config -Dk=v,... passes
//    settings to every daemon.
//
// --phases object-store: phase 1's keyed_count with checkpoints every second,
// into a local directory and into S3 (a local S3Proxy started by
// scripts/s3.sh, state.checkpoints.dir=s3://...), R interleaved rounds, in
// one run: the checkpoints' duration and asynchronous part p50/p99 of each
// and their ratio (rocksdb, incremental checkpoints as configured).
// --s3-baseline-config -Dk=v,... adds a third side, S3 with those settings
// on top (the behaviour before a change), in the same interleaved rounds;
// --s3-baseline-bin DIR runs that side's daemons from DIR (another build).
// --keep-logs DIR keeps every run's daemon logs.
//
// --flink-classpath CP (bench/run.sh checkpoint --flink builds it): phase 1
// also runs the same job on Apache Flink (bench/flink/, a local cluster in
// one JVM, RocksDB with incremental checkpoints) in every round, off and on,
// over the same input, and prints its rates and checkpoint durations beside
// Weir's.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/bench_flags.h"
#include "bench/flink_job.h"
#include "bench/stats.h"
#include "common/fs/s3/s3_file_system.h"
#include "tests/kafka/kafka_io.h"
#include "tests/kafka/test_kafka.h"
#include "tests/testing/local_cluster.h"
#include "tests/testing/script_server.h"

namespace {

using weir::bench::Percentile;
using weir::testing::LocalCluster;
using weir::testing::WaitFor;

struct Flags {
  int64_t records = 1000000;
  int64_t keys = 100000;
  int parallelism = 2;
  std::string state_backend = "rocksdb";
  int64_t state_keys = 1000000;
  // Phase 1: off/on pairs, interleaved.
  int64_t rounds = 3;
  // -Dkey=value for every daemon (e.g. state.backend.rocksdb.writebuffer.size).
  std::vector<std::string> cluster_config;
  // bench/flink's job and its dependencies; empty: no Flink runs.
  std::string flink_classpath;
  // --phases object-store: -Dk=v settings of a third side, S3 with these
  // settings on top (e.g. the behaviour before a change), interleaved too.
  std::vector<std::string> s3_baseline_config;
  // --phases object-store: the daemons of that third side from this
  // directory (another build), e.g. the build before a change.
  std::string s3_baseline_bin;
  // --keep-logs DIR: every run's daemon logs go to DIR/run-<n>-<daemon>.log.
  std::string keep_logs;
};

// Copies the logs of `cluster` into flags.keep_logs (if set), run by run.
void KeepLogs(const Flags& flags, const LocalCluster& cluster) {
  if (flags.keep_logs.empty()) return;
  static int run = 0;
  ++run;
  std::error_code ec;
  std::filesystem::create_directories(flags.keep_logs, ec);
  for (const auto& entry : std::filesystem::directory_iterator(cluster.dir(), ec)) {
    if (entry.path().extension() != ".log") continue;
    std::filesystem::copy_file(
        entry.path(),
        std::filesystem::path(flags.keep_logs) / absl::StrCat("run-", run, "-", entry.path().filename().string()),
        std::filesystem::copy_options::overwrite_existing, ec);
  }
}

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

struct RunResult {
  double seconds = 0;
  std::vector<int64_t> durations_ms, alignments_ms, sizes;
  // Per checkpoint, the longest synchronous / asynchronous part of a task.
  std::vector<int64_t> sync_ms, async_ms, pre_barrier_ms;
};

RunResult RunKeyedCount(const std::string& bootstrap, const std::string& in, const Flags& flags,
                        const std::vector<std::string>& config) {
  LocalCluster cluster(
      {.taskmanagers = flags.parallelism, .slots_per_taskmanager = 1, .config = flags.cluster_config});
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
      result.sync_ms.push_back(c["longest_sync_ms"].get<int64_t>());
      result.async_ms.push_back(c["longest_async_ms"].get<int64_t>());
      result.pre_barrier_ms.push_back(c["longest_pre_barrier_ms"].get<int64_t>());
      result.sizes.push_back(c["size_bytes"].get<int64_t>());
    }
  }
  KeepLogs(flags, cluster);
  return result;
}

// keyed_count on Flink over the same input (bench/flink/), checkpoints every
// `checkpoint_ms` (0: off): the job's own time from execute() to its end,
// and the checkpoint coordinator's completed checkpoints.
RunResult RunFlinkKeyedCount(const std::string& bootstrap, const std::string& in, const Flags& flags,
                             int64_t checkpoint_ms) {
  const std::string out = NewTopic(bootstrap, "bench-flink-out");
  const weir::bench::FlinkRun run = weir::bench::RunFlinkJob(
      flags.flink_classpath, "dev.weir.bench.KeyedCount",
      {bootstrap, in, out, std::to_string(flags.parallelism), std::to_string(checkpoint_ms), "<dir>"}, 5);
  RunResult result;
  result.seconds = run.seconds;
  result.durations_ms = run.checkpoint_ms;
  result.sizes = run.checkpoint_bytes;
  return result;
}

// Whether `job` runs an attempt >= `min_attempt` whose tasks have taken
// records in.
bool AttemptProcessing(LocalCluster& cluster, const std::string& job, int min_attempt) {
  nlohmann::json s = cluster.WeirJson({"status", job});
  if (s.is_null() || s["state"] != "RUNNING" || s["attempt"].get<int>() < min_attempt) return false;
  int64_t in_records = 0;
  for (const auto& t : s["tasks"]) in_records += t["records_in"].get<int64_t>();
  return in_records > 0;
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
  Produce(bootstrap, in, 0, 20000, 1000);
  if (job.empty() || !WaitFor([&] { return AttemptProcessing(cluster, job, 1); }, absl::Seconds(60))) {
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
  const bool recovered = WaitFor([&] { return AttemptProcessing(cluster, job, 2); }, absl::Seconds(120),
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

struct BigStateResult {
  int64_t first_bytes = 0;                  // the first checkpoint after loading
  std::vector<int64_t> later_bytes;         // those while only few keys change
  double savepoint_seconds = 0;
  int64_t savepoint_bytes = 0;
  double jobmanager_recovery_seconds = -1;  // measured on the incremental run only
};

int64_t DirectoryBytes(const std::string& dir) {
  int64_t total = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file()) total += static_cast<int64_t>(it->file_size());
  }
  return total;
}

// keyed_count unbounded over flags.state_keys loaded keys, then a trickle of
// updates; checkpoints every second, incremental or not.
BigStateResult MeasureBigState(const std::string& bootstrap, const Flags& flags, bool incremental) {
  LocalCluster cluster({.taskmanagers = flags.parallelism, .slots_per_taskmanager = 1});
  cluster.Start();
  const std::string in = NewTopic(bootstrap, "bench-big-in"), out = NewTopic(bootstrap, "bench-big-out");
  Produce(bootstrap, in, 0, flags.state_keys, flags.state_keys);
  std::vector<std::string> options = {"-p", std::to_string(flags.parallelism), "-Dexecution.checkpointing.interval=1s",
                                      "-Dstate.backend.type=rocksdb",
                                      std::string("-Dexecution.checkpointing.incremental=") +
                                          (incremental ? "true" : "false")};
  std::string error;
  const std::string job = cluster.Submit(std::string(WEIR_JOBS_DIR) + "/keyed_count.so", options,
                                         {"--brokers", bootstrap, "--input-topic", in, "--output-topic", out}, &error);
  auto records_in = [&] {
    nlohmann::json s = cluster.WeirJson({"status", job});
    int64_t n = 0;
    if (s.is_null() || s["state"] != "RUNNING") return n;
    for (const auto& t : s["tasks"]) {
      if (t["name"].get<std::string>().find("KafkaSource") != std::string::npos) n += t["records_in"].get<int64_t>();
    }
    return n;
  };
  if (job.empty() || !WaitFor([&] { return records_in() >= flags.state_keys; }, absl::Minutes(10), absl::Seconds(1))) {
    std::fprintf(stderr, "bench: the job did not load its state: %s\n%s\n", error.c_str(), cluster.Logs().c_str());
    std::exit(1);
  }
  auto completed = [&] {
    std::vector<std::pair<int64_t, int64_t>> ids;  // (id, size), oldest first
    nlohmann::json c = cluster.WeirJson({"checkpoints", job});
    if (c.is_null()) return ids;
    for (const auto& cp : c["checkpoints"]) {
      if (cp["status"] == "COMPLETED") ids.emplace_back(cp["id"].get<int64_t>(), cp["size_bytes"].get<int64_t>());
    }
    std::sort(ids.begin(), ids.end());
    return ids;
  };
  // The first checkpoint that holds the whole state.
  const auto before = completed();
  const int64_t loaded_after = before.empty() ? 0 : before.back().first;
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int64_t first = flags.state_keys; !stop; first += 1000) {
      Produce(bootstrap, in, first, 1000, 1000);
      absl::SleepFor(absl::Seconds(1));
    }
  });
  absl::SleepFor(absl::Seconds(15));
  BigStateResult result;
  for (const auto& [id, size] : completed()) {
    if (id <= loaded_after) continue;
    if (result.first_bytes == 0) {
      result.first_bytes = size;
    } else {
      result.later_bytes.push_back(size);
    }
  }
  absl::Time start = absl::Now();
  nlohmann::json saved = cluster.WeirJson({"savepoint", job});
  result.savepoint_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (!saved.is_null()) result.savepoint_bytes = DirectoryBytes(saved["savepoint_path"]);
  if (incremental) {
    const int attempt = cluster.WeirJson({"status", job})["attempt"].get<int>();
    const absl::Time killed = absl::Now();
    cluster.RestartJobManager();
    const bool back = WaitFor([&] { return AttemptProcessing(cluster, job, attempt + 1); }, absl::Seconds(120),
                              absl::Milliseconds(20));
    if (back) result.jobmanager_recovery_seconds = absl::ToDoubleSeconds(absl::Now() - killed);
  }
  stop = true;
  writer.join();
  return result;
}

// CPU seconds (user + system) process `pid` has used, from /proc; 0 when
// it cannot be read.
double ProcessCpuSeconds(const std::string& pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Fields after the command name (which may hold spaces) in parentheses.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::vector<std::string> fields = absl::StrSplit(stat.substr(close + 2), ' ');
  int64_t utime = 0, stime = 0;
  // utime and stime are fields 14 and 15 of the line, 12 and 13 after it.
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) || !absl::SimpleAtoi(fields[12], &stime)) return 0;
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// Checkpoints every second into a local directory and into S3, interleaved.
int RunObjectStorePhase(const std::string& bootstrap, const Flags& flags) {
  absl::StatusOr<std::unique_ptr<weir::testing::ScriptServer>> s3 = weir::testing::ScriptServer::Start("s3.sh");
  if (!s3.ok()) {
    std::fprintf(stderr, "bench: %s\n", std::string(s3.status().message()).c_str());
    return 1;
  }
  weir::fs::S3Options options;
  options.endpoint = (*s3)->address();
  options.access_key = "weir-test-access-key";
  options.secret_key = "weir-test-secret-key";
  options.path_style = true;
  auto bucket = weir::fs::S3FileSystem::Open("s3://weir-bench", options);
  if (!bucket.ok() || !(*bucket)->CreateBucket().ok()) {
    std::fprintf(stderr, "bench: cannot create the bucket on %s\n", options.endpoint.c_str());
    return 1;
  }
  Flags in_s3 = flags;
  in_s3.cluster_config.insert(in_s3.cluster_config.end(),
                              {"-Ds3.endpoint=" + options.endpoint, "-Ds3.path.style.access=true",
                               "-Ds3.access-key=" + options.access_key, "-Ds3.secret-key=" + options.secret_key,
                               "-Dstate.checkpoints.dir=s3://weir-bench/checkpoints"});
  const std::string in = NewTopic(bootstrap, "bench-os-in");
  std::fprintf(stderr, "bench: producing %lld records over %lld keys\n", static_cast<long long>(flags.records),
               static_cast<long long>(flags.keys));
  Produce(bootstrap, in, 0, flags.records, flags.keys);
  Flags in_s3_baseline = in_s3;
  in_s3_baseline.cluster_config.insert(in_s3_baseline.cluster_config.end(), flags.s3_baseline_config.begin(),
                                       flags.s3_baseline_config.end());
  RunResult local, remote, baseline;
  // The S3 server's CPU over the runs of the S3 side (it shares the cores).
  std::string s3_pid;
  {
    std::ifstream pid_file((*s3)->dir() + "/s3proxy.pid");
    pid_file >> s3_pid;
  }
  double s3_cpu_seconds = 0, s3_baseline_cpu_seconds = 0;
  const bool with_baseline = !flags.s3_baseline_config.empty() || !flags.s3_baseline_bin.empty();
  auto add = [](RunResult& to, const RunResult& r) {
    to.durations_ms.insert(to.durations_ms.end(), r.durations_ms.begin(), r.durations_ms.end());
    to.async_ms.insert(to.async_ms.end(), r.async_ms.begin(), r.async_ms.end());
    to.sizes.insert(to.sizes.end(), r.sizes.begin(), r.sizes.end());
    to.seconds += r.seconds;
  };
  for (int round = 0; round < flags.rounds; ++round) {
    add(local, RunKeyedCount(bootstrap, in, flags, {"-Dexecution.checkpointing.interval=1s"}));
    if (with_baseline) {
      const char* bin_dir = std::getenv("WEIR_BIN_DIR");
      const std::string own_bin = bin_dir != nullptr ? bin_dir : "";
      if (!flags.s3_baseline_bin.empty()) setenv("WEIR_BIN_DIR", flags.s3_baseline_bin.c_str(), 1);
      const double cpu_before = ProcessCpuSeconds(s3_pid);
      add(baseline, RunKeyedCount(bootstrap, in, in_s3_baseline, {"-Dexecution.checkpointing.interval=1s"}));
      s3_baseline_cpu_seconds += ProcessCpuSeconds(s3_pid) - cpu_before;
      if (own_bin.empty()) {
        unsetenv("WEIR_BIN_DIR");
      } else {
        setenv("WEIR_BIN_DIR", own_bin.c_str(), 1);
      }
    }
    const double cpu_before = ProcessCpuSeconds(s3_pid);
    add(remote, RunKeyedCount(bootstrap, in, in_s3, {"-Dexecution.checkpointing.interval=1s"}));
    s3_cpu_seconds += ProcessCpuSeconds(s3_pid) - cpu_before;
  }
  std::printf("object-store checkpoints: keyed_count, %lld records over %lld keys, parallelism %d, state backend %s, "
              "checkpoints every second, %d interleaved rounds\n",
              static_cast<long long>(flags.records), static_cast<long long>(flags.keys), flags.parallelism,
              flags.state_backend.c_str(), static_cast<int>(flags.rounds));
  std::vector<std::pair<const char*, const RunResult*>> sides = {{"local directory", &local}};
  if (with_baseline) sides.emplace_back("S3, baseline", &baseline);
  sides.emplace_back("S3 (local S3Proxy)", &remote);
  for (const auto& [name, side] : sides) {
    const RunResult& r = *side;
    std::printf("  %-19s %3zu checkpoints: duration p50 %5.0f ms, p99 %5.0f ms; asynchronous part p50 %5.0f ms, "
                "p99 %5.0f ms; size p50 %.0f bytes; %.1f s of runs\n",
                name, r.durations_ms.size(), Percentile(r.durations_ms, 0.5), Percentile(r.durations_ms, 0.99),
                Percentile(r.async_ms, 0.5), Percentile(r.async_ms, 0.99), Percentile(r.sizes, 0.5), r.seconds);
  }
  auto server_cpu = [](const char* side, double cpu, double seconds) {
    std::printf("  S3Proxy used %.1f CPU-seconds over the %.1f s of the %s runs (%.2f of two cores)\n", cpu, seconds,
                side, cpu / std::max(1.0, 2 * seconds));
  };
  if (with_baseline) server_cpu("S3 baseline", s3_baseline_cpu_seconds, baseline.seconds);
  server_cpu("S3", s3_cpu_seconds, remote.seconds);
  const std::string s3_dir = (*s3)->dir();
  s3->reset();
  std::error_code ec;
  std::filesystem::remove_all(s3_dir, ec);
  auto ratios = [&](const char* name, const RunResult& r) {
    std::printf("  %s / local: duration p50 %.2fx, p99 %.2fx; asynchronous part p50 %.2fx, p99 %.2fx\n", name,
                Percentile(r.durations_ms, 0.5) / std::max(1.0, Percentile(local.durations_ms, 0.5)),
                Percentile(r.durations_ms, 0.99) / std::max(1.0, Percentile(local.durations_ms, 0.99)),
                Percentile(r.async_ms, 0.5) / std::max(1.0, Percentile(local.async_ms, 0.5)),
                Percentile(r.async_ms, 0.99) / std::max(1.0, Percentile(local.async_ms, 0.99)));
  };
  if (with_baseline) ratios("S3 baseline", baseline);
  ratios("S3", remote);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  weir::bench::BenchFlags parser("bench");
  parser.Int("--records", &flags.records);
  parser.Int("--keys", &flags.keys);
  parser.Int("--parallelism", &flags.parallelism);
  parser.String("--state-backend", &flags.state_backend);
  parser.Int("--state-keys", &flags.state_keys);
  parser.Int("--rounds", &flags.rounds, 1);
  std::string phases = "all";  // or "big-state": phase 3 only; "throughput": phase 1 only; "object-store"
  parser.String("--phases", &phases);
  parser.List("--cluster-config", &flags.cluster_config);  // "-Dk=v,-Dk=v"
  parser.String("--flink-classpath", &flags.flink_classpath);
  parser.String("--keep-logs", &flags.keep_logs);
  parser.List("--s3-baseline-config", &flags.s3_baseline_config);  // "-Dk=v,-Dk=v"
  parser.String("--s3-baseline-bin", &flags.s3_baseline_bin);
  if (!parser.Parse(argc, argv)) return 2;
  const std::string bootstrap = weir::test::TestKafkaBootstrap();
  if (bootstrap.empty()) return 1;
  if (phases == "object-store") return RunObjectStorePhase(bootstrap, flags);
  if (phases != "big-state") {
  const std::string in = NewTopic(bootstrap, "bench-ckpt-in");
  std::fprintf(stderr, "bench: producing %lld records over %lld keys\n", static_cast<long long>(flags.records),
               static_cast<long long>(flags.keys));
  Produce(bootstrap, in, 0, flags.records, flags.keys);

  // Interleaved (off, on, off, on, ...): the first run on fresh input also
  // warms the page cache and the broker, which a single off-then-on pair
  // credits to "off".
  std::vector<double> off_seconds, on_seconds;
  RunResult on;  // every "on" run's checkpoints together
  std::vector<double> flink_off_seconds, flink_on_seconds;
  RunResult flink_on;
  for (int round = 0; round < flags.rounds; ++round) {
    if (!flags.flink_classpath.empty()) {
      flink_off_seconds.push_back(RunFlinkKeyedCount(bootstrap, in, flags, 0).seconds);
      RunResult r = RunFlinkKeyedCount(bootstrap, in, flags, 1000);
      flink_on_seconds.push_back(r.seconds);
      flink_on.durations_ms.insert(flink_on.durations_ms.end(), r.durations_ms.begin(), r.durations_ms.end());
      flink_on.sizes.insert(flink_on.sizes.end(), r.sizes.begin(), r.sizes.end());
    }
    off_seconds.push_back(RunKeyedCount(bootstrap, in, flags, {}).seconds);
    RunResult r = RunKeyedCount(bootstrap, in, flags, {"-Dexecution.checkpointing.interval=1s"});
    on_seconds.push_back(r.seconds);
    on.durations_ms.insert(on.durations_ms.end(), r.durations_ms.begin(), r.durations_ms.end());
    on.alignments_ms.insert(on.alignments_ms.end(), r.alignments_ms.begin(), r.alignments_ms.end());
    on.sizes.insert(on.sizes.end(), r.sizes.begin(), r.sizes.end());
    on.sync_ms.insert(on.sync_ms.end(), r.sync_ms.begin(), r.sync_ms.end());
    on.async_ms.insert(on.async_ms.end(), r.async_ms.begin(), r.async_ms.end());
    on.pre_barrier_ms.insert(on.pre_barrier_ms.end(), r.pre_barrier_ms.begin(), r.pre_barrier_ms.end());
  }
  auto rates = [&](const std::vector<double>& seconds) {
    std::string text;
    for (double s : seconds) text += absl::StrCat(text.empty() ? "" : ", ", static_cast<int64_t>(flags.records / s));
    return text;
  };
  auto median_rate = [&](std::vector<double> seconds) {
    std::sort(seconds.begin(), seconds.end());
    return flags.records / seconds[seconds.size() / 2];
  };
  const double off_rate = median_rate(off_seconds), on_rate = median_rate(on_seconds);
  std::printf("checkpoint benchmark: keyed_count, %lld records over %lld keys, parallelism %d, state backend %s, "
              "%d interleaved rounds\n",
              static_cast<long long>(flags.records), static_cast<long long>(flags.keys), flags.parallelism,
              flags.state_backend.c_str(), static_cast<int>(flags.rounds));
  std::printf("  checkpoints off:          median %10.0f records/s (rounds: %s; submission to FINISHED)\n", off_rate,
              rates(off_seconds).c_str());
  std::printf("  checkpoints every second: median %10.0f records/s (rounds: %s)\n", on_rate,
              rates(on_seconds).c_str());
  std::printf("  ratio on/off (medians): %.3f\n", on_rate / off_rate);
  std::printf("  %zu checkpoints completed: duration p50 %.0f ms, p99 %.0f ms; size p50 %.0f bytes; "
              "longest alignment p50 %.0f ms, p99 %.0f ms\n",
              on.durations_ms.size(), Percentile(on.durations_ms, 0.5), Percentile(on.durations_ms, 0.99),
              Percentile(on.sizes, 0.5), Percentile(on.alignments_ms, 0.5), Percentile(on.alignments_ms, 0.99));
  std::printf("  longest synchronous part p50 %.0f ms, p99 %.0f ms; longest asynchronous part p50 %.0f ms, "
              "p99 %.0f ms\n",
              Percentile(on.sync_ms, 0.5), Percentile(on.sync_ms, 0.99), Percentile(on.async_ms, 0.5),
              Percentile(on.async_ms, 0.99));
  std::printf("  of the synchronous part, the longest flush before the barrier (sinks): p50 %.0f ms, p99 %.0f ms\n",
              Percentile(on.pre_barrier_ms, 0.5), Percentile(on.pre_barrier_ms, 0.99));

  if (!flags.flink_classpath.empty()) {
    const double flink_off = median_rate(flink_off_seconds), flink_on_rate = median_rate(flink_on_seconds);
    std::printf("  Apache Flink 2.2.1, the same job and input (bench/flink, rocksdb, incremental checkpoints; its "
                "time from execute() to the end):\n");
    std::printf("    checkpoints off:          median %10.0f records/s (rounds: %s)\n", flink_off,
                rates(flink_off_seconds).c_str());
    std::printf("    checkpoints every second: median %10.0f records/s (rounds: %s)\n", flink_on_rate,
                rates(flink_on_seconds).c_str());
    std::printf("    ratio on/off (medians): %.3f\n", flink_on_rate / flink_off);
    std::printf("    %zu checkpoints completed: duration p50 %.0f ms, p99 %.0f ms; size p50 %.0f bytes\n",
                flink_on.durations_ms.size(), Percentile(flink_on.durations_ms, 0.5),
                Percentile(flink_on.durations_ms, 0.99), Percentile(flink_on.sizes, 0.5));
    std::printf("  Weir / Flink: records/s with checkpoints %.2fx; checkpoint duration p50 %.2fx, p99 %.2fx\n",
                on_rate / flink_on_rate,
                Percentile(on.durations_ms, 0.5) / std::max(1.0, Percentile(flink_on.durations_ms, 0.5)),
                Percentile(on.durations_ms, 0.99) / std::max(1.0, Percentile(flink_on.durations_ms, 0.99)));
  }

  if (phases == "throughput") return 0;
  const double default_recovery = MeasureRecovery(bootstrap, flags, {});
  const double tuned_recovery = MeasureRecovery(
      bootstrap, flags, {"-Drestart-strategy.type=fixed-delay", "-Drestart-strategy.fixed-delay.delay=0ms"});
  std::printf("  recovery, SIGKILL of a TaskManager to records processed by the new attempt:\n");
  std::printf("    default restart strategy (exponential-delay, 1 s initial backoff): %.2f s\n", default_recovery);
  std::printf("    restart-strategy fixed-delay, delay 0:                              %.2f s\n", tuned_recovery);
  }

  {
  const BigStateResult full = MeasureBigState(bootstrap, flags, /*incremental=*/false);
  const BigStateResult incremental = MeasureBigState(bootstrap, flags, /*incremental=*/true);
  std::printf("big state: keyed_count, %lld keys loaded, then 1000 records/s over 1000 keys; parallelism %d, rocksdb\n",
              static_cast<long long>(flags.state_keys), flags.parallelism);
  // The mean as well as the median: compactions rewrite big files every few
  // checkpoints, and the median alone hides them (or not) by chance.
  auto mean = [](const std::vector<int64_t>& v) {
    double sum = 0;
    for (int64_t x : v) sum += static_cast<double>(x);
    return v.empty() ? 0.0 : sum / static_cast<double>(v.size());
  };
  std::printf("  bytes written per checkpoint, full:        first %lld, then p50 %.0f, mean %.0f (%zu checkpoints)\n",
              static_cast<long long>(full.first_bytes), Percentile(full.later_bytes, 0.5), mean(full.later_bytes),
              full.later_bytes.size());
  std::printf("  bytes written per checkpoint, incremental: first %lld, then p50 %.0f, mean %.0f (%zu checkpoints)\n",
              static_cast<long long>(incremental.first_bytes), Percentile(incremental.later_bytes, 0.5),
              mean(incremental.later_bytes), incremental.later_bytes.size());
  const double full_mean = mean(full.later_bytes);
  std::printf("  ratio incremental/full (means): %.3f\n", full_mean > 0 ? mean(incremental.later_bytes) / full_mean : 0);
  std::printf("  savepoint of that state: %.2f s, %lld bytes (full run %.2f s, %lld bytes)\n",
              incremental.savepoint_seconds, static_cast<long long>(incremental.savepoint_bytes), full.savepoint_seconds,
              static_cast<long long>(full.savepoint_bytes));
  std::printf("  JobManager SIGKILL and restart to records processed again: %.2f s\n",
              incremental.jobmanager_recovery_seconds);
}
  return 0;
}
