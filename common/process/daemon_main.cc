#include "common/process/daemon_main.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging/logging.h"
#include "common/rpc/auth.h"
#include "common/rpc/tls.h"
#include "common/status_macros.h"
#include "common/process/signals.h"
#include "common/process/systemd_notify.h"
#include "common/version.h"
#include "google/protobuf/stubs/logging.h"

namespace weir::process {
namespace {

// The TLS files of both endpoints, checked as a start uses them; returns the
// RPCs' setting.
absl::StatusOr<rpc::InternalTls> CheckTls(const config::Configuration& config) {
  RETURN_IF_ERROR(rpc::RestTlsFromConfig(config).status());
  return rpc::InternalTlsFromConfig(config, rpc::TlsRole::kDaemon);
}

}  // namespace

namespace {

// Protobuf's own messages (a string field with invalid UTF-8 in a call, for
// one) go to the daemon's log instead of raw stderr, at most one line every
// 10 s with a count of the rest: a peer can send such a call before any
// credential is checked, and must not be able to flood the log.
void ProtobufLog(google::protobuf::LogLevel level, const char* filename, int line, const std::string& message) {
  static logging::RateLimiter limiter(std::chrono::seconds(10));
  static const std::shared_ptr<spdlog::logger> log = logging::Get("protobuf");
  if (level == google::protobuf::LOGLEVEL_FATAL) {
    log->critical("{} ({}:{})", message, filename, line);
    return;
  }
  int64_t suppressed = 0;
  if (!limiter.ShouldLog(&suppressed)) return;
  log->warn("{}{}", message,
            suppressed > 0 ? absl::StrCat(" (", suppressed, " more protobuf messages not logged)") : std::string());
}

}  // namespace

int DaemonMain(int argc, char** argv, const char* program, const char* component, unsigned scope,
               const char* summary, const StartFn& start) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::printf(
          "usage: %s [--config FILE] [-Dkey=value ...]\n"
          "       %s --check-config [--config FILE] [-Dkey=value ...]\n"
          "       %s --print-config-reference\n"
          "%s\nSee docs/configuration.md for the configuration keys.\n",
          program, program, program, summary);
      return 0;
    }
    if (std::strcmp(argv[i], "--version") == 0) {
      std::printf("%s %s\n", program, kWeirVersion);
      return 0;
    }
    if (std::strcmp(argv[i], "--print-config-reference") == 0) {
      std::fputs(config::ConfigurationReferenceMarkdown().c_str(), stdout);
      return 0;
    }
  }
  // --check-config: validate the configuration as a start would, then exit
  // (0, or 2 with the error) without starting anything.
  bool check_only = false;
  std::vector<const char*> args;
  for (int i = 0; i < argc; ++i) {
    if (i > 0 && std::strcmp(argv[i], "--check-config") == 0) {
      check_only = true;
    } else {
      args.push_back(argv[i]);
    }
  }
  if (check_only) {
    auto checked = config::Configuration::FromCommandLine(static_cast<int>(args.size()), args.data());
    if (!checked.ok()) {
      std::fprintf(stderr, "%s: configuration error: %s\n", program, std::string(checked.status().message()).c_str());
      return 2;
    }
    if (absl::StatusOr<rpc::InternalTls> tls = CheckTls(*checked); !tls.ok()) {
      std::fprintf(stderr, "%s: configuration error: %s\n", program, std::string(tls.status().message()).c_str());
      return 2;
    }
    for (const std::string& line : checked->StartupLines(scope)) std::printf("%s\n", line.c_str());
    if (!checked->ignored_flink_keys().empty()) {
      std::printf("ignored (Flink settings Weir has no use for): %s\n",
                  absl::StrJoin(checked->ignored_flink_keys(), ", ").c_str());
    }
    std::printf("%s: configuration OK\n", program);
    return 0;
  }
  BlockTerminationSignals();
  InstallCrashHandler(program);
  // Nothing a daemon writes is for other users of the machine or the shared
  // volume: submissions carry job arguments (secrets among them),
  // checkpoints carry state. The group keeps read access, for an operator's
  // group; a stricter mask the daemon was started with stays.
  const mode_t inherited_mask = umask(0);
  umask(inherited_mask | 027);
  auto config = config::Configuration::FromCommandLine(argc, argv);
  if (!config.ok()) {
    std::fprintf(stderr, "%s: configuration error: %s\n", program, std::string(config.status().message()).c_str());
    return 2;
  }
  namespace k = config::keys;
  if (auto s = logging::Init(config->GetString(k::kLogLevel), config->GetString(k::kLogFormat)); !s.ok()) {
    std::fprintf(stderr, "%s: configuration error: %s\n", program, std::string(s.message()).c_str());
    return 2;
  }
  if (auto s = rpc::LoadAuthToken(config->GetString(k::kAuthTokenFile)); !s.ok()) {
    std::fprintf(stderr, "%s: configuration error: %s\n", program, std::string(s.message()).c_str());
    return 2;
  }
  absl::StatusOr<rpc::InternalTls> tls = CheckTls(*config);
  if (!tls.ok()) {
    std::fprintf(stderr, "%s: configuration error: %s\n", program, std::string(tls.status().message()).c_str());
    return 2;
  }
  rpc::SetInternalTls(*tls);
  google::protobuf::SetLogHandler(&ProtobufLog);
  auto log = logging::Get(component);
  log->info("{} {} starting, pid {}, file mode mask {:04o}", program, kWeirVersion, getpid(),
            static_cast<unsigned>(inherited_mask | 027));
  for (const std::string& line : config->StartupLines(scope)) log->info("{}", line);
  if (!config->ignored_flink_keys().empty()) {
    log->warn("ignored {} Flink setting(s) Weir has no use for: {}", config->ignored_flink_keys().size(),
              absl::StrJoin(config->ignored_flink_keys(), ", "));
  }
  if (tls->enabled) {
    log->info("TLS on for every RPC (mutual): certificate {}, CA {}, files re-read every {}", tls->files.cert_file,
              tls->files.ca_file, config::FormatDuration(tls->reload_interval));
  }
  if (auto rest = rpc::RestTlsFiles(*config); rest.ok() && rest->has_value()) {
    log->info("HTTPS on the HTTP endpoint: certificate {}", (*rest)->cert_file);
  }
  absl::StatusOr<StartedDaemon> started = start(*config);
  if (!started.ok()) {
    log->error("{} failed to start: {}", program, started.status().message());
    // kInvalidArgument: the configuration cannot work; a restart will not help.
    return started.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  SystemdNotifier systemd(started->ready, started->alive, started->status);
  int sig = WaitForTerminationSignal();
  log->info("received {}, shutting down", strsignal(sig));
  systemd.Stopping();
  started->shutdown(absl::StrCat("received ", strsignal(sig)));
  return 0;
}

}  // namespace weir::process
