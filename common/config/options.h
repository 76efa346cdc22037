// The schema of every configuration key Weir understands: name, type,
// default, bounds and description, in one table. Daemons validate their
// configuration against it at start, the configuration reference in
// docs/configuration.md is generated from it (weir-jobmanager --print-config-reference),
// and new keys are added here and nowhere else.
//
// Key names follow Apache Flink's wherever Flink has the concept.
#pragma once

#include "absl/strings/string_view.h"
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string_view>

namespace weir::config {

enum class OptionType {
  kString,
  kInt,
  kBool,
  kDuration,    // "500ms", "5 s", "1 min"; a bare number is milliseconds.
  kMemorySize,  // "64mb", "1 gb", "4096"; a bare number is bytes.
  kEnum,        // one of OptionSpec::allowed_values (comma-separated).
};

// Which processes read a key. A key is accepted by every process (one file can
// serve the whole cluster, as in Flink), but the reference says who uses it.
enum Scope : unsigned {
  kJobManager = 1u << 0,
  kTaskManager = 1u << 1,
  kClient = 1u << 2,
  kDaemons = kJobManager | kTaskManager,
  kAllProcesses = kJobManager | kTaskManager | kClient,
};

struct OptionSpec {
  absl::string_view key;
  OptionType type;
  // The value used when neither the file nor the command line sets the key.
  // Empty means "unset" (only for kString options).
  absl::string_view default_value;
  absl::string_view description;
  unsigned scope = kDaemons;
  // Inclusive bounds, for kInt (the value), kDuration (milliseconds) and
  // kMemorySize (bytes).
  int64_t min_value = std::numeric_limits<int64_t>::min();
  int64_t max_value = std::numeric_limits<int64_t>::max();
  // For kEnum: the allowed values, comma-separated.
  absl::string_view allowed_values = {};
  // For kString: the value names a file or directory, so it must be 1 to 128
  // characters from A-Z a-z 0-9 . _ - and not "." or ".." (unset stays
  // allowed).
  bool is_name = false;
  // The value is a credential: shown as "******" in the startup lines.
  bool is_secret = false;
};

// Every option, in the order the reference lists them.
std::span<const OptionSpec> AllOptions();

// The spec of `key`, or nullptr when Weir has no such key.
const OptionSpec* FindOption(absl::string_view key);

// The Weir key that `key` stands for when it is another name Flink gives
// the same setting ("restart-strategy" for restart-strategy.type,
// "execution.checkpointing.dir" for state.checkpoints.dir); else `key`.
absl::string_view CanonicalKey(absl::string_view key);

// Whether `key` is a Flink setting that Weir has no use for
// (taskmanager.memory.process.size, env.java.opts.all, web.*): accepted with
// a warning, so that a Flink configuration file can be reused.
bool IsFlinkKeyWeirIgnores(absl::string_view key);

// The Weir key (or Flink name of one) that `key` is a misspelling of: the
// nearest by edit distance, when within a few edits.
std::optional<absl::string_view> NearestKey(absl::string_view key);

// Whether `key` starts with the first segment of a Weir key ("execution.",
// "state.", "restart-strategy"): a job's own settings must not, so that a
// misspelt Weir key is refused rather than taken for one of them.
bool InWeirNamespace(absl::string_view key);

// Keys, as constants, so that a typo is a compile error.
namespace keys {
inline constexpr absl::string_view kJobManagerRpcAddress = "jobmanager.rpc.address";
inline constexpr absl::string_view kJobManagerRpcPort = "jobmanager.rpc.port";
inline constexpr absl::string_view kJobManagerBindHost = "jobmanager.bind-host";
inline constexpr absl::string_view kJobManagerRpcMemoryQuota = "jobmanager.rpc.memory-quota";
inline constexpr absl::string_view kJobManagerRpcMaxConcurrentStreams = "jobmanager.rpc.max-concurrent-streams";
inline constexpr absl::string_view kTaskManagerHost = "taskmanager.host";
inline constexpr absl::string_view kTaskManagerBindHost = "taskmanager.bind-host";
inline constexpr absl::string_view kTaskManagerRpcPort = "taskmanager.rpc.port";
inline constexpr absl::string_view kTaskManagerRpcMemoryQuota = "taskmanager.rpc.memory-quota";
inline constexpr absl::string_view kRestAddress = "rest.address";
inline constexpr absl::string_view kRestPort = "rest.port";
inline constexpr absl::string_view kTaskManagerRestPort = "taskmanager.rest.port";
inline constexpr absl::string_view kTaskManagerSlots = "taskmanager.numberOfTaskSlots";
inline constexpr absl::string_view kTaskManagerResourceId = "taskmanager.resource-id";
inline constexpr absl::string_view kHeartbeatInterval = "heartbeat.interval";
inline constexpr absl::string_view kHeartbeatTimeout = "heartbeat.timeout";
inline constexpr absl::string_view kRegistrationInitialTimeout = "cluster.registration.initial-timeout";
inline constexpr absl::string_view kRegistrationMaxTimeout = "cluster.registration.max-timeout";
inline constexpr absl::string_view kHaStorageDir = "high-availability.storageDir";
inline constexpr absl::string_view kHaType = "high-availability.type";
inline constexpr absl::string_view kHaClusterId = "high-availability.cluster-id";
inline constexpr absl::string_view kHaEtcdEndpoints = "high-availability.etcd.endpoints";
inline constexpr absl::string_view kHaEtcdLeaseTtl = "high-availability.etcd.lease-ttl";
inline constexpr absl::string_view kHaEtcdCaFile = "high-availability.etcd.ssl.ca-file";
inline constexpr absl::string_view kHaEtcdCertFile = "high-availability.etcd.ssl.cert-file";
inline constexpr absl::string_view kHaEtcdKeyFile = "high-availability.etcd.ssl.key-file";
inline constexpr absl::string_view kHaEtcdUsername = "high-availability.etcd.username";
inline constexpr absl::string_view kHaEtcdPasswordFile = "high-availability.etcd.password-file";
inline constexpr absl::string_view kArtifactMaxSize = "jobmanager.artifact.max-size";
inline constexpr absl::string_view kArtifactStoreMaxSize = "jobmanager.artifact.store.max-size";
inline constexpr absl::string_view kArtifactRetention = "jobmanager.artifact.retention";
inline constexpr absl::string_view kParallelismDefault = "parallelism.default";
inline constexpr absl::string_view kMaxParallelism = "pipeline.max-parallelism";
inline constexpr absl::string_view kIoTmpDirs = "io.tmp.dirs";
inline constexpr absl::string_view kBufferTimeout = "execution.buffer-timeout";
inline constexpr absl::string_view kAutoWatermarkInterval = "pipeline.auto-watermark-interval";
inline constexpr absl::string_view kWatermarkStallWarning = "pipeline.watermark.stall-warning";
inline constexpr absl::string_view kBuffersPerChannel = "taskmanager.network.memory.buffers-per-channel";
inline constexpr absl::string_view kMaxBuffersPerChannel = "taskmanager.network.memory.max-buffers-per-channel";
inline constexpr absl::string_view kCheckpointMessages = "taskmanager.checkpoint-messages";
inline constexpr absl::string_view kSegmentSize = "taskmanager.memory.segment-size";
inline constexpr absl::string_view kNetworkServerThreads = "taskmanager.network.netty.server.numThreads";
inline constexpr absl::string_view kNetworkClientThreads = "taskmanager.network.netty.client.numThreads";
inline constexpr absl::string_view kNetworkMaxWaitingSubscriptions = "taskmanager.network.max-waiting-subscriptions";
inline constexpr absl::string_view kTaskOffHeapSize = "taskmanager.memory.task.off-heap.size";
inline constexpr absl::string_view kReleaseCodePages = "taskmanager.memory.release-code-pages";
inline constexpr absl::string_view kCancelTimeout = "task.cancellation.timeout";
inline constexpr absl::string_view kAuthTokenFile = "security.auth.token-file";
inline constexpr absl::string_view kKafkaAllowedProperties = "security.kafka.allowed-properties";
inline constexpr absl::string_view kSslInternalEnabled = "security.ssl.internal.enabled";
inline constexpr absl::string_view kSslInternalCertFile = "security.ssl.internal.cert-file";
inline constexpr absl::string_view kSslInternalKeyFile = "security.ssl.internal.key-file";
inline constexpr absl::string_view kSslInternalCaFile = "security.ssl.internal.ca-file";
inline constexpr absl::string_view kSslInternalReloadInterval = "security.ssl.internal.reload-interval";
inline constexpr absl::string_view kSslRestEnabled = "security.ssl.rest.enabled";
inline constexpr absl::string_view kSslRestCertFile = "security.ssl.rest.cert-file";
inline constexpr absl::string_view kSslRestKeyFile = "security.ssl.rest.key-file";
inline constexpr absl::string_view kCheckpointInterval = "execution.checkpointing.interval";
inline constexpr absl::string_view kCheckpointTimeout = "execution.checkpointing.timeout";
inline constexpr absl::string_view kCheckpointMinPause = "execution.checkpointing.min-pause";
inline constexpr absl::string_view kCheckpointIncremental = "execution.checkpointing.incremental";
inline constexpr absl::string_view kCheckpointMaxConcurrent = "execution.checkpointing.max-concurrent-checkpoints";
inline constexpr absl::string_view kCheckpointMode = "execution.checkpointing.mode";
inline constexpr absl::string_view kCheckpointRetention = "execution.checkpointing.externalized-checkpoint-retention";
inline constexpr absl::string_view kCheckpointTolerableFailures = "execution.checkpointing.tolerable-failed-checkpoints";
inline constexpr absl::string_view kCheckpointsDir = "state.checkpoints.dir";
inline constexpr absl::string_view kSavepointsDir = "state.savepoints.dir";
inline constexpr absl::string_view kCheckpointsRetained = "state.checkpoints.num-retained";
inline constexpr absl::string_view kStateBackendType = "state.backend.type";
inline constexpr absl::string_view kLocalRecovery = "state.backend.local-recovery";
inline constexpr absl::string_view kRocksDbWriteBuffer = "state.backend.rocksdb.writebuffer.size";
inline constexpr absl::string_view kStateLocalRootDirs = "taskmanager.state.local.root-dirs";
inline constexpr absl::string_view kRestartStrategyType = "restart-strategy.type";
inline constexpr absl::string_view kRestartFixedAttempts = "restart-strategy.fixed-delay.attempts";
inline constexpr absl::string_view kRestartFixedDelay = "restart-strategy.fixed-delay.delay";
inline constexpr absl::string_view kRestartInitialBackoff = "restart-strategy.exponential-delay.initial-backoff";
inline constexpr absl::string_view kRestartMaxBackoff = "restart-strategy.exponential-delay.max-backoff";
inline constexpr absl::string_view kRestartBackoffMultiplier = "restart-strategy.exponential-delay.backoff-multiplier";
inline constexpr absl::string_view kRestartResetThreshold = "restart-strategy.exponential-delay.reset-backoff-threshold";
inline constexpr absl::string_view kRestartJitterFactor = "restart-strategy.exponential-delay.jitter-factor";
inline constexpr absl::string_view kSlotRequestTimeout = "slot.request.timeout";
inline constexpr absl::string_view kLogLevel = "log.level";
inline constexpr absl::string_view kLogFormat = "log.format";
inline constexpr absl::string_view kJobStoreExpirationTime = "jobstore.expiration-time";
inline constexpr absl::string_view kJobStoreMaxCapacity = "jobstore.max-capacity";
inline constexpr absl::string_view kS3Endpoint = "s3.endpoint";
inline constexpr absl::string_view kS3Region = "s3.region";
inline constexpr absl::string_view kS3AccessKey = "s3.access-key";
inline constexpr absl::string_view kS3SecretKey = "s3.secret-key";
inline constexpr absl::string_view kS3PathStyleAccess = "s3.path.style.access";
inline constexpr absl::string_view kS3UploadPartSize = "s3.upload.part-size";
inline constexpr absl::string_view kS3UploadSignPayload = "s3.upload.sign-payload";
inline constexpr absl::string_view kFaultInjectionPoint = "test.fault-injection.point";
inline constexpr absl::string_view kFaultInjectionCheckpoint = "test.fault-injection.checkpoint";
inline constexpr absl::string_view kTestDropFinalTaskReports = "test.drop-final-task-reports";
}  // namespace keys

}  // namespace weir::config
