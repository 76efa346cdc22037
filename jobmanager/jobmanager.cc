#include "jobmanager/jobmanager.h"

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/fs/file_system_registry.h"
#include "common/fs/local_file_system.h"
#include "common/logging/logging.h"
#include "common/config/options.h"
#include "common/etcd/etcd_settings.h"
#include "common/etcd/leader_retrieval.h"
#include "common/random_id.h"
#include "common/rpc/auth.h"
#include "common/status_macros.h"
#include "connectors/builtin.h"
#include "jobmanager/ha/etcd_leader_election.h"
#include "jobmanager/ha/ha_settings.h"
#include "jobmanager/rest/rest_api.h"

namespace weir::jobmanager {
namespace {

// The leader's address under `leader_key` in etcd, "" when none leads or
// etcd cannot be asked. Short: a standby answers its callers while it looks.
std::function<std::string()> FindLeaderIn(std::shared_ptr<etcd::EtcdClient> etcd, std::string leader_key) {
  return [etcd = std::move(etcd), leader_key = std::move(leader_key)]() -> std::string {
    absl::StatusOr<std::optional<std::string>> leader =
        etcd::ReadLeaderAddress(*etcd, leader_key, absl::Now() + absl::Seconds(1));
    return leader.ok() && leader->has_value() ? **leader : std::string();
  };
}

// The job store under an election: submissions in high-availability.storageDir
// (a local directory or s3://bucket/prefix), records in etcd.
absl::StatusOr<std::unique_ptr<FencedJobStore>> OpenFencedJobStore(const std::string& storage_dir) {
  if (fs::IsObjectStoreUri(storage_dir)) {
    // The bucket was probed at the start (JobManager::Start).
    ASSIGN_OR_RETURN(fs::ObjectStorePath location, fs::OpenObjectStorePath(storage_dir));
    return std::make_unique<FencedJobStore>(location.fs, location.path, storage_dir);
  }
  std::error_code ec;
  const std::string absolute = std::filesystem::absolute(storage_dir, ec).lexically_normal().string();
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("high-availability.storageDir ", storage_dir, " cannot be resolved: ", ec.message()));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<fs::LocalFileSystem> local, fs::LocalFileSystem::Open(absolute));
  return std::make_unique<FencedJobStore>(std::move(local), "", storage_dir);
}

}  // namespace

absl::StatusOr<std::unique_ptr<JobManager>> JobManager::Start(const config::Configuration& config) {
  namespace k = config::keys;
  std::unique_ptr<JobManager> jm(new JobManager());
  jm->log_ = logging::Get("jobmanager");
  std::string storage_dir = config.GetString(k::kHaStorageDir);
  // Object-store directories: the s3.* settings, and a bucket that is
  // missing or refuses the credentials stops the start, naming both.
  fs::ConfigureFileSystems(config);
  for (absl::string_view key : {k::kCheckpointsDir, k::kSavepointsDir, k::kHaStorageDir}) {
    const std::string dir = config.GetString(key);
    if (fs::IsObjectStoreUri(dir)) RETURN_IF_ERROR(fs::ProbeObjectStore(dir, key));
  }
  const bool elected = config.GetString(k::kHaType) == "etcd";
  int64_t leader_epoch = 0;
  if (elected) {
    // The election decides who acts: no lock, and the store refuses writes
    // until this JobManager leads, then etcd refuses them once it does not.
    ASSIGN_OR_RETURN(std::unique_ptr<FencedJobStore> store, OpenFencedJobStore(storage_dir));
    jm->fenced_store_ = store.get();
    jm->store_ = std::move(store);
    jm->cluster_id_ = config.GetString(k::kHaClusterId);
    ASSIGN_OR_RETURN(etcd::EtcdClientOptions etcd_options, etcd::EtcdClientOptionsFromConfig(config));
    ASSIGN_OR_RETURN(std::unique_ptr<etcd::EtcdClient> client, etcd::EtcdClient::Create(std::move(etcd_options)));
    jm->etcd_ = std::move(client);
    // Before it serves: a standby names the leader from its first call on.
    jm->gate_ = std::make_unique<LeadershipGate>();
    jm->gate_->Configure("", FindLeaderIn(jm->etcd_, etcd::LeaderKey(jm->cluster_id_)));
  } else {
    // First: a second JobManager on this directory stops here.
    ASSIGN_OR_RETURN(std::unique_ptr<DirectoryJobStore> store, DirectoryJobStore::Open(storage_dir));
    ASSIGN_OR_RETURN(leader_epoch, store->TakeLeaderEpoch());
    jm->store_ = std::move(store);
  }
  jm->resource_manager_ = std::make_unique<ResourceManager>(config.GetDuration(k::kHeartbeatTimeout),
                                                            RandomId("jm-"), /*clock=*/nullptr, leader_epoch);
  if (elected) jm->resource_manager_->StepDown("a standby until elected");
  jm->resource_manager_service_ = std::make_unique<ResourceManagerServiceImpl>(
      jm->resource_manager_.get(), config.GetDuration(k::kHeartbeatInterval), jm->gate_.get());
  jm->cluster_service_ = std::make_unique<ClusterServiceImpl>(jm->resource_manager_.get(), jm->gate_.get());
  // Uploads to an object store are staged on local disk first.
  const std::vector<std::string> tmp_dirs = config::SplitPathList(config.GetString(k::kIoTmpDirs));
  const std::string staging_dir =
      absl::StrCat(tmp_dirs.empty() ? std::string("/tmp") : tmp_dirs.front(), "/weir-jobmanager-artifacts");
  ASSIGN_OR_RETURN(jm->artifacts_, ArtifactStore::Open(storage_dir, config.GetMemorySize(k::kArtifactMaxSize),
                                                       config.GetMemorySize(k::kArtifactStoreMaxSize), staging_dir));
  DispatcherOptions dispatcher_options;
  dispatcher_options.default_parallelism = static_cast<int>(config.GetInt(k::kParallelismDefault));
  dispatcher_options.max_parallelism = static_cast<int>(config.GetInt(k::kMaxParallelism));
  dispatcher_options.cancel_timeout = config.GetDuration(k::kCancelTimeout);
  dispatcher_options.cluster_config = config;
  dispatcher_options.store = jm->store_.get();
  dispatcher_options.savepoints_dir = config.GetString(k::kSavepointsDir);
  if (dispatcher_options.savepoints_dir.empty()) dispatcher_options.savepoints_dir = storage_dir + "/savepoints";
  dispatcher_options.checkpoints_dir = config.GetString(k::kCheckpointsDir);
  if (dispatcher_options.checkpoints_dir.empty()) dispatcher_options.checkpoints_dir = storage_dir + "/checkpoints";
  dispatcher_options.ended_job_expiration = config.GetDuration(k::kJobStoreExpirationTime);
  dispatcher_options.max_ended_jobs = static_cast<int>(config.GetInt(k::kJobStoreMaxCapacity));
  dispatcher_options.liveness = &jm->liveness_;
  if (elected) {
    // The election is made later (StartElection), and before its first
    // Granted; no checkpoint is taken before that.
    dispatcher_options.leading = [raw = jm.get()] {
      return raw->election_ != nullptr && absl::Now() < raw->election_->LeadingUntil();
    };
  }
  dispatcher_options.artifact_retention = config.GetDuration(k::kArtifactRetention);
  dispatcher_options.connectors =
      std::make_shared<const connectors::ConnectorRegistry>(connectors::BuiltinConnectors(config));
  jm->dispatcher_ =
      std::make_unique<Dispatcher>(dispatcher_options, jm->resource_manager_.get(), jm->artifacts_.get());
  jm->job_service_ = std::make_unique<JobServiceImpl>(jm->dispatcher_.get(), jm->gate_.get());
  jm->artifact_service_ = std::make_unique<ArtifactServiceImpl>(jm->artifacts_.get(), jm->gate_.get());
  jm->job_master_service_ = std::make_unique<JobMasterServiceImpl>(jm->dispatcher_.get(), jm->gate_.get());

  rpc::ServerOptions options;
  options.bind_host = config.GetString(k::kJobManagerBindHost);
  if (options.bind_host.empty()) options.bind_host = config.GetString(k::kJobManagerRpcAddress);
  options.port = static_cast<int>(config.GetInt(k::kJobManagerRpcPort));
  RETURN_IF_ERROR(rpc::CheckExposure(
      options.bind_host, std::string(config.GetString(k::kJobManagerBindHost).empty() ? k::kJobManagerRpcAddress
                                                                                       : k::kJobManagerBindHost)));
  options.services = {jm->resource_manager_service_.get(), jm->cluster_service_.get(), jm->job_service_.get(),
                      jm->artifact_service_.get(), jm->job_master_service_.get()};
  // Small messages only, a bound on what gRPC buffers in all, and on the
  // calls one connection may hold open (docs/operations.md, "Bounds on the
  // gRPC endpoints"). A caller without the token is refused on its
  // metadata, before its message.
  options.max_receive_message_bytes = rpc::kControlPlaneMaxMessageBytes;
  options.memory_quota_bytes = config.GetMemorySize(k::kJobManagerRpcMemoryQuota);
  options.max_concurrent_streams = static_cast<int>(config.GetInt(k::kJobManagerRpcMaxConcurrentStreams));
  auto started = rpc::StartServer(options);
  if (!started.ok()) return Annotate(started.status(), "starting the JobManager's RPC server");
  jm->server_ = std::move(started->server);
  jm->port_ = started->port;
  jm->resource_manager_->Start();
  jm->log_->info("JobManager {} listening on {} ({}, storage {}, heartbeat interval {}, timeout {}; gRPC bounds: "
                 "messages {} B, memory quota {} B, {} streams per connection, token checked {})",
                 jm->session_id(), rpc::JoinHostPort(options.bind_host, jm->port_),
                 elected ? absl::StrCat("standby of cluster ", jm->cluster_id_, " until elected")
                         : absl::StrCat("leader epoch ", leader_epoch),
                 storage_dir, config::FormatDuration(config.GetDuration(k::kHeartbeatInterval)),
                 config::FormatDuration(config.GetDuration(k::kHeartbeatTimeout)),
                 options.max_receive_message_bytes, options.memory_quota_bytes, options.max_concurrent_streams,
                 rpc::AuthEnabled() ? "on every call's metadata" : "never (no token configured)");
  http::HttpServerOptions http_options;
  http_options.name = "JobManager REST";
  http_options.bind_host = config.GetString(k::kRestAddress);
  http_options.bind_key = std::string(k::kRestAddress);
  if (http_options.bind_host.empty()) {
    http_options.bind_host = options.bind_host;
    http_options.bind_key = "the address the JobManager's RPCs bind";
  }
  http_options.port = static_cast<int>(config.GetInt(k::kRestPort));
  RETURN_IF_ERROR(http::TlsFromConfig(config, &http_options));
  http_options.routes = rest::Routes(
      jm->dispatcher_.get(), jm->resource_manager_.get(),
      [raw = jm.get()]() -> std::string {
        if (raw->ready_.load()) return "";
        if (raw->gate_ != nullptr) {
          std::string standby = raw->gate_->NotReadyReason();
          if (!standby.empty()) return standby;
        }
        return "starting";
      },
      [raw = jm.get()] { return raw->Alive(); });
  auto http = http::HttpServer::Start(std::move(http_options));
  if (!http.ok()) return Annotate(http.status(), "starting the JobManager's HTTP endpoint (rest.port)");
  jm->http_ = *std::move(http);
  if (elected) {
    // What TaskManagers and clients are told to call: the address they
    // reach this JobManager at, with the port it serves on.
    RETURN_IF_ERROR(
        jm->StartElection(config, rpc::JoinHostPort(config.GetString(k::kJobManagerRpcAddress), jm->port_)));
    return jm;
  }
  // Serving first: the recovered jobs wait for their TaskManagers to
  // re-register.
  jm->dispatcher_->Recover();
  jm->ready_ = true;
  return jm;
}

absl::Status JobManager::StartElection(const config::Configuration& config, const std::string& address) {
  ASSIGN_OR_RETURN(ha::EtcdHaSettings settings, ha::EtcdHaSettingsFromConfig(config, address));
  ASSIGN_OR_RETURN(std::unique_ptr<ha::EtcdLeaderElection> election,
                   ha::EtcdLeaderElection::Create(etcd_, settings.election));
  gate_->Configure(address, FindLeaderIn(etcd_, election->leader_key()));
  fenced_store_->SetElection(election.get());
  election_ = std::move(election);
  log_->info("JobManager {} campaigns for the leadership of cluster {} as {} (etcd {}, lease {})", session_id(),
             cluster_id_, address, absl::StrJoin(settings.client.endpoints, ","),
             absl::FormatDuration(settings.election.lease_ttl));
  return election_->Start(this);
}

void JobManager::Granted(ha::Epoch epoch) {
  log_->info("JobManager {} leads cluster {}, leader epoch {}: recovering the stored jobs", session_id(),
             cluster_id_, epoch);
  // TaskManagers may register (and hear the new epoch) from now on; the
  // recovered jobs wait for their slots.
  resource_manager_->Lead(epoch);
  store_->Unfence(epoch);
  dispatcher_->Recover();
  gate_->SetLeading(true);
  ready_ = true;
  log_->info("JobManager {} is the leader of cluster {} (epoch {}) and ready", session_id(), cluster_id_, epoch);
}

void JobManager::Revoked() {
  // In this order: nothing new comes in, nothing is written, then the job
  // masters stop (they can no longer write), then the TaskManagers go.
  ready_ = false;
  gate_->SetLeading(false);
  log_->warn("JobManager {} lost the leadership of cluster {}: stopping every job master; the jobs stay in the "
             "store for the next leader",
             session_id(), cluster_id_);
  store_->Fence();
  dispatcher_->StepDown();
  resource_manager_->StepDown("leadership lost");
  log_->info("JobManager {} is a standby of cluster {} again", session_id(), cluster_id_);
}

JobManager::~JobManager() { Shutdown(); }

bool JobManager::Alive() const {
  const absl::Time now = absl::Now();
  std::vector<std::string> stuck = liveness_.Stuck(now, kStuckAfter);
  if (const absl::Duration silent = now - resource_manager_->last_expiry_check(); silent >= kStuckAfter) {
    stuck.push_back(absl::StrCat("membership loop (", absl::ToInt64Seconds(silent), " s)"));
  }
  if (const absl::Duration held = dispatcher_->LockHeldFor(); held >= kStuckAfter) {
    stuck.push_back(absl::StrCat("dispatcher lock (held ", absl::ToInt64Seconds(held), " s)"));
  }
  std::string text = absl::StrJoin(stuck, ", ");
  absl::MutexLock lock(&alive_mu_);
  if (text != last_stuck_) {
    if (stuck.empty()) {
      log_->info("JobManager {}: every loop comes round again", session_id());
    } else {
      log_->error("JobManager {}: not alive (the watchdog stops being fed; /healthz answers 503): stuck for {} or "
                  "more: {}",
                  session_id(), absl::FormatDuration(kStuckAfter), text);
    }
    last_stuck_ = std::move(text);
  }
  return stuck.empty();
}

void JobManager::Shutdown() {
  // A JobManager that failed to start has nothing to shut down.
  if (shut_down_ || server_ == nullptr) return;
  shut_down_ = true;
  log_->info("JobManager {} shutting down", session_id());
  ready_ = false;
  // A leader steps down first (Revoked: its jobs stay in the store), and
  // tells etcd, so that a standby takes over without waiting for the lease.
  if (election_ != nullptr) election_->Stop();
  if (http_ != nullptr) http_->Stop();
  // Closing the membership sessions first lets the server drain at once.
  resource_manager_->Stop();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  dispatcher_.reset();
  log_->info("JobManager {} stopped", session_id());
}

}  // namespace weir::jobmanager
