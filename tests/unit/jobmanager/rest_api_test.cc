// The JobManager's REST documents and metrics, from hand-made records: the
// field names Flink's REST API uses, and the numbers they must carry.
#include "jobmanager/rest/rest_api.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace weir::jobmanager::rest {
namespace {

using nlohmann::json;

v1::JobStatus RunningJob() {
  v1::JobStatus job;
  job.set_job_id("j1");
  job.set_name("copy");
  job.set_state(v1::RUNNING);
  job.set_submitted_at_unix_ms(1'000'000);
  job.set_restarts(2);
  job.set_attempt(3);
  job.set_last_failure("TaskManager tm-1 lost: heartbeat timeout");
  for (int s = 0; s < 2; ++s) {
    v1::TaskStatus* source = job.add_tasks();
    source->set_task_id(absl::StrCat("j1/3/c0s", s));
    source->set_name("Kafka Source -> Map");
    source->set_subtask_index(s);
    source->set_parallelism(2);
    source->set_state(v1::TASK_RUNNING);
    source->set_records_in(100 + s);
    source->set_records_out(200 + s);
    source->set_backpressured_ms(1500);
  }
  v1::TaskStatus* sink = job.add_tasks();
  sink->set_task_id("j1/3/c1s0");
  sink->set_name("Kafka Sink");
  sink->set_parallelism(1);
  sink->set_state(v1::TASK_DEPLOYING);
  return job;
}

v1::ListCheckpointsResponse Checkpoints() {
  v1::ListCheckpointsResponse c;
  c.set_completed_count(7);
  c.set_failed_count(1);
  c.set_restored_checkpoint_id(4);
  c.set_restored_count(3);
  c.set_restored_is_savepoint(true);
  c.set_restored_at_ms(1764547200000);
  c.set_checkpointing(true);
  auto add = [&](int64_t id, const char* status, int64_t duration, int64_t size) {
    v1::CheckpointSummary* s = c.add_checkpoints();
    s->set_checkpoint_id(id);
    s->set_status(status);
    s->set_trigger_time_unix_ms(5'000'000 + id * 1000);
    s->set_duration_ms(duration);
    s->set_size_bytes(size);
    s->set_longest_alignment_ms(id);
    s->set_expected_tasks(3);
    s->set_acknowledged_tasks(status == std::string("IN_PROGRESS") ? 1 : 3);
  };
  add(9, "IN_PROGRESS", 0, 0);  // newest first
  add(8, "COMPLETED", 120, 4000);
  add(7, "FAILED", 600000, 0);
  add(6, "COMPLETED", 80, 2000);
  return c;
}

TEST(RestApiTest, JobStatesAreSpelledAsFlinkSpellsThem) {
  EXPECT_EQ(JobStateName(v1::CANCELING), "CANCELLING");
  EXPECT_EQ(JobStateName(v1::RUNNING), "RUNNING");
  EXPECT_EQ(JobStateName(v1::RESTARTING), "RESTARTING");
}

TEST(RestApiTest, OverviewCountsSlotsAndJobs) {
  TaskManagerRecord tm;
  tm.info.set_taskmanager_id("tm-1");
  tm.info.set_slots_total(4);
  tm.slot_jobs = {"j1", "", "", "j1"};
  v1::JobStatus failed;
  failed.set_state(v1::FAILED);
  json overview = RenderOverview({tm}, {RunningJob(), failed});
  EXPECT_EQ(overview["taskmanagers"], 1);
  EXPECT_EQ(overview["slots-total"], 4);
  EXPECT_EQ(overview["slots-available"], 2);
  EXPECT_EQ(overview["jobs-running"], 1);
  EXPECT_EQ(overview["jobs-failed"], 1);
  EXPECT_EQ(overview["jobs-finished"], 0);
}

TEST(RestApiTest, JobGroupsSubtasksIntoVertices) {
  json job = RenderJob(RunningJob(), absl::FromUnixMillis(1'010'000));
  EXPECT_EQ(job["jid"], "j1");
  EXPECT_EQ(job["state"], "RUNNING");
  EXPECT_EQ(job["duration"], 10'000);
  EXPECT_EQ(job["end-time"], -1);
  EXPECT_EQ(job["restarts"], 2);
  ASSERT_EQ(job["vertices"].size(), 2u);
  const json& source = job["vertices"][0];
  EXPECT_EQ(source["id"], "c0");
  EXPECT_EQ(source["name"], "Kafka Source -> Map");
  EXPECT_EQ(source["parallelism"], 2);
  EXPECT_EQ(source["status"], "RUNNING");
  EXPECT_EQ(source["metrics"]["read-records"], 201);
  EXPECT_EQ(source["metrics"]["write-records"], 401);
  EXPECT_EQ(source["tasks"]["RUNNING"], 2);
  // The vertex is as far as its least advanced subtask.
  EXPECT_EQ(job["vertices"][1]["status"], "DEPLOYING");
  EXPECT_EQ(job["status-counts"]["RUNNING"], 2);
  EXPECT_EQ(job["status-counts"]["DEPLOYING"], 1);
  // /jobs/overview spells its counts in lower case, as Flink's does.
  json overview = RenderJobsOverview({RunningJob()}, absl::FromUnixMillis(1'010'000));
  EXPECT_EQ(overview["jobs"][0]["tasks"]["running"], 2);
  EXPECT_EQ(overview["jobs"][0]["tasks"]["total"], 3);
}

TEST(RestApiTest, CheckpointsCarryCountsLatestAndHistory) {
  json c = RenderCheckpoints(Checkpoints());
  EXPECT_EQ(c["counts"]["completed"], 7);
  EXPECT_EQ(c["counts"]["failed"], 1);
  EXPECT_EQ(c["counts"]["in_progress"], 1);
  EXPECT_EQ(c["counts"]["total"], 9);
  EXPECT_EQ(c["latest"]["completed"]["id"], 8);
  EXPECT_EQ(c["latest"]["completed"]["end_to_end_duration"], 120);
  EXPECT_EQ(c["latest"]["completed"]["state_size"], 4000);
  EXPECT_EQ(c["latest"]["failed"]["id"], 7);
  EXPECT_EQ(c["latest"]["restored"]["id"], 4);
  EXPECT_EQ(c["latest"]["restored"]["is_savepoint"], true);
  EXPECT_EQ(c["latest"]["restored"]["restore_timestamp"], 1764547200000);
  EXPECT_EQ(c["counts"]["restored"], 3);
  EXPECT_EQ(c["summary"]["end_to_end_duration"]["max"], 120);
  EXPECT_EQ(c["summary"]["end_to_end_duration"]["min"], 80);
  EXPECT_EQ(c["summary"]["state_size"]["avg"], 3000);
  ASSERT_EQ(c["history"].size(), 4u);
  EXPECT_EQ(c["history"][0]["status"], "IN_PROGRESS");
  EXPECT_EQ(c["history"][0]["num_acknowledged_subtasks"], 1);
  EXPECT_EQ(c["history"][0]["latest_ack_timestamp"], -1);
}

TEST(RestApiTest, ExceptionsNameTheLastFailure) {
  v1::JobStatus job = RunningJob();
  job.mutable_tasks(1)->set_error("poison record at offset 17");
  json e = RenderExceptions(job);
  EXPECT_EQ(e["root-exception"], "TaskManager tm-1 lost: heartbeat timeout");
  ASSERT_EQ(e["exceptionHistory"]["entries"].size(), 1u);
  EXPECT_EQ(e["exceptionHistory"]["entries"][0]["stacktrace"], "poison record at offset 17");
  EXPECT_EQ(e["exceptionHistory"]["entries"][0]["taskName"], "Kafka Source -> Map (2/2)");
  ASSERT_EQ(e["all-exceptions"].size(), 1u);
  EXPECT_EQ(e["all-exceptions"][0]["exception"], "poison record at offset 17");
  EXPECT_EQ(e["all-exceptions"][0]["task"], "Kafka Source -> Map (2/2)");
}

TEST(RestApiTest, MetricsCoverClusterJobsCheckpointsAndTasks) {
  TaskManagerRecord tm;
  tm.info.set_slots_total(2);
  tm.slot_jobs = {"j1", ""};
  v1::JobStatus finished;
  finished.set_job_id("old");
  finished.set_state(v1::FINISHED);
  const std::string text = RenderMetrics({tm}, {RunningJob(), finished}, {{"j1", Checkpoints()}});
  for (const char* line : {
           "weir_taskmanagers 1\n",
           "weir_slots 2\n",
           "weir_slots_free 1\n",
           "weir_jobs{state=\"RUNNING\"} 1\n",
           "weir_jobs{state=\"FINISHED\"} 1\n",
           "weir_jobs{state=\"FAILED\"} 0\n",
           "weir_job_restarts_total{job_id=\"j1\",job_name=\"copy\"} 2\n",
           "weir_job_checkpoints_completed_total{job_id=\"j1\",job_name=\"copy\"} 7\n",
           "weir_job_checkpoints_failed_total{job_id=\"j1\",job_name=\"copy\"} 1\n",
           "weir_job_checkpoints_in_progress{job_id=\"j1\",job_name=\"copy\"} 1\n",
           "weir_job_last_checkpoint_id{job_id=\"j1\",job_name=\"copy\"} 8\n",
           "weir_job_last_checkpoint_duration_seconds{job_id=\"j1\",job_name=\"copy\"} 0.12\n",
           "weir_job_last_checkpoint_size_bytes{job_id=\"j1\",job_name=\"copy\"} 4000\n",
           "weir_job_task_records_in_total{job_id=\"j1\",job_name=\"copy\",task=\"Kafka Source -> Map\",subtask=\"1\"} 101\n",
           "weir_job_task_backpressured_seconds_total{job_id=\"j1\",job_name=\"copy\",task=\"Kafka Source -> Map\","
           "subtask=\"0\"} 1.5\n",
       }) {
    EXPECT_TRUE(absl::StrContains(text, line)) << "missing: " << line << "in:\n" << text;
  }
  // Ended jobs are counted by state, but export no per-job series.
  EXPECT_FALSE(absl::StrContains(text, "job_id=\"old\"")) << text;
}

}  // namespace
}  // namespace weir::jobmanager::rest
