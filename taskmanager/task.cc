#include "taskmanager/task.h"

#include <unistd.h>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/process/signals.h"
#include "common/status_macros.h"
#include "common/fs/file_system_registry.h"
#include "taskmanager/checkpointing/barrier_handler.h"
#include "taskmanager/checkpointing/remote_snapshot.h"
#include "taskmanager/checkpointing/snapshot_file.h"
#include "taskmanager/eventtime/watermark_valve.h"
#include "taskmanager/network/buffer.h"
#include "taskmanager/network/input_gate.h"
#include "taskmanager/operator_chain.h"

namespace weir::taskmanager {
namespace {

// How long an idle source waits before it is polled again (mails and
// cancellation end the wait at once).
constexpr absl::Duration kIdleSourceWait = absl::Milliseconds(10);
// How long a task whose input was released waits for its own cancel before
// it reports a failure (see Run).
constexpr absl::Duration kCancelAfterReleasedInputGrace = absl::Seconds(2);

}  // namespace

// Everything one run of a task owns; destroyed on the task thread before the
// job library can be unloaded.
class Task::Execution {
 public:
  // `job` receives the loaded job and outlives the Execution, so that the
  // job's code stays loaded until the task is completely done.
  Execution(Task* task, std::shared_ptr<jobgraph::LoadedJob>& job)
      : task_(task), tdd_(task->tdd_), env_(task->env_), job_(job) {}

  ~Execution() {
    // The gate first (it stops its reader threads), then the chain (it closes
    // the operators, which hold code of the job library).
    task_->open_chain_ = nullptr;
    gate_.reset();
    chain_.reset();
  }

  absl::Status Run() {
    ASSIGN_OR_RETURN(job_, env_.artifacts->Acquire(tdd_.job_id(), tdd_.artifact_sha256(),
                                                   {tdd_.args().begin(), tdd_.args().end()}, tdd_.graph_sha256(),
                                                   &task_->cancellation_));
    OperatorChainOptions options;
    options.partitions = env_.partitions;
    options.max_buffers_per_channel = env_.max_buffers_per_channel;
    options.segment_size = env_.segment_size;
    options.buffer_timeout = env_.buffer_timeout;
    options.event_time_stall_warning = env_.event_time_stall_warning;
    options.max_parallelism = env_.max_parallelism;
    options.connectors = env_.connectors;
    options.state_backend = env_.state_backend;
    options.rocksdb_write_buffer_bytes = env_.rocksdb_write_buffer_bytes;
    options.local_state_dir = env_.local_state_dir;
    options.metrics = &task_->operator_metrics_;
    options.on_partition = [task = task_](const std::shared_ptr<network::ResultPartition>& partition) {
      absl::MutexLock lock(&task->partitions_mu_);
      task->partitions_.push_back(partition);
    };
    // State in an object store is read from a local copy of what this task
    // restores, removed once the chain has taken it in.
    const v1::TaskDeploymentDescriptor* restore_from = &tdd_;
    v1::TaskDeploymentDescriptor downloaded;
    std::string download_dir;
    if (tdd_.restore_sources_size() > 0 && fs::IsObjectStoreUri(tdd_.restore_checkpoint_dir())) {
      const absl::Time download_start = absl::Now();
      ASSIGN_OR_RETURN(download_dir,
                       DownloadRestoreFiles(tdd_, env_.local_state_dir.empty() ? "/tmp" : env_.local_state_dir));
      downloaded = tdd_;
      downloaded.set_restore_checkpoint_dir(download_dir);
      restore_from = &downloaded;
      task_->log_->info("task {}: downloaded the state of checkpoint {} from {} in {} ms", tdd_.task_id(),
                        tdd_.restore_checkpoint_id(), tdd_.restore_checkpoint_dir(),
                        absl::ToInt64Milliseconds(absl::Now() - download_start));
    }
    absl::Cleanup remove_download = [&download_dir] {
      if (!download_dir.empty()) RemoveStaging(download_dir);
    };
    ASSIGN_OR_RETURN(std::optional<ChainSnapshot> restored, ReadRestoredState(*restore_from));
    if (restored.has_value()) {
      std::vector<std::string> fresh;
      for (size_t i = 0; i < restored->operators.size(); ++i) {
        if (!restored->operators[i].present) fresh.push_back(tdd_.operator_uids(static_cast<int>(i)));
      }
      task_->log_->info("task {}: restoring state of checkpoint {} from {} ({} of its snapshots{}){}", tdd_.task_id(),
                        tdd_.restore_checkpoint_id(), tdd_.restore_checkpoint_dir(), tdd_.restore_sources_size(),
                        tdd_.restore_sources_size() == 1 && tdd_.restore_sources(0).handles_size() > 1
                            ? absl::StrCat(", rescaled from parallelism ", tdd_.restore_sources(0).handles_size())
                            : std::string(),
                        fresh.empty() ? std::string()
                                      : absl::StrCat("; without state (new to the job): ", absl::StrJoin(fresh, ", ")));
    }
    ASSIGN_OR_RETURN(chain_, OperatorChain::Create(tdd_, *job_, std::move(options),
                                                   ChainCounters{&task_->records_in_, &task_->records_out_, &task_->watermark_},
                                                   restored.has_value() ? &*restored : nullptr));
    if (tdd_.finished_on_restore()) {
      // Finished before the restored checkpoint: nothing of it runs again.
      // Its consumers still get the ends they wait for.
      task_->log_->info("task {}: finished before the restored checkpoint {}; it only ends its outputs",
                        tdd_.task_id(), tdd_.restore_checkpoint_id());
      task_->Report(v1::TASK_RUNNING, "");
      RETURN_IF_ERROR(DrainFinishedInput());
    } else {
      chain_->InitializeStateAndOpen();
      task_->open_chain_ = chain_.get();
      if (chain_->input_ended()) {
        task_->log_->info("task {}: the restored checkpoint {} was taken after the end of its input; its operators "
                          "do not end it again",
                          tdd_.task_id(), tdd_.restore_checkpoint_id());
      }
      task_->Report(v1::TASK_RUNNING, "");
      if (chain_->source() != nullptr) {
        RETURN_IF_ERROR(RunSource());
      } else {
        RETURN_IF_ERROR(RunInput());
      }
      if (cancelled()) return absl::CancelledError("canceled");
    }
    // Without a final checkpoint (or after a stop-with-savepoint) the input
    // ends here; otherwise this only sends END_OF_DATA, which went already.
    if (!end_of_data_sent_) chain_->EndInput();
    chain_->EndPartitions();
    // The consumers must take everything, end of input included, before the
    // partitions may go away.
    while (!chain_->AllConsumed()) {
      if (task_->cancel_requested_.WaitForNotificationWithTimeout(absl::Milliseconds(5))) {
        return absl::CancelledError("canceled");
      }
    }
    return absl::OkStatus();
  }

 private:
  bool cancelled() const { return task_->cancel_requested_.HasBeenNotified(); }

  // Event time waits on one input channel whose watermark has not moved
  // for env_.event_time_stall_warning while others' have: says which, once per
  // stall (an upstream partition without records and without an idleness
  // setting holds every window behind it).
  void WarnIfEventTimeStalls(const eventtime::WatermarkValve& valve, absl::Time now) {
    if (env_.event_time_stall_warning <= absl::ZeroDuration() || now < next_stall_check_) return;
    next_stall_check_ = now + absl::Seconds(1);
    const std::optional<int> holding = valve.Holding(now, env_.event_time_stall_warning);
    if (holding == stalled_channel_) return;
    stalled_channel_ = holding;
    if (!holding.has_value()) return;
    const v1::InputChannelSpec& in = tdd_.inputs(*holding);
    task_->log_->warn("task {}: event time (watermark {}) has waited {} or more on input channel {} (subpartition {} "
                      "of {} from {}) while other channels moved on: its upstream sends no records and no idle "
                      "status; set an idleness on the watermark strategy if it may stay quiet",
                      tdd_.task_id(), valve.watermark(), absl::FormatDuration(env_.event_time_stall_warning), *holding,
                      in.subpartition(), in.partition_id(), in.producer_address().empty() ? "this TaskManager"
                                                                                          : in.producer_address());
  }

  // The chain's periodic emission (watermark strategies), every
  // pipeline.auto-watermark-interval. Waits are shorter than it
  // (execution.buffer-timeout, the idle source's poll), so no extra wake-up.
  void MaybePeriodicEmit(absl::Time now) {
    if (now < next_periodic_emit_) return;
    next_periodic_emit_ = now + env_.watermark_interval;
    chain_->PeriodicEmit();
  }

  // Fires the processing-time timers due at `now`; returns when the next
  // one is due (absl::InfiniteFuture() for none).
  absl::Time FireProcessingTimers(absl::Time now) {
    std::optional<int64_t> due = chain_->NextProcessingTimer();
    if (!due.has_value()) return absl::InfiniteFuture();
    const int64_t now_ms = absl::ToUnixMillis(now);
    if (*due <= now_ms) {
      chain_->FireProcessingTimers(now_ms);
      due = chain_->NextProcessingTimer();
    }
    return due.has_value() ? absl::FromUnixMillis(*due) : absl::InfiniteFuture();
  }

  // Runs the mails that arrived since the last turn.
  absl::Status RunMails() { return task_->mailbox_.RunPending(); }

  absl::Status RunSource() {
    SourceOperator* source = chain_->source();
    Wakeup& wakeup = *task_->wakeup_;
    while (!cancelled()) {
      const uint64_t seen = wakeup.generation();
      // Before the mails: a trigger posted after this admits again.
      task_->EndOverCapacity();
      RETURN_IF_ERROR(RunMails());
      if (cancelled() || task_->end_after_stop_ || task_->final_checkpoint_done_) break;
      if (task_->stopped_at_.has_value() || task_->input_ended_) {
        // Stop-with-savepoint: wait for its fate. End of input with a final
        // checkpoint: wait for one taken after it to complete.
        chain_->FlushDue(absl::Now());
        wakeup.WaitForChange(seen, absl::Now() + kIdleSourceWait);
        continue;
      }
      // A restored snapshot taken after the end of input: the source has
      // nothing left to read.
      const SourceStatus status = chain_->input_ended() ? SourceStatus::kEndOfInput : source->PollNext();
      const absl::Time now = absl::Now();
      MaybePeriodicEmit(now);
      chain_->FlushDue(now);
      if (status == SourceStatus::kEndOfInput) {
        // Event time ends with the input: windows fire before the final
        // checkpoint and before the end of input goes out.
        chain_->EndSourceEventTime();
        if (!EndOfData()) break;
        continue;
      }
      if (status == SourceStatus::kNothingAvailable) {
        chain_->Idle(now);
        wakeup.WaitForChange(seen, now + kIdleSourceWait);
      }
    }
    return absl::OkStatus();
  }

  // gate_, over the task's input channels.
  absl::Status OpenInputGate() {
    std::vector<network::InputChannelSpec> channels;
    for (const v1::InputChannelSpec& in : tdd_.inputs()) {
      channels.push_back({in.partition_id(), in.subpartition(), in.producer_address(), in.local()});
    }
    network::InputGateOptions options;
    options.initial_credit = env_.buffers_per_channel;
    options.wakeup = task_->wakeup_;
    options.network = env_.network;
    ASSIGN_OR_RETURN(gate_, network::InputGate::Create(tdd_.task_id(), std::move(channels), env_.partitions, options));
    return absl::OkStatus();
  }

  absl::Status RunInput() {
    const TypeOps* type = chain_->input_type();
    if (type == nullptr) return absl::InternalError("the input vertex has no record type");
    RETURN_IF_ERROR(OpenInputGate());
    RecordOutput& input = *chain_->input();
    Wakeup& wakeup = *task_->wakeup_;
    std::unique_ptr<BarrierHandler> barriers =
        BarrierHandler::Create(tdd_.checkpointing_mode(), gate_->num_channels());
    // The task's event time from its channels' watermarks; silent for
    // inputs that carry none.
    eventtime::WatermarkValve valve(gate_->num_channels(), absl::Now());
    auto pass_on = [&](const std::vector<eventtime::ValveEvent>& events) {
      for (const eventtime::ValveEvent& e : events) {
        if (e.kind == eventtime::ValveEvent::Kind::kWatermark) {
          chain_->ProcessWatermark(e.watermark);
        } else {
          chain_->ProcessWatermarkStatus(e.kind == eventtime::ValveEvent::Kind::kIdle);
        }
      }
    };
    // Channels that have not delivered END_OF_DATA yet.
    std::vector<bool> data_ended(gate_->num_channels(), false);
    int channels_with_data = gate_->num_channels();
    // Whether every channel's END_OF_DATA announced a final checkpoint.
    bool upstream_final = true;
    // Whether the task now waits for its final checkpoint to complete.
    bool awaiting_final = false;
    auto end_channel_data = [&](int channel, bool final_checkpoint, absl::Time now) {
      if (data_ended[channel]) return;
      data_ended[channel] = true;
      upstream_final = upstream_final && final_checkpoint;
      // The channel's event time ends with its data.
      pass_on(valve.OnEndOfInput(channel, now));
      if (--channels_with_data == 0) awaiting_final = EndOfData(upstream_final);
    };
    while (!cancelled()) {
      const uint64_t seen = wakeup.generation();
      RETURN_IF_ERROR(RunMails());
      if (cancelled()) break;
      const bool done = gate_->finished() && (!awaiting_final || task_->final_checkpoint_done_);
      if (done) break;
      // Only looks: the wait below covers input and mails together.
      ASSIGN_OR_RETURN(auto next, gate_->Next(absl::ZeroDuration()));
      const absl::Time now = absl::Now();
      if (next.has_value()) {
        const int channel = next->first;
        network::Buffer& buffer = next->second;
        switch (buffer.kind) {
          case network::Buffer::Kind::kData:
            RETURN_IF_ERROR(network::ForEachRecord(buffer, [&](absl::string_view bytes) {
              type->deserialize_to(std::string_view(bytes.data(), bytes.size()), input);
            }));
            break;
          case network::Buffer::Kind::kTimestampedData: {
            absl::Status read = network::ForEachTimestampedRecord(buffer, [&](int64_t timestamp,
                                                                              absl::string_view bytes) {
              chain_->SetElementTimestamp(timestamp);
              type->deserialize_to(std::string_view(bytes.data(), bytes.size()), input);
            });
            chain_->SetElementTimestamp(kNoTimestamp);
            RETURN_IF_ERROR(read);
            break;
          }
          case network::Buffer::Kind::kBarrier:
            RETURN_IF_ERROR(OnBarrierDecision(
                channel, barriers->OnBarrier(channel, buffer.checkpoint_id, buffer.checkpoint_timestamp_ms, now)));
            break;
          case network::Buffer::Kind::kWatermark:
            pass_on(valve.OnWatermark(channel, buffer.watermark, now));
            break;
          case network::Buffer::Kind::kWatermarkStatus:
            pass_on(valve.OnStatus(channel, buffer.idle, now));
            break;
          case network::Buffer::Kind::kEndOfData:
            // The last channel's end may move event time to its end: that
            // goes out before the chain ends its input.
            end_channel_data(channel, buffer.final_checkpoint, now);
            break;
          case network::Buffer::Kind::kEndOfInput:
            // A producer's END_OF_DATA comes first; this is a guard.
            end_channel_data(channel, /*final_checkpoint=*/false, now);
            RETURN_IF_ERROR(OnBarrierDecision(channel, barriers->OnEndOfInput(channel, now)));
            break;
        }
        if (!end_of_data_sent_) {
          FireProcessingTimers(now);
          MaybePeriodicEmit(now);
          WarnIfEventTimeStalls(valve, now);
        }
        chain_->FlushDue(now);
        continue;
      }
      if (end_of_data_sent_) {
        // After EndInput the operators emit nothing: no timers, no idle
        // hooks; only mails (the final checkpoint's) and the channels' ends.
        chain_->FlushDue(now);
        wakeup.WaitForChange(seen, now + env_.buffer_timeout);
        continue;
      }
      const absl::Time next_timer = FireProcessingTimers(now);
      MaybePeriodicEmit(now);
      WarnIfEventTimeStalls(valve, now);
      chain_->Idle(now);
      wakeup.WaitForChange(seen, std::min({now + env_.buffer_timeout, next_periodic_emit_, next_timer}));
    }
    return absl::OkStatus();
  }

  // Carries out what the barrier handler decided for `channel`.
  absl::Status OnBarrierDecision(int channel, const BarrierDecision& decision) {
    if (decision.abandoned.has_value()) {
      task_->log_->warn("task {}: checkpoint {} given up: a newer barrier arrived before its alignment completed",
                        tdd_.task_id(), *decision.abandoned);
      Decline(*decision.abandoned, "a newer checkpoint's barrier arrived before its alignment completed");
    }
    // Releases before it holds back (a given-up alignment asks for both).
    ApplyToChannels(decision, channel, *gate_);
    if (decision.trigger.has_value()) {
      if (task_->checkpointer_ == nullptr) {
        Decline(*decision.trigger, "the TaskManager has no snapshot uploader");
      } else {
        RETURN_IF_ERROR(task_->TakeCheckpoint(*chain_, *decision.trigger, decision.trigger_timestamp_ms,
                                              decision.alignment));
      }
    }
    return absl::OkStatus();
  }

  void Decline(int64_t checkpoint_id, const std::string& reason) {
    if (task_->checkpointer_ != nullptr) task_->checkpointer_->Decline(checkpoint_id, reason);
  }

  // The chain's input ended (the source's, or END_OF_DATA on every
  // channel): the operators' EndInput, END_OF_DATA out. Returns true when
  // the task now waits for a checkpoint taken after this to complete (its
  // final checkpoint, which commits what EndInput emitted), false when it
  // may end at once.
  // `upstream_final`: every input channel's END_OF_DATA said a final
  // checkpoint follows (false after a stop-with-savepoint, when none does).
  bool EndOfData(bool upstream_final = true) {
    const bool final_checkpoint = upstream_final && tdd_.final_checkpoint() && task_->checkpointer_ != nullptr &&
                                  task_->checkpointer_->enabled();
    chain_->EndInput(final_checkpoint);
    end_of_data_sent_ = true;
    if (!final_checkpoint) return false;
    task_->input_ended_ = true;
    task_->log_->info("task {}: end of input; waiting for a checkpoint after it to complete before ending",
                      tdd_.task_id());
    task_->Report(v1::TASK_RUNNING, "", /*unrecoverable=*/false, /*input_ended=*/true);
    return true;
  }

  // A task finished before the restored checkpoint: END_OF_DATA out at once,
  // then whatever its input channels still deliver (their producers finished
  // too, so only their ends) is taken and dropped until every channel ended.
  absl::Status DrainFinishedInput() {
    chain_->MarkInputEnded();
    chain_->EndInput();
    end_of_data_sent_ = true;
    if (tdd_.inputs().empty()) return absl::OkStatus();
    RETURN_IF_ERROR(OpenInputGate());
    while (!cancelled() && !gate_->finished()) {
      ASSIGN_OR_RETURN(auto next, gate_->Next(absl::Milliseconds(100)));
      if (next.has_value() && (next->second.kind == network::Buffer::Kind::kData ||
                               next->second.kind == network::Buffer::Kind::kTimestampedData)) {
        return absl::InternalError(absl::StrCat("task ", tdd_.task_id(), " was restored as finished, but input channel ",
                                                next->first, " delivered records"));
      }
    }
    return absl::OkStatus();
  }

  Task* const task_;
  const v1::TaskDeploymentDescriptor& tdd_;
  const TaskEnvironment& env_;
  std::shared_ptr<jobgraph::LoadedJob>& job_;
  std::unique_ptr<OperatorChain> chain_;
  std::unique_ptr<network::InputGate> gate_;
  absl::Time next_periodic_emit_ = absl::InfinitePast();
  // END_OF_DATA went out (EndOfData or DrainFinishedInput).
  bool end_of_data_sent_ = false;
  std::optional<int> stalled_channel_;  // WarnIfEventTimeStalls: the one warned about
  absl::Time next_stall_check_ = absl::InfinitePast();
};

Task::Task(v1::TaskDeploymentDescriptor tdd, TaskEnvironment env)
    : tdd_(std::move(tdd)),
      env_(std::move(env)),
      log_(logging::Get("task")),
      wakeup_(std::make_shared<Wakeup>()),
      mailbox_(wakeup_) {
  if (env_.uploader != nullptr && env_.checkpoint_responder != nullptr) {
    checkpointer_ = std::make_unique<SubtaskCheckpointer>(
        tdd_, env_.uploader, env_.checkpoint_responder, env_.local_state_dir.empty() ? "/tmp" : env_.local_state_dir);
  }
}

Task::~Task() {
  Cancel("TaskManager shutting down");
  if (thread_.joinable()) thread_.join();
}

void Task::Start() { thread_ = std::thread([this] { Run(); }); }

void Task::Cancel(const std::string& reason) {
  if (done() || cancel_requested_.HasBeenNotified()) return;
  log_->info("task {} canceling: {}", tdd_.task_id(), reason);
  cancel_requested_ms_.store(absl::ToUnixMillis(absl::Now()));
  cancel_requested_.Notify();
  wakeup_->Notify();
  cancellation_.Cancel();
  absl::MutexLock lock(&partitions_mu_);
  for (const auto& p : partitions_) p->Release();
}

bool Task::WriteThreadBacktrace() {
  if (done() || !thread_.joinable() || thread_tid_.load() == 0) return false;
  return process::WriteBacktraceOf(thread_.native_handle(), thread_tid_.load(), absl::Seconds(2));
}

bool Task::PostMail(std::string description, ChainMail mail) {
  return mailbox_.Put(std::move(description), [this, mail = std::move(mail)]() { return mail(open_chain_); });
}

absl::Status Task::TriggerCheckpoint(int64_t checkpoint_id, int64_t timestamp_ms, bool stop) {
  const bool posted = PostMail(absl::StrCat("checkpoint ", checkpoint_id), [this, checkpoint_id, timestamp_ms,
                                                                           stop](OperatorChain* chain) {
    const bool can = chain->source() != nullptr && checkpointer_ != nullptr && checkpointer_->enabled();
    if (!can) {
      const std::string reason = chain->source() == nullptr ? "it is not a source task" : "it has checkpoints off";
      log_->warn("task {}: declining checkpoint {}: {}", tdd_.task_id(), checkpoint_id, reason);
      if (checkpointer_ != nullptr) checkpointer_->Decline(checkpoint_id, reason);
      return absl::OkStatus();
    }
    RETURN_IF_ERROR(TakeCheckpoint(*chain, checkpoint_id, timestamp_ms, absl::ZeroDuration()));
    if (stop) {
      stopped_at_ = checkpoint_id;
      log_->info("task {}: stopping with savepoint {}: no records after its barrier", tdd_.task_id(), checkpoint_id);
    }
    return absl::OkStatus();
  });
  if (!posted) {
    return absl::NotFoundError(absl::StrCat("task ", tdd_.task_id(), " has ended"));
  }
  // A source blocked on a full output would take the trigger only once a
  // consumer freed room. Its blocked buffer and the rest of its poll go
  // over capacity instead, so that it reaches the trigger at once; the
  // barrier then queues behind the data on every channel, where aligned
  // barriers wait anyway.
  if (tdd_.inputs().empty()) {
    absl::MutexLock lock(&partitions_mu_);
    for (const auto& partition : partitions_) partition->AdmitOverCapacity(true);
    over_capacity_admitted_ = true;
  }
  return absl::OkStatus();
}

absl::Status Task::TakeCheckpoint(OperatorChain& chain, int64_t checkpoint_id, int64_t timestamp_ms,
                                  absl::Duration alignment) {
  RETURN_IF_ERROR(checkpointer_->Checkpoint(chain, checkpoint_id, timestamp_ms, alignment));
  if (input_ended_ && !final_barrier_.has_value()) final_barrier_ = checkpoint_id;
  return absl::OkStatus();
}

void Task::EndOverCapacity() {
  if (!over_capacity_admitted_.load(std::memory_order_acquire)) return;
  absl::MutexLock lock(&partitions_mu_);
  for (const auto& partition : partitions_) partition->AdmitOverCapacity(false);
  over_capacity_admitted_ = false;
}

void Task::NotifyCheckpoint(int64_t checkpoint_id, bool completed) {
  PostMail(absl::StrCat(completed ? "checkpoint completed " : "checkpoint aborted ", checkpoint_id),
           [this, checkpoint_id, completed](OperatorChain* chain) {
             if (completed) {
               chain->NotifyCheckpointComplete(checkpoint_id);
               if (final_barrier_.has_value() && checkpoint_id >= *final_barrier_ && !final_checkpoint_done_) {
                 final_checkpoint_done_ = true;
                 log_->info("task {}: checkpoint {}, taken after the end of its input, completed; ending",
                            tdd_.task_id(), checkpoint_id);
               }
             } else {
               chain->NotifyCheckpointAborted(checkpoint_id);
               if (stopped_at_ == checkpoint_id) {
                 log_->info("task {}: savepoint {} aborted; the source resumes", tdd_.task_id(), checkpoint_id);
                 stopped_at_.reset();
               }
             }
             return absl::OkStatus();
           });
}

void Task::FinishStop(int64_t checkpoint_id, bool end_input) {
  PostMail(absl::StrCat(end_input ? "end input after savepoint " : "resume after savepoint ", checkpoint_id),
           [this, checkpoint_id, end_input](OperatorChain*) {
             if (stopped_at_ != checkpoint_id) return absl::OkStatus();
             if (end_input) {
               log_->info("task {}: savepoint {} complete; the source ends its input", tdd_.task_id(),
                          checkpoint_id);
               end_after_stop_ = true;
             } else {
               log_->info("task {}: savepoint {} given up; the source resumes", tdd_.task_id(), checkpoint_id);
               stopped_at_.reset();
             }
             return absl::OkStatus();
           });
}

std::string Task::name() const {
  return absl::StrJoin(tdd_.vertex_names(), " -> ");
}

v1::TaskMetrics Task::Metrics() const {
  v1::TaskMetrics m;
  m.set_job_id(tdd_.job_id());
  m.set_attempt(tdd_.attempt());
  m.set_task_id(tdd_.task_id());
  m.set_records_in(records_in_.load(std::memory_order_relaxed));
  m.set_records_out(records_out_.load(std::memory_order_relaxed));
  absl::Duration backpressured;
  {
    absl::MutexLock lock(&partitions_mu_);
    for (const auto& partition : partitions_) backpressured += partition->backpressured_time();
  }
  m.set_backpressured_ms(absl::ToInt64Milliseconds(backpressured));
  if (const int64_t watermark = watermark_.load(std::memory_order_relaxed); watermark != kMinWatermark) {
    m.set_watermark_ms(watermark);
  }
  if (done_.HasBeenNotified()) {
    m.set_final_state(final_state_);
    m.set_error(final_error_.substr(0, 4096));
    m.set_unrecoverable(final_unrecoverable_);
  }
  return m;
}

void Task::Report(v1::TaskState state, const std::string& error, bool unrecoverable, bool input_ended) {
  v1::TaskStateUpdate update;
  update.set_job_id(tdd_.job_id());
  update.set_attempt(tdd_.attempt());
  update.set_task_id(tdd_.task_id());
  update.set_state(state);
  update.set_error(error);
  update.set_unrecoverable(unrecoverable);
  update.set_input_ended(input_ended);
  update.set_records_in(records_in_.load());
  update.set_records_out(records_out_.load());
  if (const int64_t watermark = watermark_.load(); watermark != kMinWatermark) update.set_watermark_ms(watermark);
  update.set_taskmanager_id(env_.taskmanager_id);
  env_.listener->OnTaskState(update);
}

void Task::Run() {
  thread_tid_.store(gettid());
  const std::string crash_context = absl::StrCat("task ", tdd_.task_id());
  process::SetCrashContext(crash_context.c_str());
  log_->info("task {} starting (vertices {}, subtask {}/{})", tdd_.task_id(), tdd_.vertex_ids_size(),
             tdd_.subtask_index() + 1, tdd_.parallelism());
  Report(v1::TASK_DEPLOYING, "");
  v1::TaskState final_state = v1::TASK_FINISHED;
  std::string error;
  bool unrecoverable = false;
  // Failed only because an input's producer ended first (cancelled or
  // failed): the producer's report carries the cause.
  bool input_released = false;
  // Holds the job's library until after the handlers below, which may still
  // touch an exception object thrown by the job's code.
  std::shared_ptr<jobgraph::LoadedJob> job;
  try {
    Execution execution(this, job);
    absl::Status status = execution.Run();
    if (cancel_requested_.HasBeenNotified()) {
      final_state = v1::TASK_CANCELED;
    } else if (!status.ok()) {
      final_state = v1::TASK_FAILED;
      error = std::string(status.message());
      input_released = network::IsReleasedBeforeEndOfInput(status);
    }
  } catch (const network::TaskCancelled&) {
    final_state = cancel_requested_.HasBeenNotified() ? v1::TASK_CANCELED : v1::TASK_FAILED;
    if (final_state == v1::TASK_FAILED) error = "its output was released";
  } catch (const UnrecoverableError& e) {
    final_state = v1::TASK_FAILED;
    error = e.what();
    unrecoverable = true;
  } catch (const std::exception& e) {
    final_state = cancel_requested_.HasBeenNotified() ? v1::TASK_CANCELED : v1::TASK_FAILED;
    error = e.what();
  } catch (...) {
    final_state = v1::TASK_FAILED;
    error = "user code threw a non-standard exception";
  }
  // No mail runs after this point; pending ones are dropped.
  mailbox_.Close();
  // A cancel (or a restart) reaches every task of the job, but the tasks
  // upstream stop first and release their partitions, so a task downstream
  // usually finds its input gone a moment before its own cancel arrives.
  // That is a cancellation, not a failure: wait briefly for the cancel.
  if (final_state == v1::TASK_FAILED && input_released &&
      cancel_requested_.WaitForNotificationWithTimeout(kCancelAfterReleasedInputGrace)) {
    final_state = v1::TASK_CANCELED;
    error.clear();
  }
  if (final_state == v1::TASK_FAILED && input_released) {
    // What a cancel or a failover does to every task downstream of one that
    // stopped first; not a failure of this task's own.
    log_->warn("task {} FAILED after its input ended early: {}; the producer's task says why (expected while "
               "a job is cancelled or restarts)",
               tdd_.task_id(), error);
  } else if (final_state == v1::TASK_FAILED) {
    log_->error("task {} FAILED{}: {}", tdd_.task_id(), unrecoverable ? " (unrecoverable)" : "", error);
  } else {
    log_->info("task {} {} (records in {}, out {})", tdd_.task_id(), v1::TaskState_Name(final_state),
               records_in_.load(), records_out_.load());
  }
  final_state_ = final_state;
  final_error_ = error;
  final_unrecoverable_ = unrecoverable;
  Report(final_state, error, unrecoverable);
  if (job != nullptr) {
    job.reset();
    env_.artifacts->Release(tdd_.job_id());
  }
  process::SetCrashContext(nullptr);
  done_.Notify();
}

}  // namespace weir::taskmanager
