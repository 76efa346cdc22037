// nexmark_bench: Nexmark-style queries on Weir and on Apache Flink 2.2, over
// one generated input, in one run.
//
//   bench/run.sh nexmark [--events N] [--event-rate R] [--queries q0,q1,q2,q5] [--parallelism P]
//                        [--checkpoint-ms M] [--rounds R] [--flink] [--watermark-interval-ms W]
//                        [--baseline-bin DIR] [--cluster-config -Dk=v,...] [--baseline-config -Dk=v,...]
//
// N events (default 2 M) of bench/nexmark/generator.h, R per second of event
// time (default 10 000), go once into a topic of 4 partitions. Then, per
// query and round, Weir's bench/jobs/nexmark.cc (bounded, RocksDB state, a
// fresh cluster of one JobManager and P TaskManagers of one slot) and, with
// --flink, bench/flink's Nexmark.java (the same plan in Flink's DataStream
// API, a local cluster in one JVM with P slots, RocksDB with incremental
// checkpoints), both at-least-once into Kafka with checkpoints every M ms
// (default 1000; 0 off), interleaved. Per query it prints the medians of:
// events/s (Weir: submission to FINISHED; Flink: execute() to its end), CPU
// seconds per million events (Weir: every daemon's user + system time at the
// end; Flink: the JVM's), peak resident memory (Weir: JobManager plus
// TaskManagers; Flink: the JVM), and the checkpoints' duration p50/p99; and
// the ratios. --watermark-interval-ms sets pipeline.auto-watermark-interval
// on both engines (default: each its own, Weir 50 ms, Flink 200 ms). Every
// run's output is checked against a single pass over the
// generated events: the record count for q0-q2, every (window, auction,
// count) for q5. With --baseline-bin DIR, Weir runs also on the daemons of
// another build (DIR, e.g. the revision before a change; the job is this
// build's), interleaved, with the ratios this build / the baseline.
// --cluster-config gives this build's clusters -Dkey=value options, and
// --baseline-config the baseline's (on this build's daemons unless
// --baseline-bin is given): two settings side by side in one run.
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/bench_flags.h"
#include "bench/flink_job.h"
#include "bench/nexmark/generator.h"
#include "bench/proc_status.h"
#include "bench/stats.h"
#include "tests/kafka/kafka_io.h"
#include "tests/kafka/test_kafka.h"
#include "tests/testing/local_cluster.h"

namespace {

using weir::bench::Percentile;
using weir::bench::nexmark::Event;
using weir::bench::nexmark::Generator;
using weir::testing::LocalCluster;

struct Flags {
  int64_t events = 2000000;
  int64_t event_rate = 10000;
  std::vector<std::string> queries = {"q0", "q1", "q2", "q5"};
  int parallelism = 2;
  int64_t checkpoint_ms = 1000;
  int64_t rounds = 2;
  std::string flink_classpath;
  // pipeline.auto-watermark-interval of both engines; 0: their defaults.
  int64_t watermark_interval_ms = 0;
  // Daemons (weir, weir-jobmanager, weir-taskmanager) of a baseline build.
  std::string baseline_bin;
  // -Dkey=value options of this build's clusters, and of the baseline's
  // (which runs this build's daemons unless --baseline-bin names others).
  std::vector<std::string> cluster_config;
  std::vector<std::string> baseline_config;
  // Watermark alignment of the sources' partitions (0: off). Weir aligns
  // the partitions within a source subtask; Flink's alignment
  // (withWatermarkAlignment) also pauses whole subtasks through its
  // coordinator, and at 1 s it ran q5 at a quarter of its unaligned rate
  // (bench/README.md), so Flink runs unaligned unless told.
  int64_t max_drift_ms = 1000;
  int64_t flink_max_drift_ms = 0;
  // Arguments added to the job's, on this side and on the baseline's
  // (bench/jobs/nexmark.cc; --max-drift-ms N there overrides the one above).
  std::vector<std::string> job_args;
  std::vector<std::string> baseline_job_args;
};

// The parts of a checkpoint the bench reports: field, name.
const std::pair<const char*, const char*> kParts[] = {{"longest_start_delay_ms", "start delay"},
                                                      {"longest_alignment_ms", "alignment"},
                                                      {"longest_sync_ms", "synchronous part"},
                                                      {"longest_async_ms", "asynchronous part"},
                                                      {"metadata_ms", "metadata"}};

struct Run {
  double seconds = 0;
  double cpu_seconds = 0;
  double peak_rss_mib = 0;
  std::vector<int64_t> checkpoint_ms;
  // Weir only: per checkpoint, its parts (kParts: the longest of any task,
  // and writing the metadata), by their field in `weir checkpoints --json`.
  std::map<std::string, std::vector<int64_t>> parts;
  bool correct = false;
};

std::string NewTopic(const std::string& bootstrap, const std::string& prefix) {
  std::string topic = weir::test::UniqueTopicName(prefix);
  if (auto s = weir::test::CreateTopic(bootstrap, topic, 4); !s.ok()) {
    std::fprintf(stderr, "bench: %s\n", std::string(s.message()).c_str());
    std::exit(1);
  }
  return topic;
}

// CPU seconds (user + system) of a process so far, from /proc/<pid>/stat.
double CpuSeconds(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Fields after the command (which may hold spaces) start after ") ".
  const size_t close = stat.rfind(") ");
  if (close == std::string::npos) return 0;
  std::vector<std::string> fields = absl::StrSplit(stat.substr(close + 2), ' ');
  // utime and stime are fields 14 and 15 of the line, 12 and 13 here.
  int64_t utime = 0, stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) || !absl::SimpleAtoi(fields[12], &stime)) return 0;
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// What a single pass over the events says each query writes: the number of
// records for q0-q2, and the lines themselves for q5.
struct Expected {
  std::map<std::string, int64_t> counts;
  std::set<std::string> q5;
};

Expected SinglePass(const Generator& generator, int64_t events) {
  Expected expected;
  std::map<std::pair<int64_t, int64_t>, int64_t> per_window;  // (end, auction) -> bids
  int64_t bids = 0, q2 = 0;
  for (int64_t i = 0; i < events; ++i) {
    const Event e = generator.At(i);
    if (e.value[0] != 'B') continue;
    ++bids;
    const int64_t auction = std::stoll(e.key);
    if (auction % 123 == 0) ++q2;
    // Sliding windows of 10 s every 2 s holding e.time_ms.
    for (int64_t start = e.time_ms - e.time_ms % 2000; start > e.time_ms - 10000; start -= 2000) {
      ++per_window[{start + 10000, auction}];
    }
  }
  expected.counts = {{"q0", events}, {"q1", bids}, {"q2", q2}};
  std::map<int64_t, int64_t> most;
  for (const auto& [window, n] : per_window) most[window.first] = std::max(most[window.first], n);
  for (const auto& [window, n] : per_window) {
    if (n == most[window.first]) expected.q5.insert(absl::StrCat(window.first, ",", window.second, ",", n));
  }
  expected.counts["q5"] = static_cast<int64_t>(expected.q5.size());
  return expected;
}

bool Check(const std::string& bootstrap, const std::string& out, const std::string& query, const Expected& expected,
           const std::string& who) {
  absl::StatusOr<std::vector<weir::test::KafkaMessage>> output = weir::test::ReadTopic(bootstrap, out);
  if (!output.ok()) {
    std::fprintf(stderr, "bench: reading %s's output: %s\n", who.c_str(), std::string(output.status().message()).c_str());
    return false;
  }
  // At-least-once without failures: every record once.
  const int64_t want = expected.counts.at(query);
  bool correct = true;
  if (static_cast<int64_t>(output->size()) != want) {
    std::fprintf(stderr, "bench: %s %s wrote %zu records; a single pass gives %lld\n", who.c_str(), query.c_str(),
                 output->size(), static_cast<long long>(want));
    correct = false;
  }
  if (query != "q5") return correct;
  // Which lines are extra, repeated or missing (a few of each), to tell a
  // repeated window from a wrong count.
  std::map<std::string, int> written;
  for (const auto& m : *output) ++written[m.value];
  int shown = 0;
  for (const auto& [line, n] : written) {
    if (n == 1 && expected.q5.count(line) > 0) continue;
    correct = false;
    if (++shown <= 10) {
      std::fprintf(stderr, "bench: %s q5 wrote '%s' %d time(s)%s\n", who.c_str(), line.c_str(), n,
                   expected.q5.count(line) > 0 ? "" : ", a line a single pass does not give");
    }
  }
  for (const std::string& line : expected.q5) {
    if (written.count(line) > 0) continue;
    correct = false;
    if (++shown <= 20) std::fprintf(stderr, "bench: %s q5 did not write '%s'\n", who.c_str(), line.c_str());
  }
  return correct;
}

Run RunWeir(const std::string& bootstrap, const std::string& in, const std::string& query, const Flags& flags,
            const Expected& expected, const std::string& bin_dir, std::vector<std::string> config,
            const std::vector<std::string>& job_args) {
  // LocalCluster starts the binaries of weir::testing::BinDir().
  setenv("WEIR_BIN_DIR", bin_dir.c_str(), 1);
  if (flags.watermark_interval_ms > 0) {
    config.push_back(absl::StrCat("-Dpipeline.auto-watermark-interval=", flags.watermark_interval_ms, "ms"));
  }
  LocalCluster cluster({.taskmanagers = flags.parallelism, .slots_per_taskmanager = 1, .config = config});
  cluster.Start();
  const std::string out = NewTopic(bootstrap, "bench-nexmark-weir");
  std::vector<std::string> options = {"-p", std::to_string(flags.parallelism), "-Dstate.backend.type=rocksdb"};
  if (flags.checkpoint_ms > 0) {
    options.push_back(absl::StrCat("-Dexecution.checkpointing.interval=", flags.checkpoint_ms, "ms"));
  }
  std::string error;
  const absl::Time start = absl::Now();
  std::vector<std::string> args = {"--brokers", bootstrap, "--input-topic", in, "--output-topic", out,
                                   "--query", query};
  if (query == "q5") args.insert(args.end(), {"--max-drift-ms", std::to_string(flags.max_drift_ms)});
  args.insert(args.begin(), job_args.begin(), job_args.end());  // the first of a name counts
  const std::string job = cluster.Submit(std::string(WEIR_JOBS_DIR) + "/nexmark.so", options, args, &error);
  if (job.empty()) {
    std::fprintf(stderr, "bench: submission failed: %s\n", error.c_str());
    std::exit(1);
  }
  const nlohmann::json status = cluster.WaitForJobEnd(job, absl::Minutes(30));
  Run run;
  run.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (status.is_null() || status["state"] != "FINISHED") {
    std::fprintf(stderr, "bench: the job did not finish: %s\n%s\n", status.dump(2).c_str(), cluster.Logs().c_str());
    std::exit(1);
  }
  if (status.contains("restarts") && status["restarts"].get<int64_t>() > 0) {
    // At-least-once output repeats what the restored checkpoint had not
    // covered: say so, with the failures, rather than only "WRONG".
    std::fprintf(stderr, "bench: the job restarted %lld time(s); its failures from the logs:\n",
                 static_cast<long long>(status["restarts"].get<int64_t>()));
    for (absl::string_view line : absl::StrSplit(cluster.Logs(), '\n')) {
      if (absl::StrContains(line, "FAILED") || absl::StrContains(line, "failed")) {
        std::fprintf(stderr, "  %.*s\n", static_cast<int>(std::min<size_t>(line.size(), 400)), line.data());
      }
    }
  }
  std::vector<pid_t> pids = {cluster.jobmanager().pid()};
  for (int i = 0; i < flags.parallelism; ++i) pids.push_back(cluster.taskmanager(i).pid());
  for (pid_t pid : pids) {
    run.cpu_seconds += CpuSeconds(pid);
    run.peak_rss_mib += static_cast<double>(std::max<int64_t>(0, weir::bench::ProcStatusField(pid, "VmHWM"))) / 1024;
  }
  const nlohmann::json checkpoints = cluster.WeirJson({"checkpoints", job});
  if (!checkpoints.is_null()) {
    for (const auto& c : checkpoints["checkpoints"]) {
      if (c["status"] != "COMPLETED") continue;
      run.checkpoint_ms.push_back(c["duration_ms"].get<int64_t>());
      for (const auto& [field, name] : kParts) run.parts[field].push_back(c.value(field, int64_t{0}));
    }
  }
  run.correct = Check(bootstrap, out, query, expected, "Weir");
  // The TaskManagers' account of slow synchronous parts, when asked.
  if (std::getenv("NEXMARK_BENCH_SLOW_CHECKPOINTS") != nullptr) {
    for (const std::string& line : std::vector<std::string>(absl::StrSplit(cluster.Logs(), '\n'))) {
      if (line.find("synchronous part") != std::string::npos) std::fprintf(stderr, "%s\n", line.c_str());
    }
  }
  return run;
}

Run RunFlink(const std::string& bootstrap, const std::string& in, const std::string& query, const Flags& flags,
             const Expected& expected) {
  const std::string out = NewTopic(bootstrap, "bench-nexmark-flink");
  std::vector<std::string> args = {bootstrap, in, out, std::to_string(flags.parallelism),
                                   std::to_string(flags.checkpoint_ms), "<dir>", query};
  args.push_back(std::to_string(flags.watermark_interval_ms));  // 0: Flink's default
  args.push_back(std::to_string(flags.flink_max_drift_ms));
  const weir::bench::FlinkRun flink = weir::bench::RunFlinkJob(flags.flink_classpath, "dev.weir.bench.Nexmark", args, 5);
  Run run;
  run.seconds = flink.seconds;
  run.cpu_seconds = flink.cpu_seconds;
  run.peak_rss_mib = static_cast<double>(flink.peak_rss_kb) / 1024;
  run.checkpoint_ms = flink.checkpoint_ms;
  run.correct = Check(bootstrap, out, query, expected, "Flink");
  return run;
}

struct Summary {
  double events_per_second = 0, cpu_per_million = 0, rss_mib = 0, checkpoint_p50 = 0, checkpoint_p99 = 0;
  std::map<std::string, double> parts_p99;
  size_t checkpoints = 0;
  bool correct = true;
};

Summary Summarize(const std::vector<Run>& runs, int64_t events) {
  Summary s;
  std::vector<double> rates, cpu, rss;
  std::vector<int64_t> checkpoint_ms;
  std::map<std::string, std::vector<int64_t>> parts;
  for (const Run& r : runs) {
    for (const auto& [field, values] : r.parts) parts[field].insert(parts[field].end(), values.begin(), values.end());
    rates.push_back(static_cast<double>(events) / r.seconds);
    cpu.push_back(r.cpu_seconds / (static_cast<double>(events) / 1e6));
    rss.push_back(r.peak_rss_mib);
    checkpoint_ms.insert(checkpoint_ms.end(), r.checkpoint_ms.begin(), r.checkpoint_ms.end());
    s.correct = s.correct && r.correct;
  }
  s.events_per_second = Percentile(rates, 0.5);
  s.cpu_per_million = Percentile(cpu, 0.5);
  s.rss_mib = Percentile(rss, 0.5);
  s.checkpoint_p50 = Percentile(checkpoint_ms, 0.5);
  s.checkpoint_p99 = Percentile(checkpoint_ms, 0.99);
  s.checkpoints = checkpoint_ms.size();
  for (const auto& [field, values] : parts) s.parts_p99[field] = Percentile(values, 0.99);
  return s;
}

void Print(const char* who, const Summary& s) {
  std::printf("    %-6s %10.0f events/s | %6.2f CPU-s per M events | peak %7.1f MiB | %zu checkpoints, p50 %.0f ms, "
              "p99 %.0f ms | output %s\n",
              who, s.events_per_second, s.cpu_per_million, s.rss_mib, s.checkpoints, s.checkpoint_p50,
              s.checkpoint_p99, s.correct ? "equals a single pass" : "WRONG");
  if (!s.parts_p99.empty()) {
    std::printf("           of a checkpoint, p99 of the longest:");
    for (const auto& [field, name] : kParts) std::printf(" %s %.0f ms", name, s.parts_p99.at(field));
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  weir::bench::BenchFlags parser("bench");
  parser.Int("--events", &flags.events);
  parser.Int("--event-rate", &flags.event_rate);
  parser.List("--queries", &flags.queries);
  parser.Int("--parallelism", &flags.parallelism);
  parser.Int("--checkpoint-ms", &flags.checkpoint_ms, 0);
  parser.Int("--rounds", &flags.rounds);
  parser.String("--flink-classpath", &flags.flink_classpath);
  parser.Int("--watermark-interval-ms", &flags.watermark_interval_ms, 0);
  parser.String("--baseline-bin", &flags.baseline_bin);
  parser.List("--cluster-config", &flags.cluster_config);
  parser.List("--baseline-config", &flags.baseline_config);
  parser.Int("--max-drift-ms", &flags.max_drift_ms, 0);
  parser.Int("--flink-max-drift-ms", &flags.flink_max_drift_ms, 0);
  parser.List("--job-args", &flags.job_args);
  parser.List("--baseline-job-args", &flags.baseline_job_args);
  if (!parser.Parse(argc, argv)) return 2;
  // This build's binaries: WEIR_BIN_DIR as the bench was started, else the build's.
  const std::string this_build = weir::testing::BinDir();
  const std::string bootstrap = weir::test::TestKafkaBootstrap();
  if (bootstrap.empty()) return 1;

  // Event time starts a day back, so that no timestamp is in the future.
  const int64_t base = (absl::ToUnixMillis(absl::Now()) - 24 * 3600 * 1000) / 10000 * 10000;
  const Generator generator(base, flags.event_rate);
  const std::string in = NewTopic(bootstrap, "bench-nexmark-events");
  std::fprintf(stderr, "bench: producing %lld events\n", static_cast<long long>(flags.events));
  std::vector<weir::test::KafkaMessage> batch;
  for (int64_t i = 0; i < flags.events; ++i) {
    Event e = generator.At(i);
    batch.push_back({std::move(e.key), std::move(e.value), -1, -1, e.time_ms});
    if (batch.size() == 200000 || i + 1 == flags.events) {
      if (auto s = weir::test::ProduceMessages(bootstrap, in, batch); !s.ok()) {
        std::fprintf(stderr, "bench: %s\n", std::string(s.message()).c_str());
        return 1;
      }
      batch.clear();
    }
  }
  const Expected expected = SinglePass(generator, flags.events);

  std::printf("nexmark benchmark: %lld events (%lld/s of event time), parallelism %d, checkpoints every %lld ms, "
              "RocksDB state, %lld interleaved rounds, watermarks every %s, source partitions aligned %s (Flink: "
              "%s)\n",
              static_cast<long long>(flags.events), static_cast<long long>(flags.event_rate), flags.parallelism,
              static_cast<long long>(flags.checkpoint_ms), static_cast<long long>(flags.rounds),
              flags.watermark_interval_ms > 0 ? absl::StrCat(flags.watermark_interval_ms, " ms").c_str()
                                              : "each engine's default (Weir 50 ms, Flink 200 ms)",
              flags.max_drift_ms > 0 ? absl::StrCat("within ", flags.max_drift_ms, " ms").c_str() : "off",
              flags.flink_max_drift_ms > 0 ? absl::StrCat("within ", flags.flink_max_drift_ms, " ms").c_str() : "off");
  bool all_correct = true;
  for (const std::string& query : flags.queries) {
    if (!expected.counts.contains(query)) {
      std::fprintf(stderr, "bench: unknown query '%s'; expected q0, q1, q2 or q5\n", query.c_str());
      return 2;
    }
    std::vector<Run> weir_runs, flink_runs, baseline_runs;
    for (int64_t round = 0; round < flags.rounds; ++round) {
      if (!flags.flink_classpath.empty()) flink_runs.push_back(RunFlink(bootstrap, in, query, flags, expected));
      if (!flags.baseline_bin.empty() || !flags.baseline_config.empty() || !flags.baseline_job_args.empty()) {
        const std::string& bin = flags.baseline_bin.empty() ? this_build : flags.baseline_bin;
        baseline_runs.push_back(
            RunWeir(bootstrap, in, query, flags, expected, bin, flags.baseline_config, flags.baseline_job_args));
      }
      weir_runs.push_back(
          RunWeir(bootstrap, in, query, flags, expected, this_build, flags.cluster_config, flags.job_args));
    }
    const Summary weir = Summarize(weir_runs, flags.events);
    std::printf("  %s (%lld output records):\n", query.c_str(), static_cast<long long>(expected.counts.at(query)));
    Print("Weir", weir);
    all_correct = all_correct && weir.correct;
    // Another engine's or build's runs beside Weir's, with the ratios.
    auto compare = [&](const std::vector<Run>& runs, const char* who, const char* label) {
      if (runs.empty()) return;
      const Summary other = Summarize(runs, flags.events);
      Print(who, other);
      all_correct = all_correct && other.correct;
      // Checkpoint times compare only when both sides took checkpoints (a
      // short run may end before its first).
      const std::string checkpoints =
          weir.checkpoints == 0 || other.checkpoints == 0
              ? std::string("checkpoints not compared (a side took none)")
              : absl::StrFormat("checkpoint p50 %.2fx, p99 %.2fx", weir.checkpoint_p50 / std::max(1.0, other.checkpoint_p50),
                                weir.checkpoint_p99 / std::max(1.0, other.checkpoint_p99));
      std::printf("    Weir / %s: events/s %.2fx, events per CPU-second %.2fx, peak memory %.2fx, %s\n", label,
                  weir.events_per_second / other.events_per_second, other.cpu_per_million / weir.cpu_per_million,
                  weir.rss_mib / other.rss_mib, checkpoints.c_str());
    };
    compare(baseline_runs, "base", "baseline");
    compare(flink_runs, "Flink", "Flink");
  }
  return all_correct ? 0 : 1;
}
