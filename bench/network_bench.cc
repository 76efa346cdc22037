// network_bench: the data exchange under an all-to-all keyBy. Runs the
// network_shuffle job (a generator source keyed into a counting operator,
// bench/jobs/network_shuffle.cc) on a JobManager and two TaskManagers at each
// parallelism of --parallelism, and reports records/s (submission to
// FINISHED, as the JobManager timed it) and, sampled every 20 ms while the job runs, the threads and the
// resident memory of each TaskManager.
//
//   bench/run.sh network [--parallelism 2,16,64] [--records N] [--value-bytes B]
//                        [--baseline-bin DIR] [--rounds R]
//                        [--cluster-config -Dk=v,...] [--baseline-config -Dk=v,...]
//                        [--token SECRET]
//
// With --baseline-bin (the bin directory of another build, e.g. the last
// release) every measurement runs on both builds, interleaved, in the same
// run, and the ratios are printed. Each build runs the job binary of its own
// build directory (<bin>/../jobs/), since the job API may differ.
// --cluster-config gives this build's clusters -Dkey=value options, and
// --baseline-config the baseline's (on this build unless --baseline-bin is
// given): two settings side by side in one run. --token runs every cluster
// with that shared secret (security.auth.token-file), as a cluster that
// listens beyond loopback must.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/bench_flags.h"
#include "bench/proc_status.h"
#include "tests/testing/local_cluster.h"

namespace {

struct Flags {
  std::vector<std::string> parallelism = {"2", "16", "64"};
  int64_t records = 200000;
  int value_bytes = 100;
  std::string baseline_bin;
  int rounds = 1;
  std::vector<std::string> cluster_config;
  std::vector<std::string> baseline_config;
  std::string token;
};

struct Result {
  double seconds = -1;
  int64_t max_threads[2] = {0, 0};
  int64_t max_rss_kb[2] = {0, 0};
  int64_t idle_threads[2] = {0, 0};
};

Result RunOnce(const std::string& bin_dir, int parallelism, const Flags& flags,
               const std::vector<std::string>& config) {
  setenv("WEIR_BIN_DIR", bin_dir.c_str(), 1);
  Result result;
  const int slots = std::max(1, (parallelism + 1) / 2);
  weir::testing::LocalCluster cluster(
      {.taskmanagers = 2, .slots_per_taskmanager = slots, .config = config, .auth_token = flags.token});
  cluster.Start();
  const pid_t pids[2] = {cluster.taskmanager(0).pid(), cluster.taskmanager(1).pid()};
  for (int i = 0; i < 2; ++i) result.idle_threads[i] = weir::bench::ProcStatusField(pids[i], "Threads");
  std::atomic<bool> done{false};
  std::thread sampler([&] {
    while (!done.load()) {
      for (int i = 0; i < 2; ++i) {
        result.max_threads[i] = std::max(result.max_threads[i], weir::bench::ProcStatusField(pids[i], "Threads"));
        result.max_rss_kb[i] = std::max(result.max_rss_kb[i], weir::bench::ProcStatusField(pids[i], "VmRSS"));
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  });
  std::string error;
  // The job binary of the build whose daemons run it (the job API may
  // differ between builds): <bin>/../jobs/ when there is one there.
  std::string job_binary = std::string(WEIR_JOBS_DIR) + "/network_shuffle.so";
  if (const std::string own = bin_dir + "/../jobs/network_shuffle.so"; std::filesystem::exists(own)) {
    job_binary = own;
  }
  std::string job = cluster.Submit(job_binary,
                                   {"-p", std::to_string(parallelism)},
                                   {"--records", std::to_string(flags.records), "--value-bytes",
                                    std::to_string(flags.value_bytes)},
                                   &error);
  if (job.empty()) {
    std::fprintf(stderr, "bench: submission failed: %s\n", error.c_str());
  } else {
    nlohmann::json status = cluster.WaitForJobEnd(job, absl::Minutes(30));
    if (!status.is_null() && status["state"] == "FINISHED") {
      // The JobManager's own times: submission to FINISHED, without the
      // client's polling.
      const int64_t ms = status["ended_at_unix_ms"].get<int64_t>() - status["submitted_at_unix_ms"].get<int64_t>();
      result.seconds = ms / 1000.0;
      int64_t counted = 0;
      for (const auto& task : status["tasks"]) {
        if (task["name"].get<std::string>().find("Count") != std::string::npos) {
          counted += task["records_in"].get<int64_t>();
        }
      }
      if (counted != flags.records * parallelism) {
        std::fprintf(stderr, "bench: the keyed operator took %lld records, expected %lld\n",
                     static_cast<long long>(counted), static_cast<long long>(flags.records * parallelism));
        result.seconds = -1;
      }
    } else {
      std::fprintf(stderr, "bench: the job did not finish: %s\n%s\n", status.dump(2).c_str(),
                   cluster.Logs().c_str());
    }
  }
  done = true;
  sampler.join();
  return result;
}

void Print(const char* build, int parallelism, int64_t records, const Result& r) {
  std::printf("  %-8s p=%-3d %10.0f records/s (%6.2f s)  threads idle %lld/%lld, peak %lld/%lld  "
              "peak RSS %.1f/%.1f MiB\n",
              build, parallelism, records / r.seconds, r.seconds, static_cast<long long>(r.idle_threads[0]),
              static_cast<long long>(r.idle_threads[1]), static_cast<long long>(r.max_threads[0]),
              static_cast<long long>(r.max_threads[1]), r.max_rss_kb[0] / 1024.0, r.max_rss_kb[1] / 1024.0);
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  weir::bench::BenchFlags parser("network_bench");
  parser.List("--parallelism", &flags.parallelism);
  parser.Int("--records", &flags.records);
  parser.Int("--value-bytes", &flags.value_bytes);
  parser.String("--baseline-bin", &flags.baseline_bin);
  parser.Int("--rounds", &flags.rounds);
  parser.List("--cluster-config", &flags.cluster_config);
  parser.List("--baseline-config", &flags.baseline_config);
  parser.String("--token", &flags.token);
  if (!parser.Parse(argc, argv)) return 2;
  signal(SIGPIPE, SIG_IGN);
  const char* own = std::getenv("WEIR_BIN_DIR");
  const std::string own_bin = own != nullptr ? own : WEIR_DEFAULT_BIN_DIR;

  std::printf("network_bench: all-to-all keyBy on 2 TaskManagers, %lld records x %d bytes per source subtask\n",
              static_cast<long long>(flags.records), flags.value_bytes);
  for (const std::string& p_text : flags.parallelism) {
    int parallelism = 0;
    if (!absl::SimpleAtoi(p_text, &parallelism) || parallelism < 1) {
      std::fprintf(stderr, "bench: bad parallelism '%s'\n", p_text.c_str());
      return 2;
    }
    const int64_t records = flags.records * parallelism;
    std::vector<double> ratios;
    for (int round = 0; round < flags.rounds; ++round) {
      Result baseline;
      if (!flags.baseline_bin.empty() || !flags.baseline_config.empty()) {
        const std::string& bin = flags.baseline_bin.empty() ? own_bin : flags.baseline_bin;
        baseline = RunOnce(bin, parallelism, flags, flags.baseline_config);
        if (baseline.seconds < 0) return 1;
        Print("baseline", parallelism, records, baseline);
      }
      Result weir = RunOnce(own_bin, parallelism, flags, flags.cluster_config);
      if (weir.seconds < 0) return 1;
      Print("weir", parallelism, records, weir);
      if (baseline.seconds > 0) ratios.push_back(baseline.seconds / weir.seconds);
    }
    for (double ratio : ratios) std::printf("  p=%d records/s weir/baseline: %.2f\n", parallelism, ratio);
  }
  return 0;
}
