#include "client/job_commands.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "common/crypto/sha256.h"
#include "common/rpc/rpc.h"
#include "client/topic_check.h"
#include "jobgraph/graph_spec.h"
#include "jobgraph/job_library.h"
#include "nlohmann/json.hpp"
#include "weir/operator.h"
#include "weir/v1/job.grpc.pb.h"

namespace weir::client {
namespace {

// `weir submit -s PATH`: a relative path is the user's, from where they run
// weir, as for any command-line tool, so it is made absolute when it names
// something here. A path that names nothing here (a savepoint's name alone,
// "savepoint-<job>-<random>") goes as it is: the JobManager looks it up
// under state.savepoints.dir, and state.checkpoints.dir. Either way the
// JobManager takes only paths inside those two.
std::string SavepointPathFromHere(const std::string& path) {
  if (path.empty() || path[0] == '/' || path.find("://") != std::string::npos) return path;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return path;
  const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  return ec ? path : absolute.lexically_normal().string();
}

std::string StateName(v1::JobState s) { return v1::JobState_Name(s); }
std::string StateName(v1::TaskState s) {
  std::string name = v1::TaskState_Name(s);
  return name.rfind("TASK_", 0) == 0 ? name.substr(5) : name;
}

// A task's event time for the status table: "-" before any watermark,
// "end" once its input ended event time, else UTC to the millisecond.
std::string WatermarkText(const v1::TaskStatus& t) {
  if (!t.has_watermark_ms()) return "-";
  if (t.watermark_ms() == kMaxWatermark) return "end";
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(t.watermark_ms()), absl::UTCTimeZone());
}

nlohmann::json JobJson(const v1::JobStatus& job) {
  nlohmann::json tasks = nlohmann::json::array();
  for (const v1::TaskStatus& t : job.tasks()) {
    tasks.push_back({{"task_id", t.task_id()},
                     {"name", t.name()},
                     {"subtask", t.subtask_index()},
                     {"parallelism", t.parallelism()},
                     {"taskmanager_id", t.taskmanager_id()},
                     {"taskmanager_address", t.taskmanager_address()},
                     {"state", StateName(t.state())},
                     {"records_in", t.records_in()},
                     {"records_out", t.records_out()},
                     {"watermark_ms", t.has_watermark_ms() ? nlohmann::json(t.watermark_ms()) : nlohmann::json()},
                     {"error", t.error()}});
  }
  return {{"job_id", job.job_id()},
          {"name", job.name()},
          {"state", StateName(job.state())},
          {"error", job.error()},
          {"parallelism", job.parallelism()},
          {"submitted_at_unix_ms", job.submitted_at_unix_ms()},
          {"ended_at_unix_ms", job.ended_at_unix_ms()},
          {"artifact_sha256", job.artifact_sha256()},
          {"attempt", job.attempt()},
          {"restarts", job.restarts()},
          {"restored_checkpoint_id", job.restored_checkpoint_id()},
          {"last_failure", job.last_failure()},
          {"waiting_for", job.waiting_for()},
          {"checkpointing", job.checkpointing()},
          {"tasks", tasks}};
}

std::unique_ptr<v1::JobService::Stub> JobStub(const Options& options) {
  return v1::JobService::NewStub(JobManagerChannel(options));
}

}  // namespace

int RunSubmit(const Options& options, std::ostream& out, std::ostream& err) {
  std::string binary;
  int parallelism = 0;
  v1::SubmitJobRequest request;
  const auto& args = options.command_args;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      for (size_t j = i + 1; j < args.size(); ++j) request.add_args(args[j]);
      break;
    }
    if (a == "-p" || a == "--parallelism") {
      if (i + 1 >= args.size() || !absl::SimpleAtoi(args[i + 1], &parallelism) || parallelism < 1) {
        return Fail(err, absl::StrCat(a, " needs a positive number"), 2);
      }
      ++i;
    } else if (a == "-s" || a == "--from-savepoint") {
      if (i + 1 >= args.size() || args[i + 1].empty()) return Fail(err, absl::StrCat(a, " needs a savepoint path"), 2);
      request.set_savepoint_path(SavepointPathFromHere(args[++i]));
    } else if (a == "--allow-non-restored-state") {
      request.set_allow_non_restored_state(true);
    } else if (a.rfind("-D", 0) == 0) {
      std::string kv = a.size() > 2 ? a.substr(2) : (i + 1 < args.size() ? args[++i] : "");
      size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) return Fail(err, absl::StrCat("bad '-D", kv, "': expected -Dkey=value"), 2);
      (*request.mutable_config())[kv.substr(0, eq)] = kv.substr(eq + 1);
    } else if (!a.empty() && a[0] == '-') {
      return Fail(err, absl::StrCat("unknown submit option '", a, "' (job arguments go after --)"), 2);
    } else if (binary.empty()) {
      binary = a;
    } else {
      return Fail(err, absl::StrCat("unexpected argument '", a, "' (job arguments go after --)"), 2);
    }
  }
  if (binary.empty()) return Fail(err, "submit needs a job binary: weir submit JOB_BINARY [-p N] [-- ARGS]", 2);
  // -Dparallelism.default=N is the client's: the job's parallelism unless -p
  // gives one (the JobManager's own default applies when neither does).
  if (auto it = request.config().find("parallelism.default"); it != request.config().end()) {
    int value = 0;
    if (!absl::SimpleAtoi(it->second, &value) || value < 1) {
      return Fail(err, absl::StrCat("-Dparallelism.default is '", it->second, "'; expected a positive number"), 2);
    }
    if (parallelism == 0) parallelism = value;
    request.mutable_config()->erase("parallelism.default");
  }

  // Build the graph here, so that a bad binary or bad arguments fail before
  // anything reaches the cluster.
  // A path without a slash would make dlopen search the library path, not
  // the current directory: load what the shell named.
  std::error_code absolute_error;
  const std::string binary_path = std::filesystem::absolute(binary, absolute_error).string();
  if (absolute_error) return Fail(err, absl::StrCat("cannot resolve ", binary, ": ", absolute_error.message()));
  auto job = jobgraph::LoadJob(binary_path, {request.args().begin(), request.args().end()});
  if (!job.ok()) return Fail(err, std::string(job.status().message()));
  *request.mutable_graph() = jobgraph::ToSpec((*job)->graph);
  // Configuration from the job's code, where -D did not set the key.
  for (const auto& [key, value] : (*job)->graph.config) request.mutable_config()->insert({key, value});
  absl::Status valid = jobgraph::ValidateGraph(request.graph(), 32768);
  if (!valid.ok()) return Fail(err, absl::StrCat("invalid job graph: ", valid.message()));
  // A topic that does not exist fails here, naming it, not in the job.
  if (absl::Status topics = CheckKafkaTopics((*job)->graph, err); !topics.ok()) {
    return Fail(err, std::string(topics.message()));
  }
  request.set_parallelism(parallelism);

  auto channel = JobManagerChannel(options);
  {
    auto artifacts = v1::ArtifactService::NewStub(channel);
    grpc::ClientContext context;
    SetDeadline(&context, std::chrono::seconds(300));
    v1::UploadArtifactResponse uploaded;
    // The JobManager stores the binary only if it arrives whole and hashes
    // to what is announced here.
    absl::StatusOr<std::string> sha256 = crypto::Sha256OfFile(binary);
    if (!sha256.ok()) return Fail(err, std::string(sha256.status().message()));
    std::error_code size_error;
    const auto size = std::filesystem::file_size(binary, size_error);
    if (size_error) return Fail(err, absl::StrCat("cannot read ", binary, ": ", size_error.message()));
    auto writer = artifacts->Upload(&context, &uploaded);
    std::ifstream in(binary, std::ios::binary);
    std::string buf(1 << 20, '\0');
    bool first = true;
    while (in.read(buf.data(), static_cast<std::streamsize>(buf.size())) || in.gcount() > 0) {
      v1::ArtifactChunk chunk;
      chunk.set_data(buf.data(), static_cast<size_t>(in.gcount()));
      if (first) {
        chunk.set_expected_sha256(*sha256);
        chunk.set_expected_size(static_cast<int64_t>(size));
        first = false;
      }
      if (!writer->Write(chunk)) break;
    }
    writer->WritesDone();
    grpc::Status status = writer->Finish();
    if (!status.ok()) return Fail(err, absl::StrCat("uploading ", binary, ": ", DescribeRpcError(options, status)));
    request.set_artifact_sha256(uploaded.sha256());
  }
  grpc::ClientContext context;
  SetDeadline(&context, std::chrono::seconds(60));
  v1::SubmitJobResponse response;
  grpc::Status status = v1::JobService::NewStub(channel)->Submit(&context, request, &response);
  if (!status.ok()) return Fail(err, absl::StrCat("submission rejected: ", DescribeRpcError(options, status)));
  if (options.json) {
    nlohmann::json notices = nlohmann::json::array();
    for (const std::string& notice : response.notices()) notices.push_back(notice);
    out << nlohmann::json{{"job_id", response.job_id()}, {"notices", notices}}.dump() << "\n";
  } else {
    // The job id alone on stdout (scripts read it); what to know on stderr.
    for (const std::string& notice : response.notices()) err << "weir submit: " << notice << "\n";
    out << response.job_id() << "\n";
  }
  return 0;
}

int RunList(const Options& options, std::ostream& out, std::ostream& err) {
  // Flink's `list -r` (running: every job not ended) and `-a` (all, the
  // default here); anything else is refused rather than ignored.
  bool running_only = false;
  for (const std::string& arg : options.command_args) {
    if (arg == "-r" || arg == "--running") {
      running_only = true;
    } else if (arg == "-a" || arg == "--all") {
      running_only = false;
    } else {
      return Fail(err, absl::StrCat("list: unknown argument '", arg,
                                    "'; usage: weir list [-r|--running | -a|--all]"), 2);
    }
  }
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::ListJobsResponse response;
  grpc::Status status = JobStub(options)->List(&context, v1::ListJobsRequest(), &response);
  if (!status.ok()) return Fail(err, DescribeRpcError(options, status));
  if (running_only) {
    auto* jobs = response.mutable_jobs();
    jobs->erase(std::remove_if(jobs->begin(), jobs->end(),
                               [](const v1::JobStatus& job) {
                                 return job.state() == v1::FINISHED || job.state() == v1::CANCELED ||
                                        job.state() == v1::FAILED;
                               }),
                jobs->end());
  }
  if (options.json) {
    nlohmann::json jobs = nlohmann::json::array();
    for (const v1::JobStatus& job : response.jobs()) {
      nlohmann::json j = JobJson(job);
      j.erase("tasks");
      jobs.push_back(j);
    }
    out << nlohmann::json{{"jobs", jobs}}.dump(2) << "\n";
    return 0;
  }
  out << absl::StrFormat("%-18s %-10s %-5s %s\n", "JOB ID", "STATE", "TASKS", "NAME");
  for (const v1::JobStatus& job : response.jobs()) {
    out << absl::StrFormat("%-18s %-10s %-5d %s\n", job.job_id(), StateName(job.state()), job.tasks_size(), job.name());
  }
  return 0;
}

int RunStatus(const Options& options, std::ostream& out, std::ostream& err) {
  if (options.command_args.size() != 1) return Fail(err, "usage: weir status JOB_ID", 2);
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::GetJobRequest request;
  request.set_job_id(options.command_args[0]);
  v1::JobStatus job;
  grpc::Status status = JobStub(options)->Get(&context, request, &job);
  if (!status.ok()) return Fail(err, DescribeRpcError(options, status));
  if (options.json) {
    out << JobJson(job).dump(2) << "\n";
    return 0;
  }
  out << absl::StrFormat("job %s '%s': %s\n", job.job_id(), job.name(), StateName(job.state()));
  if (!job.error().empty()) out << "error: " << job.error() << "\n";
  if (job.restarts() > 0 || job.restored_checkpoint_id() > 0) {
    out << absl::StrFormat("attempt %d, %d restarts, restored from %s\n", job.attempt(), job.restarts(),
                           job.restored_checkpoint_id() > 0 ? absl::StrCat("checkpoint ", job.restored_checkpoint_id())
                                                            : std::string("no checkpoint"));
  }
  if (!job.last_failure().empty() && job.error().empty()) out << "last failure: " << job.last_failure() << "\n";
  if (!job.waiting_for().empty()) out << "waiting for " << job.waiting_for() << "\n";
  out << absl::StrFormat("%-12s %-40s %-9s %-14s %12s %12s %s\n", "TASK", "NAME", "STATE", "TASKMANAGER",
                         "RECORDS IN", "RECORDS OUT", "WATERMARK");
  for (const v1::TaskStatus& t : job.tasks()) {
    std::string short_id = t.task_id().substr(t.task_id().rfind('/') + 1);
    out << absl::StrFormat("%-12s %-40s %-9s %-14s %12d %12d %s\n", short_id,
                           absl::StrCat(t.name(), " (", t.subtask_index() + 1, "/", t.parallelism(), ")"),
                           StateName(t.state()), t.taskmanager_id(), t.records_in(), t.records_out(),
                           WatermarkText(t));
    if (!t.error().empty()) out << "  error: " << t.error() << "\n";
  }
  return 0;
}

int RunSavepoint(const Options& options, std::ostream& out, std::ostream& err) {
  if (options.command_args.empty() || options.command_args.size() > 2) {
    return Fail(err, "usage: weir savepoint JOB_ID [DIRECTORY]", 2);
  }
  grpc::ClientContext context;
  // A savepoint is a checkpoint plus a copy: it may take a while.
  SetDeadline(&context, std::chrono::seconds(15 * 60));
  v1::TriggerSavepointRequest request;
  request.set_job_id(options.command_args[0]);
  if (options.command_args.size() == 2) request.set_target_directory(options.command_args[1]);
  v1::TriggerSavepointResponse response;
  grpc::Status status = JobStub(options)->TriggerSavepoint(&context, request, &response);
  if (!status.ok()) return Fail(err, absl::StrCat("savepoint failed: ", DescribeRpcError(options, status)));
  if (options.json) {
    out << nlohmann::json{{"savepoint_path", response.savepoint_path()}}.dump() << "\n";
  } else {
    out << response.savepoint_path() << "\n";
  }
  return 0;
}

int RunStop(const Options& options, std::ostream& out, std::ostream& err) {
  constexpr char kStopUsage[] = "usage: weir stop JOB_ID [--savepoint-path DIRECTORY]";
  std::string job_id;
  std::string directory;
  for (size_t i = 0; i < options.command_args.size(); ++i) {
    const std::string& arg = options.command_args[i];
    if (arg == "--savepoint-path" && i + 1 < options.command_args.size()) {
      directory = options.command_args[++i];
    } else if (arg.rfind("--savepoint-path=", 0) == 0) {
      directory = arg.substr(strlen("--savepoint-path="));
    } else if (job_id.empty() && !arg.empty() && arg[0] != '-') {
      job_id = arg;
    } else {
      return Fail(err, absl::StrCat("unexpected argument '", arg, "'\n", kStopUsage), 2);
    }
  }
  if (job_id.empty()) return Fail(err, kStopUsage, 2);
  grpc::ClientContext context;
  // A savepoint, then the sinks' commits and the end of every task.
  SetDeadline(&context, std::chrono::seconds(15 * 60));
  v1::TriggerSavepointRequest request;
  request.set_job_id(job_id);
  request.set_target_directory(directory);
  v1::TriggerSavepointResponse response;
  grpc::Status status = JobStub(options)->StopJob(&context, request, &response);
  if (!status.ok()) return Fail(err, absl::StrCat("stop failed: ", DescribeRpcError(options, status)));
  if (options.json) {
    out << nlohmann::json{{"savepoint_path", response.savepoint_path()}}.dump() << "\n";
  } else {
    out << "Job " << job_id << " stopped with savepoint " << response.savepoint_path() << "\n";
  }
  return 0;
}

int RunCancel(const Options& options, std::ostream& out, std::ostream& err) {
  if (options.command_args.size() != 1) return Fail(err, "usage: weir cancel JOB_ID", 2);
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::CancelJobRequest request;
  request.set_job_id(options.command_args[0]);
  v1::CancelJobResponse response;
  grpc::Status status = JobStub(options)->Cancel(&context, request, &response);
  if (!status.ok()) return Fail(err, DescribeRpcError(options, status));
  if (options.json) {
    out << nlohmann::json{{"job_id", request.job_id()}, {"canceling", true}}.dump() << "\n";
  } else {
    out << "canceling job " << request.job_id() << "\n";
  }
  return 0;
}

int RunCheckpoints(const Options& options, std::ostream& out, std::ostream& err) {
  if (options.command_args.size() != 1) return Fail(err, "usage: weir checkpoints JOB_ID", 2);
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::GetJobRequest request;
  request.set_job_id(options.command_args[0]);
  v1::ListCheckpointsResponse response;
  grpc::Status status = JobStub(options)->ListCheckpoints(&context, request, &response);
  if (!status.ok()) return Fail(err, DescribeRpcError(options, status));
  if (options.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const v1::CheckpointSummary& c : response.checkpoints()) {
      list.push_back({{"id", c.checkpoint_id()},
                      {"status", c.status()},
                      {"attempt", c.attempt()},
                      {"trigger_time_unix_ms", c.trigger_time_unix_ms()},
                      {"duration_ms", c.duration_ms()},
                      {"size_bytes", c.size_bytes()},
                      {"longest_alignment_ms", c.longest_alignment_ms()},
                      {"longest_sync_ms", c.longest_sync_ms()},
                      {"longest_async_ms", c.longest_async_ms()},
                      {"longest_pre_barrier_ms", c.longest_pre_barrier_ms()},
                      {"longest_start_delay_ms", c.longest_start_delay_ms()},
                      {"metadata_ms", c.metadata_ms()},
                      {"acknowledged_tasks", c.acknowledged_tasks()},
                      {"expected_tasks", c.expected_tasks()},
                      {"failure_reason", c.failure_reason()},
                      {"restored", c.checkpoint_id() == response.restored_checkpoint_id()}});
    }
    out << nlohmann::json{{"job_id", request.job_id()},
                          {"checkpointing", response.checkpointing()},
                          {"completed", response.completed_count()},
                          {"failed", response.failed_count()},
                          {"restored_checkpoint_id", response.restored_checkpoint_id()},
                          {"checkpoints", list}}
               .dump(2)
        << "\n";
    return 0;
  }
  if (!response.checkpointing()) {
    out << "job " << request.job_id() << " runs without checkpoints (execution.checkpointing.interval is 0)\n";
    return 0;
  }
  out << absl::StrFormat("job %s: %d completed, %d failed checkpoints; restored from %s\n", request.job_id(),
                         response.completed_count(), response.failed_count(),
                         response.restored_checkpoint_id() > 0
                             ? absl::StrCat("checkpoint ", response.restored_checkpoint_id())
                             : std::string("none"));
  out << absl::StrFormat("%-8s %-11s %-24s %10s %12s %10s %s\n", "ID", "STATUS", "TRIGGERED (UTC)", "DURATION",
                         "SIZE", "ALIGNMENT", "");
  for (const v1::CheckpointSummary& c : response.checkpoints()) {
    std::string note = c.failure_reason();
    if (c.checkpoint_id() == response.restored_checkpoint_id()) note = "<- restored from" + (note.empty() ? "" : "; " + note);
    out << absl::StrFormat("%-8d %-11s %-24s %8d ms %10d B %7d ms %s\n", c.checkpoint_id(), c.status(),
                           absl::FormatTime("%Y-%m-%d %H:%M:%E3S", absl::FromUnixMillis(c.trigger_time_unix_ms()),
                                            absl::UTCTimeZone()),
                           c.duration_ms(), c.size_bytes(), c.longest_alignment_ms(), note);
  }
  return 0;
}

}  // namespace weir::client
