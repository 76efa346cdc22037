// The JobManager's HTTP endpoint: health probes, Prometheus metrics and a
// read-only REST API on Flink's paths and field names, so that scripts and
// dashboards written for Flink's REST API read a Weir cluster too.
//
//   GET /healthz                 200 while its main loop runs; 503 when stuck
//   GET /readyz                  200 once it serves RPCs and has taken back
//                                its jobs; 503 before
//   GET /metrics                 Prometheus text format (docs/operations.md)
//   GET /config                  the version and the REST API's features
//   GET /overview                cluster totals
//   GET /taskmanagers            the registered TaskManagers
//   GET /jobs                    every job's id and state
//   GET /jobs/overview           every job, with times and task counts
//   GET /jobs/{id}               one job, its vertices and their records
//   GET /jobs/{id}/checkpoints   counts, latest and history of checkpoints
//   GET /jobs/{id}/exceptions    why the job last failed or restarted
//
// The Render* functions build the documents from the JobManager's own
// records; they are pure, and unit-tested on their own.
//
// Thread-safety: the routes call the thread-safe Dispatcher and
// ResourceManager from the HTTP worker threads.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/http/http_server.h"
#include "jobmanager/dispatcher.h"
#include "jobmanager/resource_manager.h"
#include "nlohmann/json.hpp"
#include "weir/v1/job.pb.h"

namespace weir::jobmanager::rest {

// Flink's spelling of a job state (CANCELLING with two Ls).
std::string JobStateName(v1::JobState state);

nlohmann::json RenderOverview(const std::vector<TaskManagerRecord>& taskmanagers,
                              const std::vector<v1::JobStatus>& jobs);
nlohmann::json RenderTaskManagers(const std::vector<TaskManagerRecord>& taskmanagers, absl::Time now);
nlohmann::json RenderJobs(const std::vector<v1::JobStatus>& jobs);
nlohmann::json RenderJobsOverview(const std::vector<v1::JobStatus>& jobs, absl::Time now);
nlohmann::json RenderJob(const v1::JobStatus& job, absl::Time now);
nlohmann::json RenderCheckpoints(const v1::ListCheckpointsResponse& checkpoints);
nlohmann::json RenderExceptions(const v1::JobStatus& job);

// Every metric the JobManager exports, in Prometheus text format.
std::string RenderMetrics(const std::vector<TaskManagerRecord>& taskmanagers,
                          const std::vector<v1::JobStatus>& jobs,
                          const std::map<std::string, v1::ListCheckpointsResponse>& checkpoints);

// The routes above. `not_ready` is "" once the JobManager serves as the
// leader, else why not (/readyz answers 503 with it: "starting", "standby;
// leader HOST:PORT"); `alive` is false while its membership loop is stuck.
std::vector<http::Route> Routes(const Dispatcher* dispatcher, const ResourceManager* resource_manager,
                                std::function<std::string()> not_ready, std::function<bool()> alive);

}  // namespace weir::jobmanager::rest
