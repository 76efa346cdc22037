// memory_bench: resident memory of the JobManager and of every TaskManager
// while kafka_copy and keyed_count run at full rate, with the Kafka clients
// sized from taskmanager.memory.task.off-heap.size beside librdkafka's own
// sizes (the key at 0), in one run, interleaved.
//
//   bench/run.sh memory [--records N] [--value-bytes B] [--partitions P] [--parallelism K]
//                       [--keys K] [--rounds R] [--budget SIZE] [--jobs copy,keyed]
//                       [--cluster-config -Dk=v,...] [--source-properties k=v,...] [--sink-properties k=v,...]
//                       [--baseline-bin DIR] [--baseline-budget SIZE] [--baseline-config -Dk=v,...]
//                       [--guarantee exactly-once|at-least-once] [--checkpoint-ms M]
//
// Every run starts a fresh cluster (so that a peak belongs to one run):
// kafka_copy on one TaskManager with K slots (as kafka_copy_bench),
// keyed_count on K TaskManagers of one slot (as checkpoint_bench), both
// bounded and without checkpoints over an input produced once. A sampler
// reads VmRSS, RssAnon and RssFile of every daemon from /proc/<pid>/status
// every 50 ms from submission until the job is FINISHED ("rest" is read
// 3 s after the cluster started); "steady" is the
// median of those samples, "highest" the sample of the highest VmRSS (and
// its time since submission), "peak" the process's VmHWM at the end
// (start-up included). Rates run from submission to FINISHED. The ratio is budget /
// librdkafka-defaults of the median rates.
//
// With --baseline-bin DIR the pair is another build's daemons (DIR, e.g. a
// build with -DWEIR_STATIC_GRPC=OFF) against this build's, both with the
// budget, interleaved the same way; the ratio is this build / the baseline.
// With --baseline-budget SIZE the pair is this build at that budget against
// this build at --budget (e.g. 8mb against 4mb): the ratio is --budget / it.
// With --baseline-config -Dk=v,... the pair is this build with those
// settings against it without them, both at --budget.
#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "bench/bench_flags.h"
#include "bench/proc_status.h"
#include "tests/kafka/kafka_io.h"
#include "tests/kafka/test_kafka.h"
#include "tests/testing/local_cluster.h"

namespace {

using weir::bench::ProcStatusField;

using weir::testing::LocalCluster;

struct Flags {
  int64_t records = 2000000;
  int value_bytes = 100;
  int partitions = 4;
  int parallelism = 2;
  int64_t keys = 100000;
  int64_t rounds = 2;
  // taskmanager.memory.task.off-heap.size of the budgeted runs; empty: the
  // key's default.
  std::string budget;
  std::vector<std::string> jobs = {"copy", "keyed"};
  std::vector<std::string> cluster_config;
  // kafka_copy's --source-properties / --sink-properties (k=v,k=v): a
  // job's own librdkafka settings, which win over the derived ones.
  std::string source_properties, sink_properties;
  // kafka_copy's --guarantee, and the checkpoint interval of both jobs (0:
  // none). exactly-once needs checkpoints.
  std::string guarantee = "at-least-once";
  int64_t checkpoint_ms = 0;
  // Binaries (weir, weir-jobmanager, weir-taskmanager) of a baseline build;
  // its job binaries are in DIR/../jobs (a job loads only into the runtime
  // of its own job API).
  std::string baseline_bin;
  // The budget to compare --budget with, instead of librdkafka's sizes.
  std::string baseline_budget;
  // -Dk=v settings of the baseline side on this build (added to
  // --cluster-config), instead of librdkafka's sizes.
  std::vector<std::string> baseline_config;
};

// One side of the comparison.
struct Setup {
  std::string label;
  std::string bin_dir;  // WEIR_BIN_DIR for its daemons and client
  std::string budget;
  std::vector<std::string> config;  // added to --cluster-config
};

// Memory of one process, in KiB, from /proc/<pid>/status.
struct Status {
  int64_t rss = 0, anon = 0, file = 0, hwm = 0;
  double at_s = 0;  // a sample's time since submission
};

Status ReadStatus(pid_t pid) {
  return Status{.rss = std::max<int64_t>(0, ProcStatusField(pid, "VmRSS")),
                .anon = std::max<int64_t>(0, ProcStatusField(pid, "RssAnon")),
                .file = std::max<int64_t>(0, ProcStatusField(pid, "RssFile")),
                .hwm = std::max<int64_t>(0, ProcStatusField(pid, "VmHWM"))};
}

double Mib(int64_t kib) { return static_cast<double>(kib) / 1024.0; }

int64_t Median(std::vector<int64_t> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Samples the resident memory of `pids` every 50 ms on its own thread.
class Sampler {
 public:
  explicit Sampler(std::vector<pid_t> pids) : pids_(std::move(pids)), samples_(pids_.size()) {
    thread_ = std::thread([this, start = absl::Now()] {
      while (!stop_.load()) {
        for (size_t i = 0; i < pids_.size(); ++i) {
          Status s = ReadStatus(pids_[i]);
          s.at_s = absl::ToDoubleSeconds(absl::Now() - start);
          std::lock_guard<std::mutex> lock(mutex_);
          samples_[i].push_back(s);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
  }
  ~Sampler() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  // Per process: the median sample of VmRSS, RssAnon and RssFile.
  std::vector<Status> Steady() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<Status> out;
    for (const auto& samples : samples_) {
      std::vector<int64_t> rss, anon, file;
      for (const Status& s : samples) {
        rss.push_back(s.rss);
        anon.push_back(s.anon);
        file.push_back(s.file);
      }
      out.push_back({.rss = Median(rss), .anon = Median(anon), .file = Median(file)});
    }
    return out;
  }
  // Per process: the sample of the highest VmRSS, and when it was taken
  // (where a peak comes from: VmHWM alone does not say).
  std::vector<Status> Highest() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<Status> out;
    for (const auto& samples : samples_) {
      Status highest;
      for (const Status& s : samples) {
        if (s.rss > highest.rss) highest = s;
      }
      out.push_back(highest);
    }
    return out;
  }

 private:
  const std::vector<pid_t> pids_;
  std::mutex mutex_;
  std::vector<std::vector<Status>> samples_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

struct Run {
  double records_per_s = 0;
  // [0] the JobManager, then the TaskManagers.
  std::vector<Status> rest, steady, peak;
  std::vector<Status> highest;  // the highest sample
};

std::string NewTopic(const std::string& bootstrap, const std::string& prefix, int partitions) {
  std::string topic = weir::test::UniqueTopicName(prefix);
  if (auto s = weir::test::CreateTopic(bootstrap, topic, partitions); !s.ok()) {
    std::fprintf(stderr, "bench: %s\n", std::string(s.message()).c_str());
    std::exit(1);
  }
  return topic;
}

void Produce(const std::string& bootstrap, const std::string& topic, const Flags& flags, bool keyed) {
  std::vector<weir::test::KafkaMessage> batch;
  const std::string payload(flags.value_bytes, 'x');
  for (int64_t i = 0; i < flags.records; ++i) {
    batch.push_back({absl::StrCat("id-", i), keyed ? absl::StrCat("key-", i % flags.keys) : payload});
    if (static_cast<int64_t>(batch.size()) == 200000 || i + 1 == flags.records) {
      if (auto s = weir::test::ProduceMessages(bootstrap, topic, batch); !s.ok()) {
        std::fprintf(stderr, "bench: %s\n", std::string(s.message()).c_str());
        std::exit(1);
      }
      batch.clear();
    }
  }
}

Run RunJob(const std::string& bootstrap, const std::string& job_name, const std::string& in, const Flags& flags,
           const Setup& setup) {
  const bool copy = job_name == "copy";
  std::vector<std::string> config = flags.cluster_config;
  config.insert(config.end(), setup.config.begin(), setup.config.end());
  if (!setup.budget.empty()) config.push_back("-Dtaskmanager.memory.task.off-heap.size=" + setup.budget);
  // LocalCluster starts the binaries of weir::testing::BinDir().
  setenv("WEIR_BIN_DIR", setup.bin_dir.c_str(), 1);
  LocalCluster cluster({.taskmanagers = copy ? 1 : flags.parallelism,
                        .slots_per_taskmanager = copy ? flags.parallelism : 1,
                        .config = config});
  cluster.Start();
  const int taskmanagers = copy ? 1 : flags.parallelism;
  std::vector<pid_t> pids = {cluster.jobmanager().pid()};
  for (int i = 0; i < taskmanagers; ++i) pids.push_back(cluster.taskmanager(i).pid());
  Run run;
  // At rest: after the start-up has settled (a TaskManager releases its
  // start-up code pages 2 s after it started, taskmanager.memory.release-code-pages).
  absl::SleepFor(absl::Seconds(3));
  for (pid_t pid : pids) run.rest.push_back(ReadStatus(pid));
  const std::string out = NewTopic(bootstrap, "bench-mem-out", flags.partitions);
  const std::string binary = setup.bin_dir + "/../jobs" + (copy ? "/kafka_copy.so" : "/keyed_count.so");
  std::vector<std::string> args = {"--brokers", bootstrap, "--input-topic", in, "--output-topic", out, "--bounded"};
  if (copy) {
    args.push_back("--guarantee");
    args.push_back(flags.guarantee);
    if (!flags.source_properties.empty()) args.insert(args.end(), {"--source-properties", flags.source_properties});
    if (!flags.sink_properties.empty()) args.insert(args.end(), {"--sink-properties", flags.sink_properties});
  }
  std::string error;
  Sampler sampler(pids);
  const absl::Time start = absl::Now();
  std::vector<std::string> options = {"-p", std::to_string(flags.parallelism)};
  if (flags.checkpoint_ms > 0) {
    options.push_back("-Dexecution.checkpointing.interval=" + std::to_string(flags.checkpoint_ms) + "ms");
  }
  const std::string job = cluster.Submit(binary, options, args, &error);
  if (job.empty()) {
    std::fprintf(stderr, "bench: submission failed: %s\n", error.c_str());
    std::exit(1);
  }
  nlohmann::json status = cluster.WaitForJobEnd(job, absl::Minutes(30));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  sampler.Stop();
  if (status.is_null() || status["state"] != "FINISHED") {
    std::fprintf(stderr, "bench: the job did not finish: %s\n%s\n", status.dump(2).c_str(), cluster.Logs().c_str());
    std::exit(1);
  }
  run.records_per_s = static_cast<double>(flags.records) / seconds;
  run.steady = sampler.Steady();
  run.highest = sampler.Highest();
  for (pid_t pid : pids) {
    const Status s = ReadStatus(pid);
    run.peak.push_back({.rss = s.hwm, .hwm = s.hwm});
  }
  return run;
}

void Print(const std::string& label, const Run& run) {
  std::printf("  %-22s %9.0f records/s |", label.c_str(), run.records_per_s);
  for (size_t i = 0; i < run.steady.size(); ++i) {
    std::printf(" %s rest %.1f steady %.1f (anon %.1f file %.1f) highest %.1f (anon %.1f file %.1f, at %.1f s) "
                "peak %.1f MiB%s",
                i == 0 ? "JM" : "TM", Mib(run.rest[i].rss), Mib(run.steady[i].rss), Mib(run.steady[i].anon),
                Mib(run.steady[i].file), Mib(run.highest[i].rss), Mib(run.highest[i].anon), Mib(run.highest[i].file),
                run.highest[i].at_s, Mib(run.peak[i].hwm), i + 1 < run.steady.size() ? " |" : "");
  }
  std::printf("\n");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  weir::bench::BenchFlags parser("bench");
  parser.Int("--records", &flags.records);
  parser.Int("--value-bytes", &flags.value_bytes);
  parser.Int("--partitions", &flags.partitions);
  parser.Int("--parallelism", &flags.parallelism);
  parser.Int("--keys", &flags.keys);
  parser.Int("--rounds", &flags.rounds);
  parser.String("--budget", &flags.budget);
  parser.List("--jobs", &flags.jobs);
  parser.List("--cluster-config", &flags.cluster_config);
  parser.String("--source-properties", &flags.source_properties);
  parser.String("--sink-properties", &flags.sink_properties);
  parser.String("--guarantee", &flags.guarantee);
  parser.Int("--checkpoint-ms", &flags.checkpoint_ms);
  parser.String("--baseline-bin", &flags.baseline_bin);
  parser.String("--baseline-budget", &flags.baseline_budget);
  parser.List("--baseline-config", &flags.baseline_config);
  if (!parser.Parse(argc, argv)) return 2;
  const std::string bootstrap = weir::test::TestKafkaBootstrap();
  if (bootstrap.empty()) return 1;

  std::map<std::string, std::string> inputs;
  for (const std::string& job : flags.jobs) {
    if (job != "copy" && job != "keyed") {
      std::fprintf(stderr, "bench: --jobs takes copy and keyed, not '%s'\n", job.c_str());
      return 2;
    }
    inputs[job] = NewTopic(bootstrap, "bench-mem-in", flags.partitions);
    std::fprintf(stderr, "bench: producing %lld records for %s\n", static_cast<long long>(flags.records),
                 job.c_str());
    Produce(bootstrap, inputs[job], flags, job == "keyed");
  }
  const std::string budget_label =
      flags.budget.empty() ? "budget (default)" : absl::StrCat("budget ", flags.budget);
  // This build's binaries: WEIR_BIN_DIR as the bench was started, else the build's.
  const std::string this_build = weir::testing::BinDir();
  Setup first{"librdkafka defaults", this_build, "0"};
  Setup second{budget_label, this_build, flags.budget};
  if (!flags.baseline_bin.empty() + !flags.baseline_budget.empty() + !flags.baseline_config.empty() > 1) {
    std::fprintf(stderr,
                 "bench: --baseline-bin, --baseline-budget and --baseline-config each choose the baseline; "
                 "give one\n");
    return 2;
  }
  if (!flags.baseline_config.empty()) {
    first = {absl::StrCat("baseline config, ", budget_label), this_build, flags.budget, flags.baseline_config};
    second = {absl::StrCat("this config, ", budget_label), this_build, flags.budget};
  }
  if (!flags.baseline_budget.empty()) first = {absl::StrCat("budget ", flags.baseline_budget), this_build,
                                               flags.baseline_budget};
  if (!flags.baseline_bin.empty()) {
    first = {absl::StrCat("baseline, ", budget_label), flags.baseline_bin, flags.budget};
    second = {absl::StrCat("this build, ", budget_label), this_build, flags.budget};
  }
  std::printf("memory benchmark: %lld records, %d-byte values (copy), %lld keys (keyed), %d partitions, "
              "parallelism %d; MiB resident\n",
              static_cast<long long>(flags.records), flags.value_bytes, static_cast<long long>(flags.keys),
              flags.partitions, flags.parallelism);
  for (const std::string& job : flags.jobs) {
    std::printf("%s (%s):\n", job == "copy" ? "kafka_copy" : "keyed_count",
                job == "copy" ? "1 TaskManager, one slot per subtask" : "one TaskManager per subtask");
    std::vector<double> first_rates, second_rates;
    for (int64_t round = 0; round < flags.rounds; ++round) {
      const Run a = RunJob(bootstrap, job, inputs[job], flags, first);
      Print(first.label, a);
      const Run b = RunJob(bootstrap, job, inputs[job], flags, second);
      Print(second.label, b);
      first_rates.push_back(a.records_per_s);
      second_rates.push_back(b.records_per_s);
    }
    std::sort(first_rates.begin(), first_rates.end());
    std::sort(second_rates.begin(), second_rates.end());
    const double a = first_rates[first_rates.size() / 2];
    const double b = second_rates[second_rates.size() / 2];
    std::printf("  median records/s: %s %.0f, %s %.0f, ratio %.2f\n", first.label.c_str(), a, second.label.c_str(),
                b, b / a);
  }
  return 0;
}
