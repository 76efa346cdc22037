#include "absl/strings/string_view.h"
#include "common/config/options.h"

#include <array>

namespace weir::config {
namespace {

constexpr int64_t kMsPerDay = 24LL * 3600 * 1000;

constexpr std::array kOptions = {
    OptionSpec{.key = keys::kJobManagerRpcAddress,
               .type = OptionType::kString,
               .default_value = "127.0.0.1",
               .description = "Host name or IP address under which TaskManagers and clients reach the "
                              "JobManager. The JobManager also binds this address unless "
                              "jobmanager.bind-host is set.",
               .scope = kDaemons},
    OptionSpec{.key = keys::kJobManagerRpcPort,
               .type = OptionType::kInt,
               .default_value = "6123",
               .description = "Port of the JobManager's gRPC endpoint (membership, submission, "
                              "client calls).",
               .scope = kDaemons,
               .min_value = 1,
               .max_value = 65535},
    OptionSpec{.key = keys::kJobManagerBindHost,
               .type = OptionType::kString,
               .default_value = "",
               .description = "Address the JobManager binds to; defaults to jobmanager.rpc.address. "
                              "Binding beyond loopback exposes job submission, which runs code.",
               .scope = kJobManager},
    OptionSpec{.key = keys::kTaskManagerHost,
               .type = OptionType::kString,
               .default_value = "127.0.0.1",
               .description = "Host name or IP address under which the JobManager and other "
                              "TaskManagers reach this TaskManager.",
               .scope = kTaskManager},
    OptionSpec{.key = keys::kTaskManagerBindHost,
               .type = OptionType::kString,
               .default_value = "",
               .description = "Address the TaskManager binds to; defaults to taskmanager.host.",
               .scope = kTaskManager},
    OptionSpec{.key = keys::kTaskManagerRpcPort,
               .type = OptionType::kInt,
               .default_value = "0",
               .description = "Port of the TaskManager's gRPC endpoint; 0 picks any free port.",
               .scope = kTaskManager,
               .min_value = 0,
               .max_value = 65535},
    OptionSpec{.key = keys::kTaskManagerSlots,
               .type = OptionType::kInt,
               .default_value = "1",
               .description = "Number of task slots this TaskManager offers; each slot runs one "
                              "parallel slice of a job.",
               .scope = kTaskManager,
               .min_value = 1,
               .max_value = 1024},
    OptionSpec{.key = keys::kTaskManagerResourceId,
               .type = OptionType::kString,
               .default_value = "",
               .description = "Id under which this TaskManager registers. Defaults to a fresh "
                              "random id per process (tm-<hex>).",
               .scope = kTaskManager},
    OptionSpec{.key = keys::kHeartbeatInterval,
               .type = OptionType::kDuration,
               .default_value = "1 s",
               .description = "How often a TaskManager sends a heartbeat. The JobManager's value "
                              "is handed to every TaskManager at registration and wins.",
               .scope = kJobManager | kTaskManager,
               .min_value = 10,
               .max_value = kMsPerDay},
    OptionSpec{.key = keys::kHeartbeatTimeout,
               .type = OptionType::kDuration,
               .default_value = "5 s",
               .description = "A TaskManager that sends no heartbeat for this long is declared lost "
                              "(one whose process dies is noticed at once, when its connection "
                              "closes). A TaskManager that hears no acknowledgement from the "
                              "JobManager for this long reconnects.",
               .scope = kJobManager | kTaskManager,
               .min_value = 50,
               .max_value = kMsPerDay},
    OptionSpec{.key = keys::kRegistrationInitialTimeout,
               .type = OptionType::kDuration,
               .default_value = "100 ms",
               .description = "First delay before a TaskManager retries registering with an "
                              "unreachable JobManager; doubles on every failed attempt.",
               .scope = kTaskManager,
               .min_value = 1,
               .max_value = kMsPerDay},
    OptionSpec{.key = keys::kRegistrationMaxTimeout,
               .type = OptionType::kDuration,
               .default_value = "5 s",
               .description = "Largest delay between two registration attempts.",
               .scope = kTaskManager,
               .min_value = 1,
               .max_value = kMsPerDay},
    OptionSpec{.key = keys::kLogLevel,
               .type = OptionType::kEnum,
               .default_value = "info",
               .description = "Lowest level that is logged.",
               .scope = kDaemons,
               .allowed_values = "trace,debug,info,warn,error,off"},
    OptionSpec{.key = keys::kLogFormat,
               .type = OptionType::kEnum,
               .default_value = "text",
               .description = "text for people, json (one object per line) for log shippers.",
               .scope = kDaemons,
               .allowed_values = "text,json"},
};

}  // namespace

std::span<const OptionSpec> AllOptions() { return kOptions; }

const OptionSpec* FindOption(absl::string_view key) {
  for (const OptionSpec& spec : kOptions) {
    if (spec.key == key) return &spec;
  }
  return nullptr;
}

}  // namespace weir::config
