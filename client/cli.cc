#include "client/cli.h"

#include "client/job_commands.h"
#include "client/kafka_commands.h"
#include "client/options.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_join.h"
#include "common/config/configuration.h"
#include "common/rpc/auth.h"
#include "common/rpc/rpc.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "weir/v1/cluster.grpc.pb.h"
#include "weir/v1/job.grpc.pb.h"
#include "weir/version.h"

namespace weir::client {
namespace {

constexpr char kUsage[] =
    "usage: weir [--jobmanager HOST[:PORT]] [--token-file FILE] [--config FILE] [-Dkey=value] [--json] COMMAND [ARGS]\n"
    "       weir --version\n"
    "\n"
    "commands:\n"
    "  cluster                      list the TaskManagers with their slots\n"
    "  submit JOB_BINARY [-p N] [-Dkey=value ...] [-s SAVEPOINT [--allow-non-restored-state]] [-- JOB ARGS]\n"
    "                               upload a job binary and run it (from a savepoint); prints the job id\n"
    "  list [-r|-a]                 list the jobs (-r: only those not ended; -a: all, the default)\n"
    "  status JOB_ID                a job's state and its tasks\n"
    "  cancel JOB_ID                cancel a job\n"
    "  savepoint JOB_ID [DIR]       take a savepoint (DIR inside state.savepoints.dir); prints its path\n"
    "  stop JOB_ID [--savepoint-path DIR]\n"
    "                               take a final savepoint, let the sinks commit, end the job FINISHED;\n"
    "                               prints the savepoint's path\n"
    "  checkpoints JOB_ID           a job's recent checkpoints and the one it restored from\n"
    "  kafka create-topic --brokers B TOPIC [--partitions N] [--replication-factor R]\n"
    "  kafka produce --brokers B TOPIC [--keyed]\n"
    "                               write stdin's lines as records (KEY<TAB>VALUE with --keyed)\n"
    "  kafka consume --brokers B TOPIC [--keyed] [--max N]\n"
    "                               print what a read_committed consumer sees, from the beginning to now\n"
    "\n"
    "--jobmanager (or -m) defaults to $WEIR_JOBMANAGER, else 127.0.0.1:6123; the port defaults to 6123.\n"
    "Options take their value as --name VALUE or --name=VALUE, before or after the command.\n"
    "--token-file FILE (or $WEIR_AUTH_TOKEN_FILE): the cluster's shared secret, when it has one.\n"
    "--config FILE (or $WEIR_CONFIG_FILE, else /etc/weir/weir.yaml if it exists): the cluster's configuration\n"
    "file; its jobmanager.rpc.address/port and security.auth.token-file apply unless given as above, and\n"
    "its security.ssl.internal.* keys (TLS: this client's certificate, key and the cluster's CA).\n"
    "-Dkey=value before the command overrides the file, as for the daemons (after `submit`: the job's settings).\n"
    "--json: output, and errors ({\"error\": ..., \"exit_code\": N} on stderr), as JSON.\n";

int RunCluster(const Options& options, std::ostream& out, std::ostream& err) {
  auto stub = v1::ClusterService::NewStub(JobManagerChannel(options));
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::ListTaskManagersResponse response;
  grpc::Status status = stub->ListTaskManagers(&context, v1::ListTaskManagersRequest(), &response);
  if (!status.ok()) {
    err << "weir: " << DescribeRpcError(options, status) << "\n";
    return 1;
  }
  if (options.json) {
    nlohmann::json tms = nlohmann::json::array();
    for (const auto& tm : response.taskmanagers()) {
      tms.push_back({{"id", tm.info().taskmanager_id()},
                     {"address", tm.info().address()},
                     {"hostname", tm.info().hostname()},
                     {"pid", tm.info().pid()},
                     {"version", tm.info().version()},
                     {"rest_port", tm.info().rest_port()},
                     {"slots_total", tm.slots().slots_total()},
                     {"slots_free", tm.slots().slots_free()},
                     {"seconds_since_heartbeat", tm.seconds_since_heartbeat()},
                     {"registered_at_unix_ms", tm.registered_at_unix_ms()}});
    }
    nlohmann::json doc = {{"jobmanager", options.jobmanager},
                          {"jobmanager_session_id", response.jobmanager_session_id()},
                          {"taskmanagers", tms}};
    out << doc.dump(2) << "\n";
    return 0;
  }
  out << absl::StrFormat("JobManager %s at %s: %d TaskManager(s)\n", response.jobmanager_session_id(),
                         options.jobmanager, response.taskmanagers_size());
  if (response.taskmanagers_size() == 0) return 0;
  out << absl::StrFormat("%-20s %-24s %-12s %-16s %s\n", "ID", "ADDRESS", "SLOTS FREE", "LAST HEARTBEAT", "HTTP");
  for (const auto& tm : response.taskmanagers()) {
    // The HTTP endpoint listens on the host of the RPC address.
    const std::string& address = tm.info().address();
    const std::string http = tm.info().rest_port() == 0
                                 ? "-"
                                 : absl::StrCat(tm.info().rest_https() ? "https://" : "http://",
                                                address.substr(0, address.rfind(':')), ":",
                                                tm.info().rest_port(), "/metrics");
    out << absl::StrFormat("%-20s %-24s %-12s %-16s %s\n", tm.info().taskmanager_id(), address,
                           absl::StrCat(tm.slots().slots_free(), "/", tm.slots().slots_total()),
                           absl::StrFormat("%.1f s ago", tm.seconds_since_heartbeat()), http);
  }
  return 0;
}

// Normalizes --jobmanager: a host without a port gets the default port.
std::string WithDefaultPort(const std::string& address) {
  if (address.empty()) return address;
  if (address.back() == ']') return address + ":6123";  // [::1]
  if (address.find(':') == std::string::npos) return address + ":6123";
  return address;  // HOST:PORT, or a bare IPv6 address (several colons)
}

}  // namespace

absl::StatusOr<bool> ParseGlobalOption(const std::vector<std::string>& args, size_t* i, GlobalOptions* options) {
  const std::string& arg = args[*i];
  // "--name VALUE" or "--name=VALUE" for the options that take a value.
  auto value_of = [&](std::initializer_list<const char*> names, std::string* value) -> absl::StatusOr<bool> {
    for (const char* name : names) {
      const std::string n(name);
      if (arg == n) {
        if (*i + 1 >= args.size()) return absl::InvalidArgumentError(absl::StrCat(n, " needs a value"));
        *value = args[++*i];
        return true;
      }
      if (absl::StartsWith(arg, n + "=")) {
        *value = arg.substr(n.size() + 1);
        return true;
      }
    }
    return false;
  };
  if (arg == "--json") {
    options->json = true;
    return true;
  }
  if (arg == "--version") {
    options->version = true;
    return true;
  }
  std::string value;
  ASSIGN_OR_RETURN(bool is_jobmanager, value_of({"--jobmanager", "-m"}, &value));
  if (is_jobmanager) {
    if (value.empty()) return absl::InvalidArgumentError("--jobmanager needs HOST[:PORT]");
    options->jobmanager = WithDefaultPort(value);
    options->jobmanager_given = true;
    return true;
  }
  ASSIGN_OR_RETURN(bool is_token_file, value_of({"--token-file"}, &value));
  if (is_token_file) {
    if (value.empty()) return absl::InvalidArgumentError("--token-file needs a file");
    options->token_file = value;
    options->token_file_given = true;
    return true;
  }
  ASSIGN_OR_RETURN(bool is_config, value_of({"--config"}, &value));
  if (is_config) {
    if (value.empty()) return absl::InvalidArgumentError("--config needs a file");
    options->config_file = value;
    return true;
  }
  return false;
}

absl::Status ApplyConfigFile(GlobalOptions* options) {
  // As the daemons: --config, else $WEIR_CONFIG_FILE or the installed default.
  const std::string file =
      !options->config_file.empty() ? options->config_file : config::DefaultConfigFile().value_or("");
  // -D before the command is for the client's own keys; job settings go
  // after `submit`, where the JobManager checks them.
  for (const std::string& o : options->overrides) {
    const std::string key = o.substr(0, o.find('='));
    if (key != config::keys::kJobManagerRpcAddress && key != config::keys::kJobManagerRpcPort &&
        key != config::keys::kAuthTokenFile && !absl::StartsWith(key, "security.ssl.internal.")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "-D", o, " before the command: the client itself uses only jobmanager.rpc.address, "
          "jobmanager.rpc.port, security.auth.token-file and security.ssl.internal.*; put a job's "
          "settings after `submit` (weir submit job.so -D", o, ")"));
    }
  }
  if (file.empty() && options->overrides.empty()) return absl::OkStatus();
  absl::StatusOr<config::Configuration> config = config::Configuration::Load(
      file.empty() ? std::nullopt : std::optional<std::string>(file), options->overrides);
  if (!config.ok()) return config.status();
  namespace k = config::keys;
  if (!options->jobmanager_given) {
    options->jobmanager = rpc::JoinHostPort(config->GetString(k::kJobManagerRpcAddress),
                                            static_cast<int>(config->GetInt(k::kJobManagerRpcPort)));
  }
  if (!options->token_file_given) {
    options->token_file = config->GetString(k::kAuthTokenFile);
  }
  ASSIGN_OR_RETURN(options->tls, rpc::InternalTlsFromConfig(*config, rpc::TlsRole::kClient));
  return absl::OkStatus();
}

namespace {

// Where several JobManagers run (high-availability.type etcd), the one
// named may be a standby: it refuses every call with the leader's address
// in the trailing metadata weir-leader, and the command goes there instead.
// One cheap call finds out (a status request for no job, which the leader
// answers NOT_FOUND). Any other answer, a failure included, leaves the
// command to run and report it as usual.
void FollowLeader(Options* options) {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::GetJobRequest request;
  v1::JobStatus response;
  const grpc::Status status = v1::JobService::NewStub(JobManagerChannel(*options))->Get(&context, request, &response);
  if (status.error_code() != grpc::StatusCode::FAILED_PRECONDITION) return;
  const auto& trailers = context.GetServerTrailingMetadata();
  if (auto leader = trailers.find("weir-leader"); leader != trailers.end() && !leader->second.empty()) {
    options->jobmanager = std::string(leader->second.data(), leader->second.size());
  }
}

int RunCommandLine(const std::vector<std::string>& args, std::ostream& out, std::ostream& err, bool* json) {
  Options options;
  GlobalOptions global;
  const char* env = std::getenv("WEIR_JOBMANAGER");
  global.jobmanager_given = env != nullptr && *env != '\0';
  global.jobmanager = WithDefaultPort(global.jobmanager_given ? env : "127.0.0.1:6123");
  const char* token_env = std::getenv("WEIR_AUTH_TOKEN_FILE");
  global.token_file_given = token_env != nullptr && *token_env != '\0';
  global.token_file = token_env != nullptr ? token_env : "";
  // --json anywhere shapes the errors, also those of parsing.
  for (const std::string& arg : args) {
    if (arg == "--") break;
    if (arg == "--json") *json = true;
  }
  // Global options go before or after the command (`weir cluster --json`);
  // job arguments after `--` are left alone.
  std::vector<std::string> command_args;
  bool after_dashes = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (after_dashes) {
      command_args.push_back(arg);
      continue;
    }
    if (arg == "--" && !options.command.empty()) {
      after_dashes = true;
      command_args.push_back(arg);
      continue;
    }
    absl::StatusOr<bool> global_option = ParseGlobalOption(args, &i, &global);
    if (!global_option.ok()) {
      err << "weir: " << global_option.status().message() << "\n";
      return 2;
    }
    if (*global_option) continue;
    if (!options.command.empty()) {
      command_args.push_back(arg);
    } else if (arg == "--help" || arg == "-h" || arg == "help") {
      out << kUsage;
      return 0;
    } else if (absl::StartsWith(arg, "-D")) {
      // Before the command: the client's own settings, as the daemons'.
      if (arg == "-D") {
        if (i + 1 >= args.size()) {
          err << "weir: -D needs key=value\n";
          return 2;
        }
        global.overrides.push_back(args[++i]);
      } else {
        global.overrides.push_back(arg.substr(2));
      }
    } else if (!arg.empty() && arg[0] == '-') {
      err << "weir: unknown option '" << arg << "'\n" << kUsage;
      return 2;
    } else {
      options.command = arg;
    }
  }
  if (global.version) {
    out << "weir " << WEIR_VERSION_STRING << " (job API " << WEIR_JOB_API_VERSION << ")\n";
    return 0;
  }
  if (absl::Status applied = ApplyConfigFile(&global); !applied.ok()) {
    err << "weir: " << applied.message() << "\n";
    return 2;
  }
  options.jobmanager = global.jobmanager;
  options.json = global.json;
  options.command_args = std::move(command_args);

  if (options.command.empty()) {
    err << kUsage;
    return 2;
  }
  if (absl::Status loaded = rpc::LoadAuthToken(global.token_file); !loaded.ok()) {
    err << "weir: " << loaded.message() << "\n";
    return 2;
  }
  rpc::SetInternalTls(global.tls);
  if (options.command == "cluster") {
    if (!options.command_args.empty()) {
      err << "weir: 'cluster' takes no arguments, got '" << options.command_args[0] << "'\n";
      return 2;
    }
    FollowLeader(&options);
    return RunCluster(options, out, err);
  }
  static constexpr absl::string_view kJobCommands[] = {"submit", "list",        "status", "cancel",
                                                        "savepoint", "stop", "checkpoints"};
  if (std::find(std::begin(kJobCommands), std::end(kJobCommands), options.command) != std::end(kJobCommands)) {
    FollowLeader(&options);
  }
  if (options.command == "submit") return RunSubmit(options, out, err);
  if (options.command == "list") return RunList(options, out, err);
  if (options.command == "status") return RunStatus(options, out, err);
  if (options.command == "cancel") return RunCancel(options, out, err);
  if (options.command == "savepoint") return RunSavepoint(options, out, err);
  if (options.command == "stop") return RunStop(options, out, err);
  if (options.command == "checkpoints") return RunCheckpoints(options, out, err);
  if (options.command == "kafka") return RunKafka(options, std::cin, out, err);
  err << "weir: unknown command '" << options.command << "'\n" << kUsage;
  return 2;
}

}  // namespace

int RunCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  bool json = false;
  std::ostringstream errors;
  const int code = RunCommandLine(args, out, errors, &json);
  std::string text = errors.str();
  // Warnings of a command that succeeded stay plain lines.
  if (!json || text.empty() || code == 0) {
    err << text;
    return code;
  }
  // One JSON object: the message's lines without their "weir: " prefix,
  // up to the usage text that follows a usage error.
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "usage:")) break;
    absl::ConsumePrefix(&line, "weir: ");
    lines.emplace_back(line);
  }
  std::string message = lines.empty() ? "bad usage; run weir --help" : absl::StrJoin(lines, "\n");
  err << nlohmann::json{{"error", message}, {"exit_code", code}}.dump() << "\n";
  return code;
}

}  // namespace weir::client
