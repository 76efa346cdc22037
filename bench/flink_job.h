// Runs one of bench/flink's jobs (a local Flink cluster in one JVM, built by
// bench/flink/build.sh) and reads what it prints: its elapsed time, its CPU
// time and peak resident memory, and the checkpoint coordinator's completed
// checkpoints. For the benchmarks that put Weir beside Apache Flink.
#pragma once

#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace weir::bench {

struct FlinkRun {
  double seconds = 0;       // execute() to the job's end
  double cpu_seconds = -1;  // the JVM's, start to end (-1: not printed)
  int64_t peak_rss_kb = -1;
  std::vector<int64_t> checkpoint_ms, checkpoint_bytes;
};

// Runs `main_class` with `args` and a fresh checkpoint directory, which is
// passed as the argument at `checkpoint_dir_arg` (its index in the full
// argument list: the placeholder there is replaced). Exits the bench with
// the job's output if it fails.
inline FlinkRun RunFlinkJob(const std::string& classpath, const std::string& main_class,
                            std::vector<std::string> args, size_t checkpoint_dir_arg) {
  char dir_template[] = "/tmp/weir-bench-flink-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (dir == nullptr) {
    std::perror("bench: mkdtemp");
    std::exit(1);
  }
  args.at(checkpoint_dir_arg) = dir;
  // The JVM options Flink's own scripts give on Java 17, and a heap like a
  // default TaskManager's.
  const std::string command = absl::StrCat(
      "java -Xmx2g --add-opens=java.base/java.util=ALL-UNNAMED --add-opens=java.base/java.lang=ALL-UNNAMED "
      "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED --add-opens=java.base/java.net=ALL-UNNAMED "
      "--add-opens=java.base/java.io=ALL-UNNAMED --add-opens=java.base/java.nio=ALL-UNNAMED "
      "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED --add-opens=java.base/java.time=ALL-UNNAMED "
      "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED "
      "--add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED -cp '",
      classpath, "' ", main_class, " ", absl::StrJoin(args, " "), " 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    std::perror("bench: starting java");
    std::exit(1);
  }
  FlinkRun run;
  std::string output;
  char line[4096];
  while (std::fgets(line, sizeof line, pipe) != nullptr) {
    output += line;
    double value = 0;
    long long kb = 0;
    if (std::sscanf(line, "elapsed_seconds %lf", &value) == 1) run.seconds = value;
    if (std::sscanf(line, "cpu_seconds %lf", &value) == 1) run.cpu_seconds = value;
    if (std::sscanf(line, "peak_rss_kb %lld", &kb) == 1) run.peak_rss_kb = kb;
    // "Completed checkpoint N for job J (B bytes, checkpointDuration=D ms, ...".
    const char* completed = std::strstr(line, "Completed checkpoint ");
    long long id = 0, bytes = 0, duration = 0;
    char job[64];
    if (completed != nullptr && std::sscanf(completed,
                                            "Completed checkpoint %lld for job %63s (%lld bytes, "
                                            "checkpointDuration=%lld ms",
                                            &id, job, &bytes, &duration) == 4) {
      run.checkpoint_ms.push_back(duration);
      run.checkpoint_bytes.push_back(bytes);
    }
  }
  const int status = pclose(pipe);
  std::filesystem::remove_all(dir);
  if (status != 0 || run.seconds <= 0) {
    std::fprintf(stderr, "bench: the Flink job failed (exit %d):\n%s\n", status, output.c_str());
    std::exit(1);
  }
  return run;
}

}  // namespace weir::bench
