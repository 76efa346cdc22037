#include "absl/strings/string_view.h"
#include "common/config/options.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <vector>

#include "absl/strings/match.h"

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
    OptionSpec{.key = keys::kJobManagerRpcMemoryQuota,
               .type = OptionType::kMemorySize,
               .default_value = "256 mb",
               .description = "Memory gRPC itself may hold for the JobManager's endpoint, for every "
                              "connection and call together (read buffers, calls, messages being "
                              "received). Near it gRPC shrinks its receive windows, then resets "
                              "streams. At least four of the largest control-plane message (4 MiB).",
               .scope = kJobManager,
               .min_value = 16 << 20},
    OptionSpec{.key = keys::kJobManagerRpcMaxConcurrentStreams,
               .type = OptionType::kInt,
               .default_value = "256",
               .description = "Calls one connection may have open at once on the JobManager's endpoint; "
                              "a gRPC client queues calls beyond it. A TaskManager holds its membership "
                              "stream and its task reports on one connection, a client a few calls.",
               .scope = kJobManager,
               .min_value = 16,
               .max_value = 1 << 20},
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
    OptionSpec{.key = keys::kTaskManagerRpcMemoryQuota,
               .type = OptionType::kMemorySize,
               .default_value = "64 mb",
               .description = "Memory gRPC itself may hold for the TaskManager's endpoint (the "
                              "JobManager's calls and the data exchange's streams from other "
                              "TaskManagers), for every connection and call together. What it receives "
                              "is deployments (at most 8 MiB each), subscriptions and credits; the data "
                              "exchange's buffers leave through it. At least four of the largest "
                              "deployment.",
               .scope = kTaskManager,
               .min_value = 32 << 20},
    OptionSpec{.key = keys::kRestAddress,
               .type = OptionType::kString,
               .default_value = "",
               .description = "Address the JobManager's HTTP endpoint (health probes, /metrics, the "
                              "read-only REST API) binds; defaults to the address its RPCs bind. Beyond "
                              "loopback it requires the shared secret, except for /healthz and /readyz.",
               .scope = kJobManager},
    OptionSpec{.key = keys::kRestPort,
               .type = OptionType::kInt,
               .default_value = "8081",
               .description = "Port of the JobManager's HTTP endpoint; 0 picks any free port (the log "
                              "says which).",
               .scope = kJobManager,
               .min_value = 0,
               .max_value = 65535},
    OptionSpec{.key = keys::kTaskManagerRestPort,
               .type = OptionType::kInt,
               .default_value = "0",
               .description = "Port of the TaskManager's HTTP endpoint (health probes, /metrics), on the "
                              "address its RPCs bind; 0 picks any free port, which `weir cluster` shows.",
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
               .description = "Id under which this TaskManager registers; it also names its directories, so "
                              "1 to 128 characters from A-Z a-z 0-9 . _ -. Defaults to a fresh random id per "
                              "process (tm-<hex>).",
               .scope = kTaskManager,
               .is_name = true},
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
                              "unreachable JobManager; doubles on every failed attempt. Each delay "
                              "is drawn at random from its upper half, so that the TaskManagers of "
                              "a restarted JobManager do not all come back at once.",
               .scope = kTaskManager,
               .min_value = 1,
               .max_value = kMsPerDay},
    OptionSpec{.key = keys::kRegistrationMaxTimeout,
               .type = OptionType::kDuration,
               .default_value = "5 s",
               .description = "Largest delay between two registration attempts (before the random "
                              "shortening).",
               .scope = kTaskManager,
               .min_value = 1,
               .max_value = kMsPerDay},
    OptionSpec{.key = keys::kHaStorageDir,
               .type = OptionType::kString,
               .default_value = "weir-ha",
               .description = "The cluster's durable storage: job binaries (under their SHA-256) and the "
                              "job store. With high-availability.type none the job store and its lock are "
                              "files here, so it must be a local directory (a relative path is relative to "
                              "the JobManager's working directory). With etcd the job store keeps its "
                              "records in etcd and only the submissions here, and the whole directory may "
                              "be s3://bucket/prefix (the s3.* keys), so that no two JobManagers share a "
                              "file system.",
               .scope = kJobManager},
    OptionSpec{.key = keys::kHaType,
               .type = OptionType::kEnum,
               .default_value = "none",
               .description = "How JobManagers agree on a leader: 'none' (one JobManager, which holds a lock in "
                              "high-availability.storageDir) or 'etcd' (any number of JobManagers share the "
                              "directory; an election on an etcd v3 cluster picks the leader, the others are "
                              "standbys that take over when it fails). On a TaskManager, 'etcd' means: find the "
                              "leading JobManager in etcd rather than at jobmanager.rpc.address.",
               .scope = kDaemons,
               .allowed_values = "none,etcd"},
    OptionSpec{.key = keys::kHaClusterId,
               .type = OptionType::kString,
               .default_value = "default",
               .description = "Names this cluster in the coordination service: its etcd keys live under "
                              "/weir/<cluster-id>/, so several clusters can share one etcd.",
               .scope = kDaemons,
               .is_name = true},
    OptionSpec{.key = keys::kHaEtcdEndpoints,
               .type = OptionType::kString,
               .default_value = "127.0.0.1:2379",
               .description = "The etcd members, comma-separated host:port; a call that fails goes to the next.",
               .scope = kDaemons},
    OptionSpec{.key = keys::kHaEtcdLeaseTtl,
               .type = OptionType::kDuration,
               .default_value = "3 s",
               .description = "The leader's etcd lease, in whole seconds (rounded up). The leader renews it every "
                              "third of it and steps down when it could not for half of it; a standby takes over "
                              "when it expires.",
               .scope = kJobManager,
               .min_value = 1000,
               .max_value = 3600 * 1000},
    OptionSpec{.key = keys::kHaEtcdCaFile,
               .type = OptionType::kString,
               .default_value = "",
               .description = "PEM file of the CAs that sign the etcd servers' certificates; set, the connections to "
                              "etcd use TLS.",
               .scope = kDaemons},
    OptionSpec{.key = keys::kHaEtcdCertFile,
               .type = OptionType::kString,
               .default_value = "",
               .description = "PEM certificate this process presents to etcd (with "
                              "high-availability.etcd.ssl.key-file), for servers that require client "
                              "certificates.",
               .scope = kDaemons},
    OptionSpec{.key = keys::kHaEtcdKeyFile,
               .type = OptionType::kString,
               .default_value = "",
               .description = "The unencrypted PEM private key of high-availability.etcd.ssl.cert-file.",
               .scope = kDaemons},
    OptionSpec{.key = keys::kHaEtcdUsername,
               .type = OptionType::kString,
               .default_value = "",
               .description = "etcd user to authenticate as (with high-availability.etcd.password-file); unset: no "
                              "authentication.",
               .scope = kDaemons},
    OptionSpec{.key = keys::kHaEtcdPasswordFile,
               .type = OptionType::kString,
               .default_value = "",
               .description = "File holding the etcd user's password (one line; a trailing newline is ignored), so "
                              "that the password is in no configuration file or command line.",
               .scope = kDaemons},
    OptionSpec{.key = keys::kArtifactMaxSize,
               .type = OptionType::kMemorySize,
               .default_value = "256 mb",
               .description = "Largest job binary the JobManager accepts, and a TaskManager downloads.",
               .scope = kJobManager | kTaskManager,
               .min_value = 1024},
    OptionSpec{.key = keys::kArtifactStoreMaxSize,
               .type = OptionType::kMemorySize,
               .default_value = "10 gb",
               .description = "Quota of all job binaries the JobManager stores, and of the uploads in flight "
                              "together: an upload that would exceed either is refused. 0: no quota.",
               .scope = kJobManager,
               .min_value = 0},
    OptionSpec{.key = keys::kArtifactRetention,
               .type = OptionType::kDuration,
               .default_value = "1 h",
               .description = "A job binary that no job (running, restarting or being recovered) uses is removed "
                              "once it was uploaded longer ago than this (at least 1 min: a submission follows "
                              "its upload).",
               .scope = kJobManager,
               .min_value = 60 * 1000,
               .max_value = 365 * kMsPerDay},
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
               .description = "Where a TaskManager keeps downloaded job binaries and other local files, and a "
                              "JobManager stages job binaries on their way to an object store: a list of "
                              "directories as in Flink (\"/a:/b\" or \"/a,/b\"), of which Weir uses the first "
                              "today.",
               .scope = kJobManager | kTaskManager},
    OptionSpec{.key = keys::kBufferTimeout,
               .type = OptionType::kDuration,
               .default_value = "100 ms",
               .description = "Longest time a record waits in a partly filled network buffer before the "
                              "buffer is sent: bounds latency at low throughput.",
               .scope = kTaskManager,
               .min_value = 1,
               .max_value = 60000},
    OptionSpec{.key = keys::kAutoWatermarkInterval,
               .type = OptionType::kDuration,
               .default_value = "50 ms",
               .description = "How often watermark strategies emit their watermark, in processing time "
                              "(Flink's name; Flink's default is 200 ms): the delay before event time moves on "
                              "after records arrive. Shorter steps of event time make smaller bursts of "
                              "window firing, which a checkpoint barrier waits behind (bench/README.md, q5).",
               .scope = kTaskManager,
               .min_value = 1,
               .max_value = 60000},
    OptionSpec{.key = keys::kWatermarkStallWarning,
               .type = OptionType::kDuration,
               .default_value = "1 min",
               .description = "How long event time may wait on one input (a Kafka partition without records, an "
                              "upstream channel) while others move on before the task says so in its log, once per "
                              "stall. 0 turns the warning off. A watermark strategy's idleness lets event time move "
                              "on without the quiet input instead.",
               .scope = kTaskManager,
               .min_value = 0,
               .max_value = 24 * 3600 * 1000},
    OptionSpec{.key = keys::kBuffersPerChannel,
               .type = OptionType::kInt,
               .default_value = "4",
               .description = "Network buffers per channel: the credit a consumer grants its producer "
                              "on a remote channel, and (unless max-buffers-per-channel says otherwise) "
                              "the queue a producer may fill per channel. Bounds memory per channel to "
                              "about 2 x this x taskmanager.memory.segment-size.",
               .scope = kTaskManager,
               .min_value = 1,
               .max_value = 1024},
    OptionSpec{.key = keys::kMaxBuffersPerChannel,
               .type = OptionType::kInt,
               .default_value = "0",
               .description = "Full network buffers a producer may queue per channel (local or remote) "
                              "before its task waits; 0: buffers-per-channel. With the consumer's credit, "
                              "bounds what is in flight per channel, and so what a checkpoint barrier "
                              "waits behind under backpressure.",
               .scope = kTaskManager,
               .min_value = 0,
               .max_value = 1024},
    OptionSpec{.key = keys::kSegmentSize,
               .type = OptionType::kMemorySize,
               .default_value = "32 kb",
               .description = "Size at which a network buffer is sent.",
               .scope = kTaskManager,
               .min_value = 256,
               .max_value = 64LL << 20},
    OptionSpec{.key = keys::kNetworkServerThreads,
               .type = OptionType::kInt,
               .default_value = "-1",
               .description = "Threads that send this TaskManager's data to other TaskManagers, for all "
                              "channels together (the name is Flink's). -1: the number of slots, at most "
                              "the number of CPU cores.",
               .scope = kTaskManager,
               .min_value = -1,
               .max_value = 256},
    OptionSpec{.key = keys::kReleaseCodePages,
               .type = OptionType::kBool,
               .default_value = "true",
               .description = "Two seconds after start-up and after each deployment, as soon as a "
                              "deployment's last task reports RUNNING and 300 ms after that, the "
                              "TaskManager drops "
                              "its mappings of read-only code and constant pages, so that its resident "
                              "set holds only the code that runs afterwards (start-up code of its "
                              "libraries and of a job's set-up is not counted any more). The pages stay in "
                              "the page cache; code that runs again maps them back with a minor fault.",
               .scope = kTaskManager},
    OptionSpec{.key = keys::kCheckpointMessages,
               .type = OptionType::kBool,
               .default_value = "true",
               .description = "The TaskManager takes checkpoint triggers and notifications as messages on "
                              "its membership session. false: it registers as TaskManagers before them "
                              "did, and the JobManager calls it for each instead (what a cluster in the "
                              "middle of an upgrade does with its older TaskManagers).",
               .scope = kTaskManager},
    OptionSpec{.key = keys::kNetworkClientThreads,
               .type = OptionType::kInt,
               .default_value = "-1",
               .description = "Threads that receive data from other TaskManagers, for all input channels "
                              "together (the name is Flink's). -1: the number of slots, at most the number "
                              "of CPU cores.",
               .scope = kTaskManager,
               .min_value = -1,
               .max_value = 256},
    OptionSpec{.key = keys::kNetworkMaxWaitingSubscriptions,
               .type = OptionType::kInt,
               .default_value = "16384",
               .description = "Subscriptions from other TaskManagers that may wait at once for a result "
                              "partition not yet registered here (its producer still deploying). Beyond "
                              "it a subscription is refused and the consumer retries it until its "
                              "partition deadline.",
               .scope = kTaskManager,
               .min_value = 1,
               .max_value = 1 << 20},
    OptionSpec{.key = keys::kTaskOffHeapSize,
               .type = OptionType::kMemorySize,
               .default_value = "6 mb",
               .description = "Memory the tasks' connector clients may buffer records in, for the whole "
                              "TaskManager: divided evenly among the slots, and a slot's share evenly between "
                              "the Kafka source and the Kafka sink subtask it runs. Weir sizes librdkafka's "
                              "prefetch (queued.max.messages.kbytes, queued.min.messages, fetch.max.bytes, "
                              "max.partition.fetch.bytes) and producer queue (queue.buffering.max.kbytes, "
                              "queue.buffering.max.messages, batch.size, batch.num.messages) from it; a kafka.<name> property of the "
                              "job wins. At least 512 kb per slot (the default grows to that with many slots; a value "
                              "set below it is refused); 0 keeps librdkafka's own sizes (up to 64 MB "
                              "prefetched per source subtask, 1 GB queued per producer).",
               .scope = kTaskManager,
               .min_value = 0},
    OptionSpec{.key = keys::kCancelTimeout,
               .type = OptionType::kDuration,
               .default_value = "3 min",
               .description = "How long a cancelled task may take to end (the name and default are Flink's). "
                              "A TaskManager with a cancelled task still running past it (user code that does "
                              "not return) logs the task's backtrace and exits with code 1, so that systemd or "
                              "Kubernetes restarts it; a TaskManager that stops waits this long for its tasks. "
                              "The JobManager declares tasks canceled that have not acknowledged their "
                              "cancellation by then. 0 turns all three off (a stuck task then holds its slot "
                              "and its job's restart until the TaskManager is restarted by hand).",
               .scope = kJobManager | kTaskManager,
               .min_value = 0,
               .max_value = 3600000},
    OptionSpec{.key = keys::kAuthTokenFile,
               .type = OptionType::kString,
               .default_value = "",
               .description = "File holding the cluster's shared secret. When set, every RPC must carry it "
                              "(clients: weir --token-file). Required when a daemon binds beyond loopback, "
                              "since job submission runs code. Not encrypted without TLS.",
               .scope = kDaemons},
    OptionSpec{.key = keys::kSslInternalEnabled,
               .type = OptionType::kBool,
               .default_value = "false",
               .description = "TLS with mutual authentication on every RPC connection: control plane, data "
                              "exchange and the weir client. Every process presents the certificate of "
                              "security.ssl.internal.cert-file and accepts only peers whose certificate is "
                              "signed by a CA in security.ssl.internal.ca-file. Set it on every process.",
               .scope = kAllProcesses},
    OptionSpec{.key = keys::kSslInternalCertFile,
               .type = OptionType::kString,
               .default_value = "",
               .description = "PEM file with this process's certificate (then any intermediate CA "
                              "certificates), signed by the cluster's CA.",
               .scope = kAllProcesses},
    OptionSpec{.key = keys::kSslInternalKeyFile,
               .type = OptionType::kString,
               .default_value = "",
               .description = "PEM file with the unencrypted private key of security.ssl.internal.cert-file. "
                              "Readable by the daemon's user only.",
               .scope = kAllProcesses},
    OptionSpec{.key = keys::kSslInternalCaFile,
               .type = OptionType::kString,
               .default_value = "",
               .description = "PEM file with the CA certificate(s) that sign the cluster's certificates; a "
                              "peer whose certificate chains to none of them is refused.",
               .scope = kAllProcesses},
    OptionSpec{.key = keys::kSslInternalReloadInterval,
               .type = OptionType::kDuration,
               .default_value = "1 min",
               .description = "How often the three security.ssl.internal files are re-read: replaced "
                              "certificates are used for new connections without a restart.",
               .scope = kAllProcesses,
               .min_value = 1000,
               .max_value = kMsPerDay},
    OptionSpec{.key = keys::kSslRestEnabled,
               .type = OptionType::kBool,
               .default_value = "false",
               .description = "HTTPS on the daemons' HTTP endpoint (health probes, /metrics, the REST API), "
                              "with the certificate and key below. Clients are not asked for a certificate: "
                              "the shared secret (security.auth.token-file) guards everything but the probes.",
               .scope = kDaemons},
    OptionSpec{.key = keys::kSslRestCertFile,
               .type = OptionType::kString,
               .default_value = "",
               .description = "PEM file with the HTTP endpoint's certificate (chain); re-read when it changes.",
               .scope = kDaemons},
    OptionSpec{.key = keys::kSslRestKeyFile,
               .type = OptionType::kString,
               .default_value = "",
               .description = "PEM file with the unencrypted private key of security.ssl.rest.cert-file.",
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
    OptionSpec{.key = keys::kCheckpointInterval,
               .type = OptionType::kDuration,
               .default_value = "0 ms",
               .description = "How often the JobManager starts a checkpoint of each job; 0 turns checkpoints "
                              "off. A job may set its own with weir submit -D.",
               .scope = kJobManager | kClient,
               .min_value = 0,
               .max_value = kMsPerDay},
    OptionSpec{.key = keys::kCheckpointTimeout,
               .type = OptionType::kDuration,
               .default_value = "10 min",
               .description = "A checkpoint not acknowledged by every task within this time is aborted; "
                              "the next one goes on.",
               .scope = kJobManager | kClient,
               .min_value = 10,
               .max_value = kMsPerDay},
    OptionSpec{.key = keys::kCheckpointMinPause,
               .type = OptionType::kDuration,
               .default_value = "0 ms",
               .description = "Least time between the end of one checkpoint and the start of the next.",
               .scope = kJobManager | kClient,
               .min_value = 0,
               .max_value = kMsPerDay},
    OptionSpec{.key = keys::kCheckpointIncremental,
               .type = OptionType::kBool,
               .default_value = "true",
               .description = "The rocksdb state backend uploads at each checkpoint only the files the last "
                              "completed checkpoint does not hold (into <state.checkpoints.dir>/<job>/shared), "
                              "and refers to the rest; a shared file is deleted once no retained checkpoint "
                              "refers to it. Savepoints are always self-contained.",
               .scope = kJobManager | kClient},
    OptionSpec{.key = keys::kCheckpointMaxConcurrent,
               .type = OptionType::kInt,
               .default_value = "1",
               .description = "Most checkpoints of one job in progress at a time.",
               .scope = kJobManager | kClient,
               .min_value = 1,
               .max_value = 16},
    OptionSpec{.key = keys::kCheckpointMode,
               .type = OptionType::kEnum,
               .default_value = "EXACTLY_ONCE",
               .description = "EXACTLY_ONCE aligns barriers, so state reflects every record exactly once; "
                              "AT_LEAST_ONCE never holds inputs back, and after a restore some records may "
                              "count twice in state.",
               .scope = kJobManager | kClient,
               .allowed_values = "EXACTLY_ONCE,AT_LEAST_ONCE"},
    OptionSpec{.key = keys::kCheckpointRetention,
               .type = OptionType::kEnum,
               .default_value = "DELETE_ON_CANCELLATION",
               .description = "What happens to a job's checkpoints (<state.checkpoints.dir>/<job>) when it ends. "
                              "DELETE_ON_CANCELLATION keeps them when the job FAILED, so that it can be "
                              "resubmitted from its last checkpoint (weir submit -s <that directory>), and deletes "
                              "them when it is CANCELED or FINISHED; RETAIN_ON_CANCELLATION always keeps them (they "
                              "are then the operator's to delete); NO_EXTERNALIZED_CHECKPOINTS always deletes them. "
                              "A JobManager that stops never deletes them: its successor resumes the job.",
               .scope = kJobManager | kClient,
               .allowed_values = "DELETE_ON_CANCELLATION,RETAIN_ON_CANCELLATION,NO_EXTERNALIZED_CHECKPOINTS"},
    OptionSpec{.key = keys::kCheckpointTolerableFailures,
               .type = OptionType::kInt,
               .default_value = "-1",
               .description = "Consecutive failed checkpoints after which the job fails (and restarts); -1 "
                              "never fails a job because of failed checkpoints. Unlike Apache Flink, whose "
                              "default 0 restarts a job at the first expired checkpoint.",
               .scope = kJobManager | kClient,
               .min_value = -1,
               .max_value = 1000000},
    OptionSpec{.key = keys::kCheckpointsDir,
               .type = OptionType::kString,
               .default_value = "",
               .description = "Where checkpoints are written: <dir>/<job id>/chk-<n>/. Must be one directory "
                              "shared by the JobManager and every TaskManager (local disk for a single host, "
                              "else NFS or a Kubernetes volume), or an S3 bucket: s3://bucket/prefix (the s3.* "
                              "keys; the bucket must exist and the keys may list it, or the JobManager does not "
                              "start). Unset: <high-availability.storageDir>/checkpoints.",
               .scope = kJobManager},
    OptionSpec{.key = keys::kSavepointsDir,
               .type = OptionType::kString,
               .default_value = "",
               .description = "Where savepoints go (weir savepoint JOB [DIR]: DIR is taken inside it) and the only "
                              "place weir submit -s reads them from; a directory or s3://bucket/prefix. Unset: "
                              "<high-availability.storageDir>/savepoints.",
               .scope = kJobManager},
    OptionSpec{.key = keys::kCheckpointsRetained,
               .type = OptionType::kInt,
               .default_value = "1",
               .description = "Completed checkpoints kept per job; older ones are deleted. Keep 2 or more to "
                              "be able to fall back when the newest is damaged.",
               .scope = kJobManager | kClient,
               .min_value = 1,
               .max_value = 1000},
    OptionSpec{.key = keys::kStateBackendType,
               .type = OptionType::kEnum,
               .default_value = "rocksdb",
               .description = "Where keyed state lives: 'rocksdb' (on local disk, one RocksDB instance per "
                              "operator instance; state may exceed memory; snapshots copy immutable files) or "
                              "'hashmap' (on the heap; for small state: every snapshot serializes all of it). "
                              "Settable per job with -D. A checkpoint restores only into the backend that wrote it.",
               .scope = kAllProcesses,
               .allowed_values = "rocksdb,hashmap"},
    OptionSpec{.key = keys::kLocalRecovery,
               .type = OptionType::kBool,
               .default_value = "false",
               .description = "The rocksdb backend keeps each subtask's last checkpointed state on the "
                              "TaskManager's disk (hard links to its own table files and a copy of its log: "
                              "extra space for that copy and for files RocksDB has compacted away since, up "
                              "to the state's size), and the "
                              "JobManager redeploys a restarted subtask to the TaskManager that ran it when that "
                              "one is still there: it then restores from its disk instead of reading the "
                              "checkpoint directory. Settable per job with -D.",
               .scope = kJobManager | kClient},
    OptionSpec{.key = keys::kRocksDbWriteBuffer,
               .type = OptionType::kMemorySize,
               .default_value = "32mb",
               .description = "Memtable size of each state of a rocksdb instance. Memtables are "
                              "flushed in the background when full and after every checkpoint (never on the "
                              "task thread); a larger one holds more recent writes in memory, a smaller one "
                              "flushes more often into more files to look in.",
               .scope = kTaskManager},
    OptionSpec{.key = keys::kStateLocalRootDirs,
               .type = OptionType::kString,
               .default_value = "",
               .description = "Where a TaskManager keeps the rocksdb backend's instances (a local disk; "
                              "<dir>/<job id>/<task>): a list as io.tmp.dirs, of which the first is used today. "
                              "Empty: <first io.tmp.dirs>/weir-state-<resource id>. Nothing "
                              "there survives the process: state comes back from checkpoints.",
               .scope = kTaskManager},
    OptionSpec{.key = keys::kRestartStrategyType,
               .type = OptionType::kString,
               .default_value = "",
               .description = "What a failure does to a job: none (it fails), fixed-delay or "
                              "exponential-delay (it restarts from its newest checkpoint). Unset: "
                              "exponential-delay when checkpoints are on, none when off.",
               .scope = kJobManager | kClient},
    OptionSpec{.key = keys::kRestartFixedAttempts,
               .type = OptionType::kInt,
               .default_value = "1",
               .description = "fixed-delay: restarts before the job fails.",
               .scope = kJobManager | kClient,
               .min_value = 0,
               .max_value = 1000000000},
    OptionSpec{.key = keys::kRestartFixedDelay,
               .type = OptionType::kDuration,
               .default_value = "1 s",
               .description = "fixed-delay: wait between a failure and the restart.",
               .scope = kJobManager | kClient,
               .min_value = 0,
               .max_value = kMsPerDay},
    OptionSpec{.key = keys::kRestartInitialBackoff,
               .type = OptionType::kDuration,
               .default_value = "1 s",
               .description = "exponential-delay: wait before the first restart.",
               .scope = kJobManager | kClient,
               .min_value = 0,
               .max_value = kMsPerDay},
    OptionSpec{.key = keys::kRestartMaxBackoff,
               .type = OptionType::kDuration,
               .default_value = "1 min",
               .description = "exponential-delay: longest wait between restarts.",
               .scope = kJobManager | kClient,
               .min_value = 0,
               .max_value = kMsPerDay},
    OptionSpec{.key = keys::kRestartBackoffMultiplier,
               .type = OptionType::kString,
               .default_value = "1.5",
               .description = "exponential-delay: factor by which the wait grows after each restart (1 to 100).",
               .scope = kJobManager | kClient},
    OptionSpec{.key = keys::kRestartResetThreshold,
               .type = OptionType::kDuration,
               .default_value = "1 h",
               .description = "exponential-delay: a job that runs this long without failing starts over "
                              "from the initial backoff.",
               .scope = kJobManager | kClient,
               .min_value = 1,
               .max_value = 30 * kMsPerDay},
    OptionSpec{.key = keys::kRestartJitterFactor,
               .type = OptionType::kString,
               .default_value = "0.1",
               .description = "exponential-delay: random share (0 to 1) added to or taken from each wait, so "
                              "that many jobs do not restart in lockstep.",
               .scope = kJobManager | kClient},
    OptionSpec{.key = keys::kSlotRequestTimeout,
               .type = OptionType::kDuration,
               .default_value = "5 min",
               .description = "How long a restarting job waits for enough free slots (e.g. for a "
                              "replacement TaskManager) before it fails.",
               .scope = kJobManager | kClient,
               .min_value = 1,
               .max_value = kMsPerDay},
    OptionSpec{.key = keys::kJobStoreExpirationTime,
               .type = OptionType::kDuration,
               .default_value = "1 h",
               .description = "How long an ended job stays listed (weir list, weir status), also across "
                              "JobManager restarts; then it and its entry in high-availability.storageDir go.",
               .scope = kJobManager,
               .min_value = 1,
               .max_value = 365 * kMsPerDay},
    OptionSpec{.key = keys::kJobStoreMaxCapacity,
               .type = OptionType::kInt,
               .default_value = "1000",
               .description = "At most this many ended jobs stay listed; the oldest go first.",
               .scope = kJobManager,
               .min_value = 0,
               .max_value = 1000000},
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
    OptionSpec{.key = keys::kS3Endpoint,
               .type = OptionType::kString,
               .default_value = "",
               .description = "Endpoint of the S3 store for s3:// URIs (http://host:port or https://host); unset: "
                              "AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL, else https://s3.<region>.amazonaws.com. Used by "
                              "state.checkpoints.dir and state.savepoints.dir at s3:// URIs; set it on the "
                              "JobManager and on every TaskManager.",
               .scope = kAllProcesses},
    OptionSpec{.key = keys::kS3Region,
               .type = OptionType::kString,
               .default_value = "",
               .description = "Region that S3 requests are signed for; unset: AWS_REGION, AWS_DEFAULT_REGION, "
                              "else us-east-1.",
               .scope = kAllProcesses},
    OptionSpec{.key = keys::kS3AccessKey,
               .type = OptionType::kString,
               .default_value = "",
               .description = "S3 access key id (with s3.secret-key); unset: AWS_ACCESS_KEY_ID and "
                              "AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), else the profile AWS_PROFILE "
                              "(default \"default\") of ~/.aws/credentials (AWS_SHARED_CREDENTIALS_FILE).",
               .scope = kAllProcesses},
    OptionSpec{.key = keys::kS3SecretKey,
               .type = OptionType::kString,
               .default_value = "",
               .description = "S3 secret access key (with s3.access-key). Never logged.",
               .scope = kAllProcesses,
               .is_secret = true},
    OptionSpec{.key = keys::kS3PathStyleAccess,
               .type = OptionType::kBool,
               .default_value = "false",
               .description = "Address buckets as <endpoint>/<bucket>/<key> rather than "
                              "<bucket>.<endpoint>/<key>; most S3-compatible servers need true.",
               .scope = kAllProcesses},
    OptionSpec{.key = keys::kS3UploadPartSize,
               .type = OptionType::kMemorySize,
               .default_value = "16 mb",
               .description = "Files up to this size go to S3 in one PUT; larger ones in a multipart upload of "
                              "parts this size (at most 10000 parts), aborted on failure so that no part of a "
                              "file is ever visible.",
               .scope = kAllProcesses,
               .min_value = int64_t{5} << 20,
               .max_value = int64_t{5} << 30},
    OptionSpec{.key = keys::kS3UploadSignPayload,
               .type = OptionType::kBool,
               .default_value = "false",
               .description = "Sign the bodies of uploads into S3 (SigV4 with the body's SHA-256) rather than "
                              "send them as UNSIGNED-PAYLOAD; either way each upload carries its Content-MD5, "
                              "which the store checks, refusing a body that arrives different. Signing costs "
                              "the store a SHA-256 of every body before it writes it; set true for a store that "
                              "refuses unsigned payloads.",
               .scope = kAllProcesses},
    OptionSpec{.key = keys::kFaultInjectionPoint,
               .type = OptionType::kEnum,
               .default_value = "none",
               .description = "For tests only: the daemon SIGKILLs itself at this step of the checkpoint "
                              "protocol, or (taskmanager-drop-notify) the TaskManager drops the completion "
                              "notifications from the checkpoint on, or (jobmanager-stop-before-store-write) "
                              "the JobManager stops itself (SIGSTOP) in its first job-store write of an "
                              "attempt under an election (common/process/fault_injection.h). Never set it in "
                              "production.",
               .scope = kDaemons,
               .allowed_values = "none,taskmanager-after-pre-commit,taskmanager-before-commit,"
                                 "jobmanager-before-notify,taskmanager-mid-write-ahead-batch,"
                                 "taskmanager-drop-notify,jobmanager-stop-before-store-write"},
    OptionSpec{.key = keys::kFaultInjectionCheckpoint,
               .type = OptionType::kInt,
               .default_value = "1",
               .description = "For tests only: the first checkpoint id at which test.fault-injection.point "
                              "fires.",
               .scope = kDaemons,
               .min_value = 1},
    OptionSpec{.key = keys::kTestDropFinalTaskReports,
               .type = OptionType::kEnum,
               .default_value = "none",
               .description = "For tests only: the TaskManager drops its tasks' final state reports "
                              "(state-reports), or those and the final states in its metrics reports too (all), "
                              "to test that the JobManager learns how tasks ended anyway. Never set it in "
                              "production.",
               .scope = kTaskManager,
               .allowed_values = "none,state-reports,all"},
};

}  // namespace

std::span<const OptionSpec> AllOptions() { return kOptions; }

const OptionSpec* FindOption(absl::string_view key) {
  for (const OptionSpec& spec : kOptions) {
    if (spec.key == key) return &spec;
  }
  return nullptr;
}

namespace {

// Flink's other names for settings Weir has: the keys Flink 1.x used and
// Flink 2.x still reads (state.backend, restart-strategy), and the names
// Flink 2.x gave keys Weir keeps in their 1.x form.
struct KeyAlias {
  absl::string_view alias;
  absl::string_view key;
};
constexpr KeyAlias kAliases[] = {
    {"restart-strategy", keys::kRestartStrategyType},
    {"state.backend", keys::kStateBackendType},
    {"state.backend.incremental", keys::kCheckpointIncremental},
    {"execution.checkpointing.dir", keys::kCheckpointsDir},
    {"state.backend.fs.checkpointdir", keys::kCheckpointsDir},
    {"execution.checkpointing.savepoint-dir", keys::kSavepointsDir},
    {"execution.checkpointing.num-retained", keys::kCheckpointsRetained},
    {"execution.state-recovery.from-local", keys::kLocalRecovery},
    {"execution.checkpointing.local-backup.dirs", keys::kStateLocalRootDirs},
};

// Flink settings that mean nothing to Weir (the JVM's memory, its web UI
// and class loading, other deployment targets), so that a Flink
// config.yaml can be reused: whole families by prefix, and single keys.
constexpr absl::string_view kFlinkPrefixes[] = {
    "akka.",        "pekko.",          "env.",      "blob.",           "classloader.",      "web.",
    "historyserver.", "kubernetes.",   "yarn.",     "table.",          "sql-gateway.",      "python.",
    "zookeeper.",   "high-availability.zookeeper.", "high-availability.kubernetes.",       "metrics.reporter.",
    "security.kerberos.", "security.ssl.rest.truststore", "security.ssl.internal.keystore",
    "security.ssl.internal.truststore", "fs.",   "state.backend.rocksdb.", "state.backend.changelog.",
    "state.changelog.", "state.storage.fs.", "taskmanager.memory.", "jobmanager.memory.",
    "jobmanager.adaptive-scheduler.", "execution.checkpointing.unaligned", "query.",
    "rest.flamegraph.", "restart-strategy.failure-rate.",
};
constexpr absl::string_view kFlinkKeys[] = {
    "state.backend.async",
    "state.checkpoint-storage",
    "execution.checkpointing.storage",
    "execution.checkpointing.aligned-checkpoint-timeout",
    "execution.checkpointing.checkpoints-after-tasks-finish",
    "execution.checkpointing.cleaner.parallel-mode",
    "execution.checkpointing.local-backup.enabled",
    "execution.checkpointing.file-merging.enabled",
    "execution.runtime-mode",
    "jobmanager.execution.failover-strategy",
    "jobmanager.scheduler",
    "jobmanager.archive.fs.dir",
    "pipeline.name",
    "pipeline.jars",
    "pipeline.classpaths",
    "pipeline.object-reuse",
    "pipeline.generic-types",
    "pipeline.operator-chaining.enabled",
    "rest.bind-address",
    "rest.bind-port",
    "taskmanager.data.port",
    "taskmanager.cpu.cores",
    "taskmanager.jvm-exit-on-oom",
    "metrics.reporters",
    "high-availability.jobmanager.port",
    "cluster.evenly-spread-out-slots",
};

// Levenshtein distance, bounded: gives up (returns limit + 1) once every
// path through a row exceeds `limit`.
int EditDistance(absl::string_view a, absl::string_view b, int limit) {
  if (std::abs(static_cast<int>(a.size()) - static_cast<int>(b.size())) > limit) return limit + 1;
  std::vector<int> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    int diagonal = row[0];
    row[0] = static_cast<int>(i);
    int best = row[0];
    for (size_t j = 1; j <= b.size(); ++j) {
      const int above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
      best = std::min(best, row[j]);
    }
    if (best > limit) return limit + 1;
  }
  return row[b.size()];
}

}  // namespace

absl::string_view CanonicalKey(absl::string_view key) {
  for (const KeyAlias& alias : kAliases) {
    if (alias.alias == key) return alias.key;
  }
  return key;
}

bool IsFlinkKeyWeirIgnores(absl::string_view key) {
  if (FindOption(CanonicalKey(key)) != nullptr) return false;
  for (absl::string_view flink : kFlinkKeys) {
    if (flink == key) return true;
  }
  for (absl::string_view prefix : kFlinkPrefixes) {
    if (absl::StartsWith(key, prefix)) return true;
  }
  return false;
}

std::optional<absl::string_view> NearestKey(absl::string_view key) {
  // A misspelling: a few edits, fewer than a fifth of the key.
  const int limit = std::max(1, std::min(3, static_cast<int>(key.size()) / 5));
  std::optional<absl::string_view> nearest;
  int best = limit + 1;
  auto consider = [&](absl::string_view candidate) {
    const int d = EditDistance(key, candidate, limit);
    if (d < best) {
      best = d;
      nearest = candidate;
    }
  };
  for (const OptionSpec& spec : kOptions) consider(spec.key);
  for (const KeyAlias& alias : kAliases) consider(alias.alias);
  return nearest;
}

bool InWeirNamespace(absl::string_view key) {
  const absl::string_view first = key.substr(0, key.find('.'));
  for (const OptionSpec& spec : kOptions) {
    if (spec.key.substr(0, spec.key.find('.')) == first) return true;
  }
  for (const KeyAlias& alias : kAliases) {
    if (alias.alias.substr(0, alias.alias.find('.')) == first) return true;
  }
  return false;
}

}  // namespace weir::config
