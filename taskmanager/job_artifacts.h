// JobArtifacts: the TaskManager's local copies of job binaries and the jobs
// loaded from them.
//
// A binary is downloaded from a JobManager by its SHA-256 (every JobManager
// of the cluster serves every stored binary), verified, and kept under
// <io.tmp.dirs>/weir-<taskmanager id>/artifacts/. A download goes to the
// JobManager the ArtifactServerFinder names at each try: the leader, with
// high-availability.type etcd. One that fails on the way (the JobManager
// died, the connection broke) is tried again from the start, on the
// JobManager named then, with backoff, for up to 5 minutes (a new leader
// is elected and found within seconds). Each job gets
// its own copy of the file and is loaded (dlopen) once, however many of its
// tasks run here, so two jobs from one binary share no static state. The
// rebuilt graph must equal the one the JobManager scheduled.
//
// Nothing there is trusted for being there: the directories are created
// 0700 and must belong to this process's user (else a clear error), a
// cached binary is used only if it still hashes to its name, downloads go
// to files created new (O_EXCL|O_NOFOLLOW) and stop at the size limit, and
// the per-job copy that is loaded is hashed again first.
//
// Thread-safety: thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "jobgraph/job_library.h"
#include "taskmanager/cancellation.h"
#include "weir/v1/job.grpc.pb.h"

namespace weir::taskmanager {

// How a task gets its job's code: JobArtifacts in a TaskManager, a fake in
// in-process tests.
class JobLoader {
 public:
  virtual ~JobLoader() = default;
  // The job `job_id` loaded from `sha256` with `args`; its graph must have
  // the fingerprint `expected_graph_sha256` (jobgraph::GraphFingerprint).
  // Every successful Acquire is matched by one Release once the caller no
  // longer runs any of the job's code. `cancel` (may be null): when it
  // fires, a download or a wait for another caller's load ends with
  // kCancelled.
  virtual absl::StatusOr<std::shared_ptr<jobgraph::LoadedJob>> Acquire(const std::string& job_id,
                                                                       const std::string& sha256,
                                                                       const std::vector<std::string>& args,
                                                                       const std::string& expected_graph_sha256,
                                                                       Cancellation* cancel) = 0;
  virtual void Release(const std::string& job_id) = 0;
};

// The JobManager a download asks, and its address for messages.
struct ArtifactServer {
  std::string address;
  std::shared_ptr<v1::ArtifactService::Stub> stub;
};
// Called before every try of a download; must be thread-safe.
using ArtifactServerFinder = std::function<ArtifactServer()>;

class JobArtifacts final : public JobLoader {
 public:
  // `max_bytes`: the largest binary accepted (jobmanager.artifact.max-size);
  // tries start until `retry_for` after the first.
  JobArtifacts(std::string dir, ArtifactServerFinder find_server, int64_t max_bytes,
               absl::Duration retry_for = absl::Minutes(5));
  // Always the one JobManager `jobmanager`, one try (tests).
  JobArtifacts(std::string dir, std::shared_ptr<v1::ArtifactService::Stub> jobmanager);
  ~JobArtifacts() override;

  // The job `job_id` loaded from `sha256` with `args`; loads it on first use.
  // Every successful Acquire must be matched by a Release once the caller
  // (a task) no longer runs any of the job's code. Loading one job does not
  // hold up the others. A cancelled caller stops downloading (the gRPC call
  // is cancelled) or stops waiting for another caller's load of the same
  // job, and gets kCancelled; the job's build function, once running, is
  // not interrupted (the TaskManager's cancellation watchdog covers it).
  absl::StatusOr<std::shared_ptr<jobgraph::LoadedJob>> Acquire(const std::string& job_id, const std::string& sha256,
                                                               const std::vector<std::string>& args,
                                                               const std::string& expected_graph_sha256,
                                                               Cancellation* cancel) override
      ABSL_LOCKS_EXCLUDED(mu_);

  // Drops one reference; the job is forgotten (and unloaded once the last
  // shared_ptr goes) when none is left.
  void Release(const std::string& job_id) override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    absl::Mutex mu;
    std::shared_ptr<jobgraph::LoadedJob> job ABSL_GUARDED_BY(mu);
    bool loading ABSL_GUARDED_BY(mu) = false;  // a caller runs Load
    int refs = 0;  // guarded by JobArtifacts::mu_
  };

  absl::StatusOr<std::shared_ptr<jobgraph::LoadedJob>> Load(const std::string& job_id, const std::string& sha256,
                                                            const std::vector<std::string>& args,
                                                            const std::string& expected_graph_sha256,
                                                            Cancellation* cancel);
  absl::StatusOr<std::string> Fetch(const std::string& sha256, const std::string& job_id, Cancellation* cancel);
  // One try: the whole binary from `server` into a new file `temp`.
  absl::Status Download(const ArtifactServer& server, const std::string& sha256, const std::string& temp,
                        Cancellation* cancel);

  const std::string dir_;
  const ArtifactServerFinder find_server_;
  const int64_t max_bytes_;
  const absl::Duration retry_for_;
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Entry>> jobs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weir::taskmanager
