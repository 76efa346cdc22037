#include "jobmanager/rest/rest_api.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/version.h"
#include "common/http/metric_families.h"

namespace weir::jobmanager::rest {
namespace {

using nlohmann::json;

constexpr v1::JobState kAllJobStates[] = {v1::CREATED,   v1::RUNNING,  v1::FAILING,  v1::FAILED,
                                          v1::CANCELING, v1::CANCELED, v1::FINISHED, v1::RESTARTING};

bool Ended(v1::JobState state) {
  return state == v1::FAILED || state == v1::CANCELED || state == v1::FINISHED;
}

int64_t NowMs(absl::Time now) { return absl::ToUnixMillis(now); }

int64_t EndMs(const v1::JobStatus& job) { return job.ended_at_unix_ms() > 0 ? job.ended_at_unix_ms() : -1; }

int64_t DurationMs(const v1::JobStatus& job, absl::Time now) {
  const int64_t end = job.ended_at_unix_ms() > 0 ? job.ended_at_unix_ms() : NowMs(now);
  return std::max<int64_t>(0, end - job.submitted_at_unix_ms());
}

// Slots offered and slots free over `taskmanagers`.
std::pair<int, int> SlotTotals(const std::vector<TaskManagerRecord>& taskmanagers) {
  int slots = 0, free = 0;
  for (const TaskManagerRecord& tm : taskmanagers) {
    slots += tm.info.slots_total();
    free += tm.free_slots();
  }
  return {slots, free};
}

// Flink's task-state names, counted per job or vertex.
std::string TaskStateName(v1::TaskState state) {
  switch (state) {
    case v1::TASK_SCHEDULED:
      return "SCHEDULED";
    case v1::TASK_DEPLOYING:
      return "DEPLOYING";
    case v1::TASK_RUNNING:
      return "RUNNING";
    case v1::TASK_FINISHED:
      return "FINISHED";
    case v1::TASK_CANCELING:
      return "CANCELING";
    case v1::TASK_CANCELED:
      return "CANCELED";
    case v1::TASK_FAILED:
      return "FAILED";
    default:
      return "CREATED";
  }
}

json TaskCounts(const std::vector<const v1::TaskStatus*>& tasks) {
  json counts = json::object();
  for (const char* name : {"CREATED", "SCHEDULED", "DEPLOYING", "RUNNING", "FINISHED", "CANCELING", "CANCELED",
                           "FAILED", "RECONCILING", "INITIALIZING"}) {
    counts[name] = 0;
  }
  for (const v1::TaskStatus* task : tasks) counts[TaskStateName(task->state())] = counts[TaskStateName(task->state())].get<int>() + 1;
  return counts;
}

std::vector<const v1::TaskStatus*> AllTasks(const v1::JobStatus& job) {
  std::vector<const v1::TaskStatus*> tasks;
  for (const v1::TaskStatus& task : job.tasks()) tasks.push_back(&task);
  return tasks;
}

// Flink's /jobs/overview spells the task counts in lower case.
json LowerCaseCounts(const json& counts) {
  json lower = json::object();
  for (const auto& [state, n] : counts.items()) lower[absl::AsciiStrToLower(state)] = n;
  return lower;
}

json JobSummary(const v1::JobStatus& job, absl::Time now) {
  json tasks = LowerCaseCounts(TaskCounts(AllTasks(job)));
  tasks["total"] = job.tasks_size();
  return json{{"jid", job.job_id()},
              {"name", job.name()},
              {"state", JobStateName(job.state())},
              {"start-time", job.submitted_at_unix_ms()},
              {"end-time", EndMs(job)},
              {"duration", DurationMs(job, now)},
              {"last-modification", job.ended_at_unix_ms() > 0 ? job.ended_at_unix_ms() : job.submitted_at_unix_ms()},
              {"tasks", tasks}};
}

json CheckpointJson(const v1::CheckpointSummary& c) {
  return json{{"id", c.checkpoint_id()},
              {"status", c.status()},
              {"is_savepoint", false},
              {"trigger_timestamp", c.trigger_time_unix_ms()},
              {"latest_ack_timestamp", c.status() == "IN_PROGRESS" ? -1 : c.trigger_time_unix_ms() + c.duration_ms()},
              {"state_size", c.size_bytes()},
              {"checkpointed_size", c.size_bytes()},
              {"end_to_end_duration", c.duration_ms()},
              {"alignment_buffered", 0},
              {"num_subtasks", c.expected_tasks()},
              {"num_acknowledged_subtasks", c.acknowledged_tasks()},
              {"checkpoint_type", "CHECKPOINT"},
              // Weir's own fields.
              {"attempt", c.attempt()},
              {"longest_alignment_ms", c.longest_alignment_ms()},
              {"longest_sync_ms", c.longest_sync_ms()},
              {"longest_async_ms", c.longest_async_ms()},
              {"longest_pre_barrier_ms", c.longest_pre_barrier_ms()},
              {"longest_start_delay_ms", c.longest_start_delay_ms()},
              {"metadata_ms", c.metadata_ms()},
              {"failure_message", c.failure_reason()},
              {"failure_timestamp", c.status() == "FAILED" ? c.trigger_time_unix_ms() + c.duration_ms() : -1}};
}

json MinMaxAvg(const std::vector<int64_t>& values) {
  if (values.empty()) return json{{"min", 0}, {"max", 0}, {"avg", 0}};
  int64_t sum = 0;
  for (int64_t v : values) sum += v;
  return json{{"min", *std::min_element(values.begin(), values.end())},
              {"max", *std::max_element(values.begin(), values.end())},
              {"avg", sum / static_cast<int64_t>(values.size())}};
}

std::string JobId(const http::Request& request) { return request.params.empty() ? "" : request.params[0]; }

http::Response JsonResponse(const json& document) {
  return http::Response{.status = 200, .content_type = "application/json", .body = document.dump()};
}

http::Response NotFound(const absl::Status& status) {
  return http::ErrorResponse(absl::IsNotFound(status) ? 404 : 500, std::string(status.message()));
}

}  // namespace

std::string JobStateName(v1::JobState state) {
  if (state == v1::CANCELING) return "CANCELLING";
  if (state == v1::JOB_STATE_UNSPECIFIED) return "INITIALIZING";
  return v1::JobState_Name(state);
}

json RenderOverview(const std::vector<TaskManagerRecord>& taskmanagers, const std::vector<v1::JobStatus>& jobs) {
  const auto [slots, free] = SlotTotals(taskmanagers);
  int running = 0, finished = 0, canceled = 0, failed = 0;
  for (const v1::JobStatus& job : jobs) {
    switch (job.state()) {
      case v1::FINISHED:
        ++finished;
        break;
      case v1::CANCELED:
        ++canceled;
        break;
      case v1::FAILED:
        ++failed;
        break;
      default:
        ++running;  // Flink counts every job that has not ended as running
    }
  }
  return json{{"taskmanagers", taskmanagers.size()},
              {"slots-total", slots},
              {"slots-available", free},
              {"jobs-running", running},
              {"jobs-finished", finished},
              {"jobs-cancelled", canceled},
              {"jobs-failed", failed},
              {"weir-version", kWeirVersion}};
}

json RenderTaskManagers(const std::vector<TaskManagerRecord>& taskmanagers, absl::Time now) {
  json list = json::array();
  for (const TaskManagerRecord& tm : taskmanagers) {
    list.push_back(json{{"id", tm.info.taskmanager_id()},
                        {"path", tm.info.address()},
                        // As Flink: despite the name, the last heartbeat's
                        // time (Unix ms); msSinceLastHeartbeat is the age.
                        {"timeSinceLastHeartbeat", absl::ToUnixMillis(tm.last_heartbeat)},
                        {"msSinceLastHeartbeat", absl::ToInt64Milliseconds(now - tm.last_heartbeat)},
                        {"slotsNumber", tm.info.slots_total()},
                        {"freeSlots", tm.free_slots()},
                        {"hostname", tm.info.hostname()},
                        {"pid", tm.info.pid()},
                        {"version", tm.info.version()},
                        {"restPort", tm.info.rest_port()},
                        {"registeredAt", absl::ToUnixMillis(tm.registered_at)}});
  }
  return json{{"taskmanagers", list}};
}

json RenderJobs(const std::vector<v1::JobStatus>& jobs) {
  json list = json::array();
  for (const v1::JobStatus& job : jobs) list.push_back(json{{"id", job.job_id()}, {"status", JobStateName(job.state())}});
  return json{{"jobs", list}};
}

json RenderJobsOverview(const std::vector<v1::JobStatus>& jobs, absl::Time now) {
  json list = json::array();
  for (const v1::JobStatus& job : jobs) list.push_back(JobSummary(job, now));
  return json{{"jobs", list}};
}

json RenderJob(const v1::JobStatus& job, absl::Time now) {
  json document = JobSummary(job, now);
  document["isStoppable"] = false;
  document["now"] = NowMs(now);
  document["status-counts"] = TaskCounts(AllTasks(job));
  document.erase("tasks");
  // Vertices as Weir runs them: one per operator chain, named after the
  // chained operators.
  std::vector<std::string> order;
  std::map<std::string, std::vector<const v1::TaskStatus*>> chains;
  for (const v1::TaskStatus& task : job.tasks()) {
    if (!chains.contains(task.name())) order.push_back(task.name());
    chains[task.name()].push_back(&task);
  }
  json vertices = json::array();
  for (const std::string& name : order) {
    const std::vector<const v1::TaskStatus*>& tasks = chains[name];
    int64_t in = 0, out = 0;
    std::string state = "FINISHED";
    for (const v1::TaskStatus* task : tasks) {
      in += task->records_in();
      out += task->records_out();
    }
    // The vertex's state: the least advanced of its subtasks'.
    json counts = TaskCounts(tasks);
    for (const char* s : {"FAILED", "CANCELING", "CANCELED", "CREATED", "SCHEDULED", "DEPLOYING", "RUNNING"}) {
      if (counts[s].get<int>() > 0) state = s;
    }
    json subtasks = json::array();
    for (const v1::TaskStatus* task : tasks) {
      subtasks.push_back(json{{"subtask", task->subtask_index()},
                              {"status", TaskStateName(task->state())},
                              {"taskmanager-id", task->taskmanager_id()},
                              {"host", task->taskmanager_address()},
                              {"metrics", json{{"read-records", task->records_in()},
                                               {"write-records", task->records_out()},
                                               {"backpressured-time-ms", task->backpressured_ms()}}},
                              {"watermark-ms", task->has_watermark_ms() ? json(task->watermark_ms()) : json()},
                              {"failure", task->error()}});
    }
    // Task ids end in "/c<chain>s<subtask>": the vertex is "c<chain>".
    std::string vertex_id = tasks.front()->task_id().substr(tasks.front()->task_id().rfind('/') + 1);
    vertex_id = vertex_id.substr(0, vertex_id.rfind('s'));
    vertices.push_back(json{{"id", vertex_id},
                            {"name", name},
                            {"parallelism", tasks.front()->parallelism()},
                            {"status", state},
                            {"tasks", counts},
                            {"metrics", json{{"read-records", in}, {"write-records", out}}},
                            {"subtasks", subtasks}});
  }
  document["vertices"] = vertices;
  // Weir's own fields.
  document["parallelism"] = job.parallelism();
  document["attempt"] = job.attempt();
  document["restarts"] = job.restarts();
  document["restored-checkpoint-id"] = job.restored_checkpoint_id();
  if (!job.waiting_for().empty()) document["waiting-for"] = job.waiting_for();
  document["checkpointing"] = job.checkpointing();
  document["artifact-sha256"] = job.artifact_sha256();
  return document;
}

json RenderCheckpoints(const v1::ListCheckpointsResponse& checkpoints) {
  int in_progress = 0;
  std::vector<int64_t> sizes, durations, alignments;
  json history = json::array();
  json latest_completed = nullptr, latest_failed = nullptr;
  for (const v1::CheckpointSummary& c : checkpoints.checkpoints()) {  // newest first
    history.push_back(CheckpointJson(c));
    if (c.status() == "IN_PROGRESS") ++in_progress;
    if (c.status() == "COMPLETED") {
      sizes.push_back(c.size_bytes());
      durations.push_back(c.duration_ms());
      alignments.push_back(c.longest_alignment_ms());
      if (latest_completed.is_null()) latest_completed = CheckpointJson(c);
    }
    if (c.status() == "FAILED" && latest_failed.is_null()) latest_failed = CheckpointJson(c);
  }
  json restored = nullptr;
  if (checkpoints.restored_checkpoint_id() > 0) {
    restored = json{{"id", checkpoints.restored_checkpoint_id()},
                    {"is_savepoint", checkpoints.restored_is_savepoint()},
                    {"restore_timestamp", checkpoints.restored_at_ms()}};
  }
  const int64_t completed = checkpoints.completed_count();
  const int64_t failed = checkpoints.failed_count();
  return json{{"counts",
               {{"restored", checkpoints.restored_count()},
                {"total", completed + failed + in_progress},
                {"in_progress", in_progress},
                {"completed", completed},
                {"failed", failed}}},
              {"summary",
               {{"state_size", MinMaxAvg(sizes)},
                {"checkpointed_size", MinMaxAvg(sizes)},
                {"end_to_end_duration", MinMaxAvg(durations)},
                {"alignment_duration", MinMaxAvg(alignments)}}},
              {"latest",
               {{"completed", latest_completed}, {"savepoint", nullptr}, {"failed", latest_failed}, {"restored", restored}}},
              {"history", history},
              {"checkpointing", checkpoints.checkpointing()}};
}

json RenderExceptions(const v1::JobStatus& job) {
  // The tasks' errors: Flink's legacy list (exception, task, location,
  // timestamp) and its exception history (exceptionName, stacktrace,
  // timestamp, taskName, location). Weir keeps no time per task error: the
  // job's end, or -1 while it runs.
  const int64_t timestamp = job.ended_at_unix_ms() > 0 ? job.ended_at_unix_ms() : -1;
  json all = json::array();
  json entries = json::array();
  for (const v1::TaskStatus& task : job.tasks()) {
    if (task.error().empty()) continue;
    const std::string name =
        absl::StrCat(task.name(), " (", task.subtask_index() + 1, "/", task.parallelism(), ")");
    all.push_back(json{{"exception", task.error()},
                       {"task", name},
                       {"location", task.taskmanager_address()},
                       {"timestamp", timestamp}});
    entries.push_back(json{{"exceptionName", "TaskFailure"},
                           {"stacktrace", task.error()},
                           {"timestamp", timestamp},
                           {"taskName", name},
                           {"location", task.taskmanager_address()},
                           {"taskManagerId", task.taskmanager_id()}});
  }
  const std::string root = !job.error().empty() ? job.error() : job.last_failure();
  json document{{"root-exception", root.empty() ? json(nullptr) : json(root)},
                {"timestamp", root.empty() ? json(nullptr) : json(timestamp)},
                {"all-exceptions", all},
                {"truncated", false},
                {"exceptionHistory", {{"entries", entries}, {"truncated", false}}},
                {"restarts", job.restarts()}};
  return document;
}

std::string RenderMetrics(const std::vector<TaskManagerRecord>& taskmanagers, const std::vector<v1::JobStatus>& jobs,
                          const std::map<std::string, v1::ListCheckpointsResponse>& checkpoints) {
  http::MetricFamilies out;
  const auto [slots, free] = SlotTotals(taskmanagers);
  out.Gauge("weir_taskmanagers", "TaskManagers registered with the JobManager.", {}, taskmanagers.size());
  out.Gauge("weir_slots", "Task slots the registered TaskManagers offer.", {}, slots);
  out.Gauge("weir_slots_free", "Task slots no job holds.", {}, free);
  std::map<v1::JobState, int> by_state;
  for (const v1::JobStatus& job : jobs) ++by_state[job.state()];
  for (v1::JobState state : kAllJobStates) {
    out.Gauge("weir_jobs", "Jobs the JobManager lists, by state (ended ones stay listed for jobstore.expiration-time).",
              {{"state", JobStateName(state)}}, by_state[state]);
  }
  for (const v1::JobStatus& job : jobs) {
    if (Ended(job.state())) continue;
    const http::MetricLabels labels = {{"job_id", job.job_id()}, {"job_name", job.name()}};
    out.Gauge("weir_job_uptime_seconds", "Time since the job was submitted.", labels,
              DurationMs(job, absl::Now()) / 1000.0);
    out.Counter("weir_job_restarts_total", "Restarts of the job after failures.", labels, job.restarts());
    auto found = checkpoints.find(job.job_id());
    if (found != checkpoints.end()) {
      const v1::ListCheckpointsResponse& c = found->second;
      out.Counter("weir_job_checkpoints_completed_total", "Checkpoints of the job that completed.", labels,
                  c.completed_count());
      out.Counter("weir_job_checkpoints_failed_total", "Checkpoints of the job that failed or expired.", labels,
                  c.failed_count());
      int in_progress = 0;
      const v1::CheckpointSummary* last = nullptr;
      for (const v1::CheckpointSummary& s : c.checkpoints()) {
        if (s.status() == "IN_PROGRESS") ++in_progress;
        if (s.status() == "COMPLETED" && last == nullptr) last = &s;
      }
      out.Gauge("weir_job_checkpoints_in_progress", "Checkpoints of the job triggered and not yet ended.", labels,
                in_progress);
      if (last != nullptr) {
        out.Gauge("weir_job_last_checkpoint_id", "Id of the job's newest completed checkpoint.", labels,
                  last->checkpoint_id());
        out.Gauge("weir_job_last_checkpoint_timestamp_seconds",
                  "When the job's newest completed checkpoint was triggered (Unix time).", labels,
                  last->trigger_time_unix_ms() / 1000.0);
        out.Gauge("weir_job_last_checkpoint_duration_seconds",
                  "Trigger to completion of the job's newest completed checkpoint.", labels,
                  last->duration_ms() / 1000.0);
        out.Gauge("weir_job_last_checkpoint_size_bytes", "Bytes the job's newest completed checkpoint wrote.", labels,
                  last->size_bytes());
        out.Gauge("weir_job_last_checkpoint_alignment_seconds",
                  "Longest barrier alignment of any task in the job's newest completed checkpoint.", labels,
                  last->longest_alignment_ms() / 1000.0);
      }
    }
    for (const v1::TaskStatus& task : job.tasks()) {
      http::MetricLabels task_labels = labels;
      task_labels.push_back({"task", task.name()});
      task_labels.push_back({"subtask", absl::StrCat(task.subtask_index())});
      out.Counter("weir_job_task_records_in_total", "Records a task took in (as last reported, about every second).",
                  task_labels, task.records_in());
      out.Counter("weir_job_task_records_out_total", "Records a task emitted (as last reported, about every second).",
                  task_labels, task.records_out());
      out.Counter("weir_job_task_backpressured_seconds_total",
                  "Time a task spent blocked on full output buffers; its rate is the fraction of time "
                  "backpressured.",
                  task_labels, task.backpressured_ms() / 1000.0);
    }
  }
  return out.Text();
}

std::vector<http::Route> Routes(const Dispatcher* dispatcher, const ResourceManager* resource_manager,
                                std::function<std::string()> not_ready, std::function<bool()> alive) {
  std::vector<http::Route> routes;
  routes.push_back({.pattern = "/healthz", .handler = http::HealthHandler(std::move(alive)), .probe = true});
  routes.push_back({.pattern = "/readyz",
                    .handler =
                        [not_ready = std::move(not_ready)](const http::Request&) {
                          const std::string reason = not_ready();
                          if (reason.empty()) return http::Response{.content_type = "text/plain", .body = "ready\n"};
                          return http::Response{.status = 503, .content_type = "text/plain", .body = reason + "\n"};
                        },
                    .probe = true});
  routes.push_back({.pattern = "/metrics", .handler = [dispatcher, resource_manager](const http::Request&) {
                      std::vector<v1::JobStatus> jobs = dispatcher->List();
                      std::map<std::string, v1::ListCheckpointsResponse> checkpoints;
                      for (const v1::JobStatus& job : jobs) {
                        if (Ended(job.state())) continue;
                        absl::StatusOr<v1::ListCheckpointsResponse> c = dispatcher->Checkpoints(job.job_id());
                        if (c.ok()) checkpoints[job.job_id()] = *std::move(c);
                      }
                      return http::Response{.content_type = http::kMetricsContentType,
                                            .body = RenderMetrics(resource_manager->List(), jobs, checkpoints)};
                    }});
  routes.push_back({.pattern = "/config", .handler = [](const http::Request&) {
                      return JsonResponse(json{{"weir-version", kWeirVersion}, {"features", {{"web-submit", false}}}});
                    }});
  routes.push_back({.pattern = "/overview", .handler = [dispatcher, resource_manager](const http::Request&) {
                      return JsonResponse(RenderOverview(resource_manager->List(), dispatcher->List()));
                    }});
  routes.push_back({.pattern = "/taskmanagers", .handler = [resource_manager](const http::Request&) {
                      return JsonResponse(RenderTaskManagers(resource_manager->List(), absl::Now()));
                    }});
  routes.push_back({.pattern = "/jobs", .handler = [dispatcher](const http::Request&) {
                      return JsonResponse(RenderJobs(dispatcher->List()));
                    }});
  routes.push_back({.pattern = "/jobs/overview", .handler = [dispatcher](const http::Request&) {
                      return JsonResponse(RenderJobsOverview(dispatcher->List(), absl::Now()));
                    }});
  routes.push_back({.pattern = "/jobs/([^/]+)", .handler = [dispatcher](const http::Request& request) {
                      absl::StatusOr<v1::JobStatus> job = dispatcher->Get(JobId(request));
                      if (!job.ok()) return NotFound(job.status());
                      return JsonResponse(RenderJob(*job, absl::Now()));
                    }});
  routes.push_back({.pattern = "/jobs/([^/]+)/checkpoints", .handler = [dispatcher](const http::Request& request) {
                      absl::StatusOr<v1::ListCheckpointsResponse> c = dispatcher->Checkpoints(JobId(request));
                      if (!c.ok()) return NotFound(c.status());
                      return JsonResponse(RenderCheckpoints(*c));
                    }});
  routes.push_back({.pattern = "/jobs/([^/]+)/exceptions", .handler = [dispatcher](const http::Request& request) {
                      absl::StatusOr<v1::JobStatus> job = dispatcher->Get(JobId(request));
                      if (!job.ok()) return NotFound(job.status());
                      return JsonResponse(RenderExceptions(*job));
                    }});
  return routes;
}

}  // namespace weir::jobmanager::rest
