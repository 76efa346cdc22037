// coordinator_bench: the checkpoint coordinator's own CPU per checkpoint at
// thousands of tasks, without the fleet around it.
//
//   build/bin/coordinator_bench [--tasks 10000] [--taskmanagers 500] [--checkpoints 30] [--dir DIR]
//
// One real CheckpointCoordinator over a real checkpoint directory (DIR, by
// default under /tmp). Its gateway stands in for the TaskManagers: a
// trigger hands the source tasks to a "fleet" thread, which writes each
// task's snapshot file into the checkpoint's directory and then
// acknowledges, in one batch per TaskManager as TaskManagers do
// (AcknowledgeCheckpoints), through CheckpointCoordinator::OnAcknowledge;
// a notification returns at once. So the RPC fan-outs to TaskManagers are
// not in these figures (fleet_bench measures them with real gRPC): what is
// measured is everything else the coordinator does — planning and the
// trigger, taking in every acknowledgement, checking every task's file,
// writing _metadata, retention — as the coordinator's CPU per checkpoint
// (CheckpointRecord::coordinator_cpu) and, for the parts outside it, the
// fleet thread's CPU inside OnAcknowledge and the coordinator thread's CPU
// over the whole run.
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "bench/bench_flags.h"
#include "jobmanager/checkpoint/checkpoint_coordinator.h"
#include "jobmanager/checkpoint/checkpoint_storage.h"

namespace {

using weir::jobmanager::checkpoint::CheckpointCoordinator;
using weir::jobmanager::checkpoint::CheckpointCoordinatorOptions;
using weir::jobmanager::checkpoint::CheckpointRecord;
using weir::jobmanager::checkpoint::CheckpointStatus;
using weir::jobmanager::checkpoint::CheckpointStorage;
using weir::jobmanager::checkpoint::CheckpointTaskGateway;

constexpr char kJob[] = "bench-job";

absl::Duration ThreadCpu() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return absl::DurationFromTimespec(ts);
}

// The TaskManagers: snapshot files and batched acknowledgements from a
// thread of their own.
class FleetGateway final : public CheckpointTaskGateway {
 public:
  FleetGateway(std::string checkpoints_dir, int tasks, int taskmanagers, bool batched)
      : dir_(std::move(checkpoints_dir)), tasks_(tasks), taskmanagers_(taskmanagers), batched_(batched) {
    for (int t = 0; t < tasks_; ++t) task_ids_.push_back(absl::StrCat("job/1/c0s", t));
  }

  const std::vector<std::string>& task_ids() const { return task_ids_; }
  void set_coordinator(CheckpointCoordinator* coordinator) { coordinator_ = coordinator; }

  absl::Status TriggerCheckpoints(int attempt, const std::vector<std::string>&, int64_t id, int64_t,
                                  bool) override {
    absl::MutexLock lock(&mu_);
    triggered_.push_back({attempt, id});
    return absl::OkStatus();
  }
  void NotifyCheckpoint(int, int64_t id, bool completed, const std::string&) override {
    absl::MutexLock lock(&mu_);
    (completed ? completed_ : aborted_) += 1;
    last_notified_ = id;
  }
  void FinishStop(int, int64_t, bool) override {}
  void FailJob(const std::string& reason) override { std::fprintf(stderr, "bench: job failed: %s\n", reason.c_str()); }

  // Answers triggers until `checkpoints` were notified; returns the CPU
  // spent inside OnAcknowledge.
  absl::Duration Run(int checkpoints) {
    absl::Duration in_acknowledge;
    while (true) {
      std::pair<int, int64_t> trigger;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return !triggered_.empty() || completed_ + aborted_ >= target_;
        };
        target_ = checkpoints;
        mu_.Await(absl::Condition(&ready));
        if (triggered_.empty()) return in_acknowledge;
        trigger = triggered_.front();
        triggered_.erase(triggered_.begin());
      }
      const auto [attempt, id] = trigger;
      const std::string chk = absl::StrCat(dir_, "/chk-", id);
      // Files first (as the uploaders write them), then one batch of
      // acknowledgements per TaskManager.
      std::vector<weir::v1::AcknowledgeCheckpointRequest> acks;
      acks.reserve(tasks_);
      for (int t = 0; t < tasks_; ++t) {
        const std::string file = absl::StrCat("v0-s", t, ".snapshot");
        std::ofstream(absl::StrCat(chk, "/", file)) << "state of task " << t;
        weir::v1::AcknowledgeCheckpointRequest ack;
        ack.set_job_id(kJob);
        ack.set_attempt(attempt);
        ack.set_checkpoint_id(id);
        ack.set_task_id(task_ids_[t]);
        ack.mutable_state()->set_file(file);
        ack.mutable_state()->set_size_bytes(static_cast<int64_t>(absl::StrCat("state of task ", t).size()));
        ack.set_sync_ms(1);
        ack.set_async_ms(2);
        acks.push_back(std::move(ack));
      }
      const int per_tm = (tasks_ + taskmanagers_ - 1) / taskmanagers_;
      for (int first = 0; first < tasks_; first += per_tm) {
        const absl::Duration start = ThreadCpu();
        const int last = std::min(tasks_, first + per_tm);
        if (batched_) {
          std::vector<const weir::v1::AcknowledgeCheckpointRequest*> batch;
          for (int t = first; t < last; ++t) batch.push_back(&acks[t]);
          coordinator_->OnAcknowledgeBatch(batch);
        } else {
          for (int t = first; t < last; ++t) coordinator_->OnAcknowledge(acks[t]);
        }
        in_acknowledge += ThreadCpu() - start;
      }
    }
  }

  int completed() {
    absl::MutexLock lock(&mu_);
    return completed_;
  }

 private:
  const std::string dir_;
  const int tasks_;
  const int taskmanagers_;
  const bool batched_;  // OnAcknowledgeBatch per TaskManager, else OnAcknowledge per task
  std::vector<std::string> task_ids_;
  CheckpointCoordinator* coordinator_ = nullptr;
  absl::Mutex mu_;
  std::vector<std::pair<int, int64_t>> triggered_ ABSL_GUARDED_BY(mu_);
  int completed_ ABSL_GUARDED_BY(mu_) = 0;
  int aborted_ ABSL_GUARDED_BY(mu_) = 0;
  int target_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_notified_ ABSL_GUARDED_BY(mu_) = 0;
};

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// One run of `checkpoints` checkpoints; prints its figures. False when not
// all of them completed.
bool RunOnce(const std::string& root, int tasks, int taskmanagers, int checkpoints, bool batched) {
  std::filesystem::remove_all(root);
  const std::string job_dir = absl::StrCat(root, "/", kJob);
  std::filesystem::create_directories(job_dir);

  FleetGateway gateway(job_dir, tasks, taskmanagers, batched);
  CheckpointCoordinatorOptions options;
  options.interval = absl::Milliseconds(1);  // the next one as soon as the last ended
  options.num_retained = 1;
  options.max_parallelism = 128;
  auto storage = CheckpointStorage::Open(job_dir);
  if (!storage.ok()) {
    std::fprintf(stderr, "coordinator_bench: %s\n", storage.status().ToString().c_str());
    return false;
  }
  CheckpointCoordinator coordinator(kJob, options, *std::move(storage), &gateway);
  gateway.set_coordinator(&coordinator);
  coordinator.SetTasks(1, gateway.task_ids(), gateway.task_ids());
  const absl::Time start = absl::Now();
  coordinator.Start();
  const absl::Duration in_acknowledge = gateway.Run(checkpoints);
  const absl::Duration wall = absl::Now() - start;
  coordinator.Stop();

  std::vector<double> cpu, duration;
  for (const CheckpointRecord& record : coordinator.History()) {
    if (record.status != CheckpointStatus::kCompleted) continue;
    cpu.push_back(Ms(record.coordinator_cpu));
    duration.push_back(Ms(record.duration));
  }
  std::printf("coordinator_bench: %d tasks on %d TaskManagers, acknowledgements %s: %d checkpoints completed of %d "
              "in %.1f s\n",
              tasks, taskmanagers, batched ? "in one batch per TaskManager" : "one call each", gateway.completed(),
              checkpoints, absl::ToDoubleSeconds(wall));
  std::printf("  coordinator CPU per checkpoint (trigger, acknowledgements, file checks, _metadata): "
              "p50 %.1f ms, p99 %.1f ms, max %.1f ms\n",
              Percentile(cpu, 0.5), Percentile(cpu, 0.99), Percentile(cpu, 1.0));
  std::printf("  of which in OnAcknowledge: %.1f ms per checkpoint (%.2f us per acknowledgement)\n",
              Ms(in_acknowledge) / std::max(1, gateway.completed()),
              1000.0 * Ms(in_acknowledge) / std::max(1, gateway.completed()) / tasks);
  std::printf("  trigger to completion (includes the fleet thread writing %d files): p50 %.1f ms, p99 %.1f ms\n",
              tasks, Percentile(duration, 0.5), Percentile(duration, 0.99));
  std::filesystem::remove_all(job_dir);
  return gateway.completed() == checkpoints;
}

}  // namespace

int main(int argc, char** argv) {
  int tasks = 10000, taskmanagers = 500, checkpoints = 30;
  std::string root = absl::StrCat("/tmp/weir-coordinator-bench-", getpid());
  weir::bench::BenchFlags flags("coordinator_bench");
  flags.Int("--tasks", &tasks);
  flags.Int("--taskmanagers", &taskmanagers);
  flags.Int("--checkpoints", &checkpoints);
  flags.String("--dir", &root);
  if (!flags.Parse(argc, argv)) return 2;
  bool all_completed = true;
  for (const bool batched : {false, true}) {
    all_completed = RunOnce(root, tasks, taskmanagers, checkpoints, batched) && all_completed;
  }
  std::filesystem::remove_all(root);
  return all_completed ? 0 : 1;
}
