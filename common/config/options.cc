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
    OptionSpec{.key = keys::kHaStorageDir,
               .type = OptionType::kString,
               .default_value = "weir-ha",
               .description = "The cluster's shared directory: job binaries (under their SHA-256) and, "
                              "with checkpoints, job metadata. A relative path is relative to the "
                              "JobManager's working directory.",
               .scope = kJobManager},
    OptionSpec{.key = keys::kArtifactMaxSize,
               .type = OptionType::kMemorySize,
               .default_value = "256 mb",
               .description = "Largest job binary the JobManager accepts.",
               .scope = kJobManager,
               .min_value = 1024},
    OptionSpec{.key = keys::kParallelismDefault,
               .type = OptionType::kInt,
               .default_value = "1",
               .description = "Parallelism of a job's operators when neither the job nor weir submit -p "
                              "sets one.",
               .scope = kJobManager | kClient,
               .min_value = 1,
               .max_value = 32768},
    OptionSpec{.key = keys::kMaxParallelism,
               .type = OptionType::kInt,
               .default_value = "128",
               .description = "Number of key groups: the upper bound of any operator's parallelism, and "
                              "the unit in which keyed state is partitioned.",
               .scope = kJobManager | kTaskManager,
               .min_value = 1,
               .max_value = 32768},
    OptionSpec{.key = keys::kIoTmpDirs,
               .type = OptionType::kString,
               .default_value = "/tmp",
               .description = "Where a TaskManager keeps downloaded job binaries and other local files.",
               .scope = kTaskManager},
    OptionSpec{.key = keys::kBufferTimeout,
               .type = OptionType::kDuration,
               .default_value = "100 ms",
               .description = "Longest time a record waits in a partly filled network buffer before the "
                              "buffer is sent: bounds latency at low throughput.",
               .scope = kTaskManager,
               .min_value = 1,
               .max_value = 60000},
    OptionSpec{.key = keys::kBuffersPerChannel,
               .type = OptionType::kInt,
               .default_value = "4",
               .description = "Network buffers per channel, on each side: the credit a consumer grants "
                              "and the queue a producer may fill. Bounds memory per channel to about "
                              "2 x this x taskmanager.memory.segment-size.",
               .scope = kTaskManager,
               .min_value = 1,
               .max_value = 1024},
    OptionSpec{.key = keys::kSegmentSize,
               .type = OptionType::kMemorySize,
               .default_value = "32 kb",
               .description = "Size at which a network buffer is sent.",
               .scope = kTaskManager,
               .min_value = 256,
               .max_value = 64LL << 20},
    OptionSpec{.key = keys::kCancelTimeout,
               .type = OptionType::kDuration,
               .default_value = "30 s",
               .description = "How long the JobManager waits for tasks to acknowledge a cancellation "
                              "before it declares them canceled anyway.",
               .scope = kJobManager,
               .min_value = 100,
               .max_value = 3600000},
    OptionSpec{.key = keys::kAuthTokenFile,
               .type = OptionType::kString,
               .default_value = "",
               .description = "File holding the cluster's shared secret. When set, every RPC must carry it "
                              "(clients: weir --token-file). Required when a daemon binds beyond loopback, "
                              "since job submission runs code. Not encrypted without TLS.",
               .scope = kDaemons},
    OptionSpec{.key = keys::kKafkaAllowedProperties,
               .type = OptionType::kString,
               .default_value = "",
               .description = "librdkafka properties, comma-separated, that jobs may set on their Kafka "
                              "sources and sinks beyond the built-in list (tuning, client identity, "
                              "inline SASL/TLS settings). Properties that name a file, a library or a "
                              "command are left off that list because they run code where the "
                              "client is created: allow one only when every job submitter may run "
                              "code on the cluster anyway. Read by the JobManager (submission) and "
                              "the TaskManagers (task start); set the same value on both.",
               .scope = kDaemons},
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
