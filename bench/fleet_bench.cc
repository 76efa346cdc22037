// fleet_bench: one real JobManager and a fleet of real TaskManagers on one
// machine, over real gRPC.
//
//   bench/run.sh fleet [--sizes 50:1000,100:2000,...] [--taskmanagers-per-host 50] [--checkpoints 20]
//                      [--checkpoint-ms 1000] [--window-s 10] [--idle-ms 200]
//                      [--baseline-jobmanager PATH] [--keep-logs DIR] [--checkpoint-wait-s S]
//                      [--heartbeat-timeout-s S (default 30)] [--ha-etcd ENDPOINTS]
//
// Every size TMS:TASKS starts weir-jobmanager, then weir-fleet-host processes
// holding TMS TaskManagers in all (TaskManager::Start instances, each with its
// own gRPC server, HTTP endpoint and membership session; the last host holds
// one TaskManager alone, the one killed), and measures:
//   register   time from starting the hosts until the JobManager lists every
//              TaskManager, and the JobManager's CPU seconds meanwhile;
//   reject     time until a registration claiming 2^31-1 slots is refused;
//   idle       the JobManager's CPU (% of one core) and RSS over --window-s
//              with every TaskManager heartbeating and reporting, no job;
//   deploy     time from `weir submit -p TASKS` of bench/jobs/idle_source (a
//              source that never emits, chained to a discarding sink) until
//              the job is RUNNING, and the JobManager's CPU seconds meanwhile;
//   running    CPU and RSS over --window-s with the job running and
//              checkpointing every --checkpoint-ms;
//   checkpoint p50/p99 of the checkpoints' duration (trigger to the last
//              acknowledgement and the _metadata write) and of the
//              coordinator's own time: sending the triggers, and telling
//              every TaskManager (notify) after the completion;
//   failover   time from SIGKILL of the single TaskManager's host until the
//              next attempt is RUNNING (restart delay 0, spare slots on the
//              other TaskManagers).
// Slots per TaskManager: ceil(TASKS / (TMS - 1)), so that the job fits again
// without the killed one.
//
// --baseline-jobmanager runs every size first with that binary (e.g. the
// JobManager built from an earlier commit), then with this build's, against
// the same TaskManager binary, and prints the ratios.
//
// --ha-etcd ENDPOINTS runs every size twice with this build's JobManager:
// "ha-off" (high-availability.type none) as the baseline, then "ha-on"
// (type etcd against ENDPOINTS: the lease renewed, the job store's records
// written through etcd transactions, the checkpoint coordinator's lease
// check), and prints the ratios. The TaskManagers register at the
// JobManager's address either way: what is measured is the JobManager.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/bench_flags.h"
#include "bench/proc_status.h"
#include "common/rpc/rpc.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "tests/testing/process.h"
#include "weir/v1/cluster.grpc.pb.h"
#include "weir/v1/job.grpc.pb.h"

namespace {

namespace v1 = weir::v1;
using weir::testing::Subprocess;
using weir::testing::WaitFor;

struct Flags {
  std::vector<std::string> sizes = {"20:200", "50:1000"};
  int taskmanagers_per_host = 50;
  int checkpoints = 20;
  int checkpoint_ms = 1000;
  int window_s = 10;
  int idle_ms = 200;
  // How long to wait for --checkpoints to complete; fewer are reported then.
  int checkpoint_wait_s = 300;
  // heartbeat.timeout of the cluster: two cores starting 10 000 task threads
  // at once can starve a TaskManager's heartbeat for longer than the default.
  int heartbeat_timeout_s = 30;
  std::string baseline_jobmanager;
  std::string keep_logs;
  std::string ha_etcd;
};

struct Result {
  std::string label;
  int tms = 0;
  int tasks = 0;
  bool ok = false;
  std::string error;
  double register_s = NAN, register_cpu_s = NAN;
  double reject_ms = NAN;
  double idle_cpu_pct = NAN, idle_rss_mib = NAN;
  double deploy_s = NAN, deploy_cpu_s = NAN;
  double running_cpu_pct = NAN, running_rss_mib = NAN;
  double threads = NAN;
  double cp_p50_ms = NAN, cp_p99_ms = NAN;
  double trigger_p50_ms = NAN, trigger_p99_ms = NAN;
  double notify_p50_ms = NAN, notify_p99_ms = NAN;
  double cpu_p50_ms = NAN, cpu_p99_ms = NAN;
  int cp_count = 0;
  double failover_s = NAN;
};

// utime + stime of `pid`, in seconds.
double CpuSeconds(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos) return NAN;
  std::vector<std::string> fields = absl::StrSplit(text.substr(paren + 2), ' ');
  // fields[0] is field 3 (state); utime and stime are fields 14 and 15.
  if (fields.size() < 13) return NAN;
  double utime = 0, stime = 0;
  if (!absl::SimpleAtod(fields[11], &utime) || !absl::SimpleAtod(fields[12], &stime)) return NAN;
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// A number field of /proc/<pid>/status ("VmRSS" in kB, "Threads"); NAN
// when it cannot be read.
double StatusField(pid_t pid, const std::string& field) {
  const int64_t value = weir::bench::ProcStatusField(pid, field);
  return value < 0 ? NAN : static_cast<double>(value);
}

double RssMib(pid_t pid) { return StatusField(pid, "VmRSS") / 1024.0; }

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return NAN;
  std::sort(values.begin(), values.end());
  const size_t i = std::min(values.size() - 1, static_cast<size_t>(std::ceil(p * values.size())) - (p > 0 ? 1 : 0));
  return values[i];
}

std::chrono::system_clock::time_point In(absl::Duration d) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(d);
}

class Fleet {
 public:
  Fleet(const Flags& flags, std::string label, std::string jobmanager_binary, int tms, int tasks,
        std::vector<std::string> jobmanager_args = {})
      : flags_(flags), jobmanager_binary_(std::move(jobmanager_binary)), jobmanager_args_(std::move(jobmanager_args)) {
    result_.label = std::move(label);
    result_.tms = tms;
    result_.tasks = tasks;
  }

  ~Fleet() {
    hosts_.clear();  // SIGKILL whatever is left
    jobmanager_.reset();
    if (flags_.keep_logs.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }

  Result Run() {
    if (absl::Status s = RunSteps(); !s.ok()) {
      result_.error = std::string(s.message());
      std::fprintf(stderr, "fleet_bench: %s %d:%d: %s (logs in %s)\n", result_.label.c_str(), result_.tms,
                   result_.tasks, result_.error.c_str(), dir_.c_str());
    } else {
      result_.ok = true;
    }
    Stop();
    return result_;
  }

 private:
  absl::Status RunSteps() {
    dir_ = flags_.keep_logs.empty()
               ? weir::testing::MakeTempDir("weir-fleet")
               : absl::StrCat(flags_.keep_logs, "/", result_.label, "-", result_.tms, "-", result_.tasks);
    std::filesystem::create_directories(dir_);
    const int port = weir::testing::FreePort();
    address_ = absl::StrCat("127.0.0.1:", port);
    common_ = {absl::StrCat("-Djobmanager.rpc.port=", port), "-Dpipeline.max-parallelism=16384",
               absl::StrCat("-Dheartbeat.timeout=", flags_.heartbeat_timeout_s, " s")};
    std::vector<std::string> jm = {jobmanager_binary_, absl::StrCat("-Dhigh-availability.storageDir=", dir_, "/ha"),
                                   absl::StrCat("-Drest.port=", weir::testing::FreePort())};
    jm.insert(jm.end(), common_.begin(), common_.end());
    jm.insert(jm.end(), jobmanager_args_.begin(), jobmanager_args_.end());
    jobmanager_ = std::make_unique<Subprocess>(jm, dir_ + "/jobmanager.log");
    auto channel = weir::rpc::CreateChannel(address_);
    cluster_ = v1::ClusterService::NewStub(channel);
    jobs_ = v1::JobService::NewStub(channel);
    membership_ = v1::ResourceManagerService::NewStub(channel);
    if (!WaitFor([&] { return CountTaskManagers() >= 0; }, absl::Seconds(60))) {
      return absl::UnavailableError("the JobManager did not come up");
    }

    // Registration.
    const int tms = result_.tms;
    const int slots = (result_.tasks + tms - 2) / (tms - 1);
    const double cpu0 = CpuSeconds(jobmanager_->pid());
    const absl::Time start = absl::Now();
    int started = 0;
    for (int h = 0; started < tms; ++h) {
      // The last host holds one TaskManager alone: the one killed.
      const int k = started == tms - 1 ? 1 : std::min(flags_.taskmanagers_per_host, tms - 1 - started);
      std::vector<std::string> argv = {weir::testing::BinDir() + "/weir-fleet-host",
                                       absl::StrCat("--taskmanagers=", k), absl::StrCat("--id-prefix=h", h),
                                       absl::StrCat("-Dtaskmanager.numberOfTaskSlots=", slots),
                                       absl::StrCat("-Dio.tmp.dirs=", dir_, "/tm")};
      argv.insert(argv.end(), common_.begin(), common_.end());
      hosts_.push_back(std::make_unique<Subprocess>(argv, absl::StrCat(dir_, "/host-", h, ".log")));
      started += k;
    }
    if (!WaitFor([&] { return CountTaskManagers() == tms; }, absl::Minutes(10), absl::Milliseconds(100))) {
      return absl::DeadlineExceededError(absl::StrCat("only ", CountTaskManagers(), " of ", tms,
                                                      " TaskManagers registered within 10 min"));
    }
    result_.register_s = absl::ToDoubleSeconds(absl::Now() - start);
    result_.register_cpu_s = CpuSeconds(jobmanager_->pid()) - cpu0;

    result_.reject_ms = ProbeAbsurdRegistration();

    // Heartbeats and (empty) reports only.
    Window(&result_.idle_cpu_pct, &result_.idle_rss_mib);

    // Deployment.
    const double cpu1 = CpuSeconds(jobmanager_->pid());
    const absl::Time submitted = absl::Now();
    weir::testing::CommandResult submit = weir::testing::RunCommand(
        {weir::testing::BinDir() + "/weir", "--jobmanager", address_, "--json", "submit",
         weir::testing::BinDir() + "/../jobs/idle_source.so", "-p", absl::StrCat(result_.tasks),
         absl::StrCat("-Dexecution.checkpointing.interval=", flags_.checkpoint_ms, " ms"),
         "-Drestart-strategy.type=fixed-delay", "-Drestart-strategy.fixed-delay.attempts=1000",
         "-Drestart-strategy.fixed-delay.delay=0 ms", "--", "--idle-ms", absl::StrCat(flags_.idle_ms)},
        absl::Minutes(5));
    if (submit.exit_code != 0) return absl::InternalError(absl::StrCat("weir submit failed: ", submit.err));
    job_id_ = nlohmann::json::parse(submit.out)["job_id"];
    int attempt = 0;
    if (!WaitFor([&] { return JobRunning(0, &attempt); }, absl::Minutes(15), absl::Milliseconds(100))) {
      return absl::DeadlineExceededError("the job did not reach RUNNING within 15 min");
    }
    result_.deploy_s = absl::ToDoubleSeconds(absl::Now() - submitted);
    result_.deploy_cpu_s = CpuSeconds(jobmanager_->pid()) - cpu1;

    Window(&result_.running_cpu_pct, &result_.running_rss_mib);
    result_.threads = StatusField(jobmanager_->pid(), "Threads");

    // Checkpoints: the ones completed since the job ran, at least --checkpoints.
    v1::ListCheckpointsResponse checkpoints;
    const bool enough = WaitFor(
        [&] {
          grpc::ClientContext context;
          context.set_deadline(In(absl::Seconds(10)));
          v1::GetJobRequest request;
          request.set_job_id(job_id_);
          if (!jobs_->ListCheckpoints(&context, request, &checkpoints).ok()) return false;
          return checkpoints.completed_count() >= flags_.checkpoints;
        },
        absl::Seconds(flags_.checkpoint_wait_s), absl::Milliseconds(500));
    std::vector<double> durations, triggers, notifies, cpus;
    for (const v1::CheckpointSummary& c : checkpoints.checkpoints()) {
      if (c.status() != "COMPLETED") continue;
      durations.push_back(static_cast<double>(c.duration_ms()));
      if (c.has_trigger_fanout_us()) triggers.push_back(c.trigger_fanout_us() / 1000.0);
      if (c.has_notify_fanout_us()) notifies.push_back(c.notify_fanout_us() / 1000.0);
      if (c.has_coordinator_cpu_us()) cpus.push_back(c.coordinator_cpu_us() / 1000.0);
    }
    result_.cp_count = static_cast<int>(durations.size());
    result_.cp_p50_ms = Percentile(durations, 0.5);
    result_.cp_p99_ms = Percentile(durations, 0.99);
    result_.trigger_p50_ms = Percentile(triggers, 0.5);
    result_.trigger_p99_ms = Percentile(triggers, 0.99);
    result_.notify_p50_ms = Percentile(notifies, 0.5);
    result_.notify_p99_ms = Percentile(notifies, 0.99);
    result_.cpu_p50_ms = Percentile(cpus, 0.5);
    result_.cpu_p99_ms = Percentile(cpus, 0.99);
    if (!enough) {
      std::fprintf(stderr, "fleet_bench: only %d checkpoints completed (%lld failed)\n", result_.cp_count,
                   static_cast<long long>(checkpoints.failed_count()));
    }

    // Failover: the single TaskManager of the last host dies.
    const absl::Time killed = absl::Now();
    hosts_.back()->Signal(SIGKILL);
    if (!WaitFor([&] { return JobRunning(attempt + 1, nullptr); }, absl::Minutes(15), absl::Milliseconds(50))) {
      return absl::DeadlineExceededError("the job did not run again within 15 min of the SIGKILL");
    }
    result_.failover_s = absl::ToDoubleSeconds(absl::Now() - killed);
    return absl::OkStatus();
  }

  // -1 while the JobManager does not answer.
  int CountTaskManagers() {
    grpc::ClientContext context;
    context.set_deadline(In(absl::Seconds(5)));
    v1::ListTaskManagersResponse response;
    if (!cluster_->ListTaskManagers(&context, v1::ListTaskManagersRequest(), &response).ok()) return -1;
    return response.taskmanagers_size();
  }

  // Whether the job is RUNNING in an attempt >= min_attempt.
  bool JobRunning(int min_attempt, int* attempt) {
    grpc::ClientContext context;
    context.set_deadline(In(absl::Seconds(10)));
    v1::GetJobRequest request;
    request.set_job_id(job_id_);
    v1::JobStatus status;
    if (!jobs_->Get(&context, request, &status).ok()) return false;
    if (attempt != nullptr) *attempt = status.attempt();
    return status.state() == v1::RUNNING && status.attempt() >= min_attempt;
  }

  // A TaskManager that claims 2^31-1 slots: the time until it is refused.
  double ProbeAbsurdRegistration() {
    const absl::Time start = absl::Now();
    grpc::ClientContext context;
    context.set_deadline(In(absl::Seconds(30)));
    auto stream = membership_->Connect(&context);
    v1::TaskManagerMessage message;
    v1::TaskManagerInfo* info = message.mutable_register_()->mutable_info();
    info->set_taskmanager_id("absurd-slots");
    info->set_address("127.0.0.1:1");
    info->set_slots_total(2147483647);
    stream->Write(message);
    stream->WritesDone();
    v1::JobManagerMessage reply;
    const bool got = stream->Read(&reply);
    stream->Finish();
    if (!got || !reply.has_rejected()) {
      std::fprintf(stderr, "fleet_bench: the absurd registration was not rejected\n");
      return NAN;
    }
    if (!rejection_shown_) {
      std::printf("  (absurd slot count refused: %s)\n", reply.rejected().reason().c_str());
      rejection_shown_ = true;
    }
    return absl::ToDoubleMilliseconds(absl::Now() - start);
  }

  void Window(double* cpu_pct, double* rss_mib) {
    const double cpu0 = CpuSeconds(jobmanager_->pid());
    const absl::Time t0 = absl::Now();
    absl::SleepFor(absl::Seconds(flags_.window_s));
    *cpu_pct = 100.0 * (CpuSeconds(jobmanager_->pid()) - cpu0) / absl::ToDoubleSeconds(absl::Now() - t0);
    *rss_mib = RssMib(jobmanager_->pid());
  }

  void Stop() {
    if (!job_id_.empty() && jobs_ != nullptr) {
      grpc::ClientContext context;
      context.set_deadline(In(absl::Seconds(10)));
      v1::CancelJobRequest request;
      request.set_job_id(job_id_);
      v1::CancelJobResponse response;
      jobs_->Cancel(&context, request, &response);
    }
    for (auto& host : hosts_) {
      if (host->running()) host->Signal(SIGTERM);
    }
    for (auto& host : hosts_) {
      if (!host->Wait(absl::Seconds(60)).has_value()) host->Signal(SIGKILL);
    }
    if (jobmanager_ != nullptr) {
      jobmanager_->Signal(SIGTERM);
      if (!jobmanager_->Wait(absl::Seconds(30)).has_value()) jobmanager_->Signal(SIGKILL);
    }
  }

  const Flags& flags_;
  const std::string jobmanager_binary_;
  const std::vector<std::string> jobmanager_args_;
  Result result_;
  std::string dir_;
  std::string address_;
  std::vector<std::string> common_;
  std::unique_ptr<Subprocess> jobmanager_;
  std::vector<std::unique_ptr<Subprocess>> hosts_;
  std::unique_ptr<v1::ClusterService::Stub> cluster_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  std::unique_ptr<v1::ResourceManagerService::Stub> membership_;
  std::string job_id_;
  static inline bool rejection_shown_ = false;
};

std::string Num(double v, int precision = 1) {
  if (std::isnan(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", precision, v);
  return buf;
}

void PrintHeader() {
  std::printf("%-9s %5s %6s | %8s %7s %6s | %6s %7s | %8s %7s | %6s %7s %7s | %4s %8s %8s %8s %8s %8s %8s %8s %8s | %8s\n",
              "jobmanager", "TMs", "tasks", "reg s", "reg cpu", "rej ms", "idle%", "idleMiB", "deploy s",
              "dep cpu", "run%", "runMiB", "threads", "cps", "cp p50", "cp p99", "trig p50", "trig p99", "ntfy p50", "ntfy p99", "cpu p50", "cpu p99",
              "failover");
}

void Print(const Result& r) {
  std::printf("%-9s %5d %6d | %8s %7s %6s | %6s %7s | %8s %7s | %6s %7s %7s | %4d %8s %8s %8s %8s %8s %8s %8s %8s | %8s%s\n",
              r.label.c_str(), r.tms, r.tasks, Num(r.register_s, 2).c_str(), Num(r.register_cpu_s, 2).c_str(),
              Num(r.reject_ms, 1).c_str(), Num(r.idle_cpu_pct).c_str(), Num(r.idle_rss_mib, 0).c_str(),
              Num(r.deploy_s, 2).c_str(), Num(r.deploy_cpu_s, 2).c_str(), Num(r.running_cpu_pct).c_str(),
              Num(r.running_rss_mib, 0).c_str(), Num(r.threads, 0).c_str(), r.cp_count, Num(r.cp_p50_ms, 0).c_str(), Num(r.cp_p99_ms, 0).c_str(),
              Num(r.trigger_p50_ms, 1).c_str(), Num(r.trigger_p99_ms, 1).c_str(), Num(r.notify_p50_ms, 1).c_str(),
              Num(r.notify_p99_ms, 1).c_str(), Num(r.cpu_p50_ms, 1).c_str(), Num(r.cpu_p99_ms, 1).c_str(),
              Num(r.failover_s, 2).c_str(), r.ok ? "" : "  (FAILED, see above)");
  std::fflush(stdout);
}

void PrintRatios(const Result& base, const Result& now) {
  auto ratio = [](double b, double n) { return std::isnan(b) || std::isnan(n) || n <= 0 ? std::string("-") : Num(b / n, 2) + "x"; };
  std::printf("%-9s %5d %6d | baseline/this: register %s, register cpu %s, idle cpu %s, deploy %s, deploy cpu %s, "
              "running cpu %s, cp p50 %s, cp p99 %s, failover %s\n",
              "ratio", now.tms, now.tasks, ratio(base.register_s, now.register_s).c_str(),
              ratio(base.register_cpu_s, now.register_cpu_s).c_str(), ratio(base.idle_cpu_pct, now.idle_cpu_pct).c_str(),
              ratio(base.deploy_s, now.deploy_s).c_str(), ratio(base.deploy_cpu_s, now.deploy_cpu_s).c_str(),
              ratio(base.running_cpu_pct, now.running_cpu_pct).c_str(), ratio(base.cp_p50_ms, now.cp_p50_ms).c_str(),
              ratio(base.cp_p99_ms, now.cp_p99_ms).c_str(), ratio(base.failover_s, now.failover_s).c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  weir::bench::BenchFlags parser("fleet_bench");
  parser.List("--sizes", &flags.sizes);
  parser.Int("--taskmanagers-per-host", &flags.taskmanagers_per_host);
  parser.Int("--checkpoints", &flags.checkpoints);
  parser.Int("--checkpoint-ms", &flags.checkpoint_ms);
  parser.Int("--window-s", &flags.window_s);
  parser.Int("--idle-ms", &flags.idle_ms, 0);
  parser.Int("--checkpoint-wait-s", &flags.checkpoint_wait_s);
  parser.Int("--heartbeat-timeout-s", &flags.heartbeat_timeout_s);
  parser.String("--baseline-jobmanager", &flags.baseline_jobmanager);
  parser.String("--keep-logs", &flags.keep_logs);
  parser.String("--ha-etcd", &flags.ha_etcd);
  if (!parser.Parse(argc, argv)) return 2;
  std::vector<std::pair<int, int>> sizes;
  for (const std::string& size : flags.sizes) {
    std::pair<std::string, std::string> parts = absl::StrSplit(size, ':');
    int tms = 0, tasks = 0;
    if (!absl::SimpleAtoi(parts.first, &tms) || !absl::SimpleAtoi(parts.second, &tasks) || tms < 2 || tasks < 1) {
      std::fprintf(stderr, "fleet_bench: --sizes takes TMS:TASKS pairs with TMS >= 2, not '%s'\n", size.c_str());
      return 2;
    }
    sizes.emplace_back(tms, tasks);
  }
  std::printf("fleet_bench: one weir-jobmanager, weir-fleet-host processes of up to %d TaskManagers; job "
              "idle_source (poll sleeps %d ms), checkpoints every %d ms; CPU windows of %d s\n",
              flags.taskmanagers_per_host, flags.idle_ms, flags.checkpoint_ms, flags.window_s);
  PrintHeader();
  bool all_ok = true;
  if (!flags.ha_etcd.empty() && !flags.baseline_jobmanager.empty()) {
    std::fprintf(stderr, "fleet_bench: --ha-etcd and --baseline-jobmanager each set the baseline; give one\n");
    return 2;
  }
  const std::string this_jobmanager = weir::testing::BinDir() + "/weir-jobmanager";
  int run = 0;
  for (const auto& [tms, tasks] : sizes) {
    std::optional<Result> base;
    std::vector<std::string> this_args;
    std::string this_label = "this";
    if (!flags.baseline_jobmanager.empty()) {
      base = Fleet(flags, "baseline", flags.baseline_jobmanager, tms, tasks).Run();
      Print(*base);
    } else if (!flags.ha_etcd.empty()) {
      base = Fleet(flags, "ha-off", this_jobmanager, tms, tasks).Run();
      Print(*base);
      this_label = "ha-on";
      // A cluster id per run: a JobManager of an earlier run must not hold
      // the leadership (its lease lasts a few seconds after its SIGKILL).
      this_args = {"-Dhigh-availability.type=etcd", absl::StrCat("-Dhigh-availability.etcd.endpoints=", flags.ha_etcd),
                   absl::StrCat("-Dhigh-availability.cluster-id=fleet-", getpid(), "-", ++run)};
    }
    Result now = Fleet(flags, this_label, this_jobmanager, tms, tasks, this_args).Run();
    Print(now);
    if (base.has_value()) PrintRatios(*base, now);
    all_ok = all_ok && now.ok;
  }
  return all_ok ? 0 : 1;
}
