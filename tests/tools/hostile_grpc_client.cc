// hostile_grpc_client: opens streams that each hold an almost complete gRPC
// message on a Weir server (see tests/testing/hostile_http2_client.h) and
// prints what the server did and, with --pid, how its memory grew.
//
//   hostile_grpc_client --port P --path /weir.v1.TaskExecutorService/DeployTask
//       [--host H] [--connections C] [--streams K] [--declared-bytes N]
//       [--authorization "Bearer ..."] [--pid PID] [--settle-seconds S] [--hold-seconds S]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "common/process/proc_status.h"
#include "tests/testing/hostile_http2_client.h"

namespace {

void Print(const char* when, const weir::testing::HostileHttp2Stats& s, int pid) {
  std::printf(
      "%s: connections open=%ld refused=%ld ended=%ld streams opened=%ld loaded=%ld reset=%ld answered=%ld "
      "bytes_sent=%ld",
      when, s.connections_open, s.connections_refused, s.connections_ended, s.streams_opened, s.streams_loaded,
      s.streams_reset, s.streams_answered, s.bytes_sent);
  if (pid > 0) std::printf(" server_rss_kb=%ld", weir::process::ProcStatusField(pid, "VmRSS"));
  std::printf("\n");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  weir::testing::HostileHttp2Options options;
  int pid = 0;
  int settle_seconds = 30;
  int hold_seconds = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    int64_t number = 0;
    const bool numeric = absl::SimpleAtoi(value, &number);
    if (flag == "--host") {
      options.host = value;
    } else if (flag == "--path") {
      options.path = value;
    } else if (flag == "--authorization") {
      options.authorization = value;
    } else if (numeric && flag == "--port") {
      options.port = static_cast<int>(number);
    } else if (numeric && flag == "--connections") {
      options.connections = static_cast<int>(number);
    } else if (numeric && flag == "--streams") {
      options.streams_per_connection = static_cast<int>(number);
    } else if (numeric && flag == "--declared-bytes") {
      options.declared_message_bytes = number;
    } else if (numeric && flag == "--pid") {
      pid = static_cast<int>(number);
    } else if (numeric && flag == "--settle-seconds") {
      settle_seconds = static_cast<int>(number);
    } else if (numeric && flag == "--hold-seconds") {
      hold_seconds = static_cast<int>(number);
    } else {
      std::fprintf(stderr, "unknown or malformed flag %s %s\n", flag.c_str(), value.c_str());
      return 2;
    }
  }
  if (options.port <= 0 || options.path.empty()) {
    std::fprintf(stderr, "--port and --path are required\n");
    return 2;
  }
  if (pid > 0) std::printf("before: server_rss_kb=%ld\n", weir::process::ProcStatusField(pid, "VmRSS"));
  weir::testing::HostileHttp2Client client(options);
  client.Start();
  const bool settled = client.WaitUntilSettled(absl::Seconds(settle_seconds));
  Print(settled ? "settled" : "not settled", client.stats(), pid);
  for (int i = 0; i < hold_seconds; ++i) {
    absl::SleepFor(absl::Seconds(1));
    Print("holding", client.stats(), pid);
  }
  client.Stop();
  absl::SleepFor(absl::Seconds(1));
  if (pid > 0) std::printf("after close: server_rss_kb=%ld\n", weir::process::ProcStatusField(pid, "VmRSS"));
  return 0;
}
