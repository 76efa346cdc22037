#include "taskmanager/task.h"

#include "absl/strings/str_cat.h"
#include "common/process/signals.h"
#include "common/status_macros.h"
#include "connectors/kafka/connector_factory.h"
#include "taskmanager/network/buffer.h"
#include "taskmanager/network/input_gate.h"
#include "taskmanager/network/record_writer.h"
#include "taskmanager/state/in_memory_keyed_state.h"

namespace weir::taskmanager {
namespace {

Partitioning FromProto(v1::Partitioning p) {
  switch (p) {
    case v1::FORWARD: return Partitioning::kForward;
    case v1::REBALANCE: return Partitioning::kRebalance;
    case v1::HASH: return Partitioning::kHash;
    case v1::BROADCAST: return Partitioning::kBroadcast;
    default: return Partitioning::kRebalance;
  }
}

class OperatorContextImpl final : public OperatorContext {
 public:
  OperatorContextImpl(std::string name, int subtask, int parallelism, bool keyed,
                      const google::protobuf::Map<std::string, std::string>* config)
      : name_(std::move(name)), subtask_(subtask), parallelism_(parallelism), config_(config) {
    if (keyed) state_ = std::make_unique<InMemoryKeyedState>();
  }
  const std::string& operator_name() const override { return name_; }
  int subtask_index() const override { return subtask_; }
  int parallelism() const override { return parallelism_; }
  KeyedStateStore* keyed_state() override { return state_.get(); }
  void SetCurrentKey(std::string_view key) override {
    if (state_ != nullptr) state_->SetCurrentKey(key);
  }
  std::string JobConfig(std::string_view key, std::string_view fallback) const override {
    auto it = config_->find(std::string(key));
    return it == config_->end() ? std::string(fallback) : it->second;
  }

 private:
  std::string name_;
  int subtask_;
  int parallelism_;
  const google::protobuf::Map<std::string, std::string>* config_;
  std::unique_ptr<InMemoryKeyedState> state_;
};

// Passes records to the next operator of the chain.
class ChainedOutput final : public RecordOutput {
 public:
  explicit ChainedOutput(StreamOperator* next) : next_(next) {}
  void Emit(void* record) override { next_->Process(record); }

 private:
  StreamOperator* next_;
};

// Counts records and passes them on.
class CountingOutput final : public RecordOutput {
 public:
  CountingOutput(RecordOutput* next, std::atomic<int64_t>* counter) : next_(next), counter_(counter) {}
  void Emit(void* record) override {
    counter_->fetch_add(1, std::memory_order_relaxed);
    next_->Emit(record);
  }

 private:
  RecordOutput* next_;
  std::atomic<int64_t>* counter_;
};

// Sends each record to several outputs (a vertex with several downstreams).
class FanOutOutput final : public RecordOutput {
 public:
  explicit FanOutOutput(std::vector<RecordOutput*> outputs) : outputs_(std::move(outputs)) {}
  void Emit(void* record) override {
    // Only RecordWriters sit here; they serialize and never move from the record.
    for (RecordOutput* out : outputs_) out->Emit(record);
  }

 private:
  std::vector<RecordOutput*> outputs_;
};

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
    // Operators first: they hold code of the job library.
    // Close never throws out of here: a failing Close must not end the process.
    // Only what was opened is closed.
    for (size_t i = 0; i < operators_.size(); ++i) {
      if (operators_[i] == nullptr || i >= opened_.size() || !opened_[i]) continue;
      CloseQuietly([&] { operators_[i]->Close(); });
    }
    if (source_ != nullptr && source_opened_) CloseQuietly([&] { source_->Close(); });
    gate_.reset();
    writers_.clear();
    operators_.clear();
    source_.reset();
    contexts_.clear();
    for (const auto& partition : partitions_) {
      // Releasing wakes a producer or consumer still waiting on it.
      if (!consumed_) partition->Release();
      env_.partitions->Unregister(partition->id());
    }
  }

  absl::Status Run() {
    ASSIGN_OR_RETURN(job_, env_.artifacts->Acquire(tdd_.job_id(), tdd_.artifact_sha256(),
                                                   {tdd_.args().begin(), tdd_.args().end()}, tdd_.graph()));
    RETURN_IF_ERROR(Instantiate());
    task_->Report(v1::TASK_RUNNING, "");
    if (source_ != nullptr) {
      RETURN_IF_ERROR(RunSource());
    } else {
      RETURN_IF_ERROR(RunInput());
    }
    if (task_->cancel_requested_.HasBeenNotified()) return absl::CancelledError("canceled");
    for (auto& op : operators_) {
      if (op != nullptr) op->EndInput();  // null: the source's place
    }
    for (auto& writer : writers_) writer->EmitEndOfInput();
    // The consumers must take everything, end of input included, before the
    // partitions may go away.
    while (!AllConsumed()) {
      if (task_->cancel_requested_.WaitForNotificationWithTimeout(absl::Milliseconds(5))) {
        return absl::CancelledError("canceled");
      }
    }
    consumed_ = true;
    return absl::OkStatus();
  }

 private:
  const VertexSpec& Vertex(int id) const { return job_->graph.vertices.at(id); }

  template <typename F>
  void CloseQuietly(F close) {
    try {
      close();
    } catch (const std::exception& e) {
      task_->log_->warn("task {}: closing an operator failed: {}", tdd_.task_id(), e.what());
    } catch (...) {
      task_->log_->warn("task {}: closing an operator failed with a non-standard exception", tdd_.task_id());
    }
  }

  bool AllConsumed() const {
    for (const auto& partition : partitions_) {
      for (int i = 0; i < partition->num_subpartitions(); ++i) {
        if (partition->buffered(i) > 0) return false;
      }
    }
    return true;
  }

  absl::Status Instantiate() {
    const int n = tdd_.vertex_ids_size();
    for (int i = 0; i < n; ++i) {
      const VertexSpec& v = Vertex(tdd_.vertex_ids(i));
      contexts_.push_back(std::make_unique<OperatorContextImpl>(v.name, tdd_.subtask_index(), tdd_.parallelism(),
                                                                static_cast<bool>(v.input_key), &tdd_.config()));
      std::map<std::string, std::string> props(v.properties.begin(), v.properties.end());
      if (i == 0 && v.kind == VertexSpec::Kind::kSource) {
        if (!v.connector.empty()) {
          ASSIGN_OR_RETURN(source_, connectors::CreateSource(v.connector, props, env_.kafka_policy));
        } else {
          source_ = v.source_factory();
        }
        operators_.push_back(nullptr);
      } else if (!v.connector.empty()) {
        ASSIGN_OR_RETURN(auto sink, connectors::CreateSink(v.connector, props, env_.kafka_policy));
        operators_.push_back(std::move(sink));
      } else {
        operators_.push_back(v.operator_factory());
      }
    }
    // The tail's output: the writers of its outgoing edges (none for a sink).
    const VertexSpec& tail = Vertex(tdd_.vertex_ids(n - 1));
    std::vector<RecordOutput*> tail_outputs;
    for (const v1::OutputSpec& out : tdd_.outputs()) {
      auto partition = std::make_shared<network::ResultPartition>(out.partition_id(), out.num_subpartitions(),
                                                                  env_.buffers_per_channel);
      RETURN_IF_ERROR(env_.partitions->Register(partition));
      partitions_.push_back(partition);
      {
        absl::MutexLock lock(&task_->partitions_mu_);
        task_->partitions_.push_back(partition);
      }
      network::RecordWriterOptions options;
      options.max_buffer_bytes = env_.segment_size;
      options.flush_interval = env_.buffer_timeout;
      options.max_parallelism = tdd_.max_parallelism() > 0 ? tdd_.max_parallelism() : env_.max_parallelism;
      if (out.num_subpartitions() > options.max_parallelism) {
        return absl::InvalidArgumentError(absl::StrCat("the consumer parallelism ", out.num_subpartitions(),
                                                       " exceeds the job's max parallelism ", options.max_parallelism));
      }
      options.producer_parallelism = tdd_.parallelism();
      KeyFunction key;
      for (const EdgeSpec& e : job_->graph.edges) {
        if (e.source == tail.id && e.target == out.target_vertex()) key = e.key;
      }
      writers_.push_back(std::make_unique<network::RecordWriter>(partition, tail.output_type,
                                                                 FromProto(out.partitioning()), key,
                                                                 out.num_subpartitions(), tdd_.subtask_index(), options));
      tail_outputs.push_back(writers_.back().get());
    }
    RecordOutput* tail_output = nullptr;
    if (tail_outputs.size() == 1) {
      tail_output = tail_outputs[0];
    } else if (tail_outputs.size() > 1) {
      fan_out_ = std::make_unique<FanOutOutput>(tail_outputs);
      tail_output = fan_out_.get();
    }
    // Counting: what leaves the chain, i.e. enters the writers or the sink.
    bool tail_is_sink = tail.kind == VertexSpec::Kind::kSink;
    std::vector<std::unique_ptr<RecordOutput>> links(n);
    for (int i = 0; i < n; ++i) {
      RecordOutput* out = nullptr;
      if (i + 1 < n) {
        links[i] = std::make_unique<ChainedOutput>(operators_[i + 1].get());
        out = links[i].get();
        if (i + 2 == n && tail_is_sink) {
          counting_ = std::make_unique<CountingOutput>(out, &task_->records_out_);
          out = counting_.get();
        }
      } else if (tail_output != nullptr) {
        counting_ = std::make_unique<CountingOutput>(tail_output, &task_->records_out_);
        out = counting_.get();
      }
      outputs_.push_back(out);
    }
    links_ = std::move(links);
    // Open downstream first, so that nothing is emitted into an unopened operator.
    opened_.assign(n, false);
    for (int i = n - 1; i >= 0; --i) {
      if (i == 0 && source_ != nullptr) {
        source_counting_ = std::make_unique<CountingOutput>(outputs_[0] != nullptr ? outputs_[0] : &discard_,
                                                            &task_->records_in_);
        source_->Open(*contexts_[0], source_counting_.get());
        source_opened_ = true;
      } else {
        operators_[i]->Open(*contexts_[i], outputs_[i] != nullptr ? outputs_[i] : &discard_);
        opened_[i] = true;
      }
    }
    if (n == 1 && tail_is_sink && source_ == nullptr) {
      // A lone sink: what it takes in is what it writes out.
      sink_only_ = true;
    }
    return absl::OkStatus();
  }

  void FlushDue() {
    absl::Time now = absl::Now();
    for (auto& w : writers_) w->FlushIfDue(now);
  }

  absl::Status RunSource() {
    while (!task_->cancel_requested_.HasBeenNotified()) {
      SourceStatus status = source_->PollNext();
      FlushDue();
      if (status == SourceStatus::kEndOfInput) break;
      if (status == SourceStatus::kNothingAvailable) {
        task_->cancel_requested_.WaitForNotificationWithTimeout(absl::Milliseconds(10));
      }
    }
    return absl::OkStatus();
  }

  absl::Status RunInput() {
    const int input_vertex = tdd_.input_vertex();
    const TypeOps* type = Vertex(input_vertex).output_type;
    if (type == nullptr) return absl::InternalError("the input vertex has no record type");
    std::vector<network::InputChannelSpec> channels;
    for (const v1::InputChannelSpec& in : tdd_.inputs()) {
      channels.push_back({in.partition_id(), in.subpartition(), in.producer_address(), in.local()});
    }
    network::InputGateOptions options;
    options.initial_credit = env_.buffers_per_channel;
    ASSIGN_OR_RETURN(gate_, network::InputGate::Create(tdd_.task_id(), std::move(channels), env_.partitions, options));
    head_input_ = std::make_unique<HeadInput>(operators_[0].get(), &task_->records_in_,
                                              sink_only_ ? &task_->records_out_ : nullptr);
    while (!task_->cancel_requested_.HasBeenNotified()) {
      ASSIGN_OR_RETURN(auto next, gate_->Next(env_.buffer_timeout));
      if (next.has_value()) {
        network::Buffer& buffer = next->second;
        if (buffer.kind == network::Buffer::Kind::kData) {
          RETURN_IF_ERROR(network::ForEachRecord(
              buffer, [&](absl::string_view bytes) {
                type->deserialize_to(std::string_view(bytes.data(), bytes.size()), *head_input_);
              }));
        }
        if (gate_->finished()) break;
      }
      FlushDue();
    }
    return absl::OkStatus();
  }

  // Feeds deserialized records into the chain's head operator.
  class HeadInput final : public RecordOutput {
   public:
    HeadInput(StreamOperator* head, std::atomic<int64_t>* in, std::atomic<int64_t>* out)
        : head_(head), in_(in), out_(out) {}
    void Emit(void* record) override {
      in_->fetch_add(1, std::memory_order_relaxed);
      if (out_ != nullptr) out_->fetch_add(1, std::memory_order_relaxed);
      head_->Process(record);
    }

   private:
    StreamOperator* head_;
    std::atomic<int64_t>* in_;
    std::atomic<int64_t>* out_;
  };

  class Discard final : public RecordOutput {
   public:
    void Emit(void*) override {}
  };

  Task* const task_;
  const v1::TaskDeploymentDescriptor& tdd_;
  const TaskEnvironment& env_;
  std::shared_ptr<jobgraph::LoadedJob>& job_;
  std::vector<std::unique_ptr<OperatorContextImpl>> contexts_;
  std::unique_ptr<SourceOperator> source_;
  std::vector<std::unique_ptr<StreamOperator>> operators_;  // [0] is null for a source
  std::vector<std::shared_ptr<network::ResultPartition>> partitions_;
  std::vector<std::unique_ptr<network::RecordWriter>> writers_;
  std::unique_ptr<FanOutOutput> fan_out_;
  std::unique_ptr<CountingOutput> counting_;
  std::unique_ptr<CountingOutput> source_counting_;
  std::vector<std::unique_ptr<RecordOutput>> links_;
  std::vector<RecordOutput*> outputs_;
  std::unique_ptr<network::InputGate> gate_;
  std::unique_ptr<HeadInput> head_input_;
  Discard discard_;
  bool sink_only_ = false;
  bool consumed_ = false;
  std::vector<bool> opened_;
  bool source_opened_ = false;
};

Task::Task(v1::TaskDeploymentDescriptor tdd, TaskEnvironment env)
    : tdd_(std::move(tdd)), env_(std::move(env)), log_(logging::Get("task")) {}

Task::~Task() {
  Cancel("TaskManager shutting down");
  if (thread_.joinable()) thread_.join();
}

void Task::Start() { thread_ = std::thread([this] { Run(); }); }

void Task::Cancel(const std::string& reason) {
  if (done() || cancel_requested_.HasBeenNotified()) return;
  log_->info("task {} canceling: {}", tdd_.task_id(), reason);
  cancel_requested_.Notify();
  absl::MutexLock lock(&partitions_mu_);
  for (const auto& p : partitions_) p->Release();
}

v1::TaskMetrics Task::Metrics() const {
  v1::TaskMetrics m;
  m.set_job_id(tdd_.job_id());
  m.set_attempt(tdd_.attempt());
  m.set_task_id(tdd_.task_id());
  m.set_records_in(records_in_.load(std::memory_order_relaxed));
  m.set_records_out(records_out_.load(std::memory_order_relaxed));
  return m;
}

void Task::Report(v1::TaskState state, const std::string& error) {
  v1::TaskStateUpdate update;
  update.set_job_id(tdd_.job_id());
  update.set_attempt(tdd_.attempt());
  update.set_task_id(tdd_.task_id());
  update.set_state(state);
  update.set_error(error);
  update.set_records_in(records_in_.load());
  update.set_records_out(records_out_.load());
  update.set_taskmanager_id(env_.taskmanager_id);
  env_.listener->OnTaskState(update);
}

void Task::Run() {
  const std::string crash_context = absl::StrCat("task ", tdd_.task_id());
  process::SetCrashContext(crash_context.c_str());
  log_->info("task {} starting (vertices {}, subtask {}/{})", tdd_.task_id(), tdd_.vertex_ids_size(),
             tdd_.subtask_index() + 1, tdd_.parallelism());
  Report(v1::TASK_DEPLOYING, "");
  v1::TaskState final_state = v1::TASK_FINISHED;
  std::string error;
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
    }
  } catch (const network::TaskCancelled&) {
    final_state = cancel_requested_.HasBeenNotified() ? v1::TASK_CANCELED : v1::TASK_FAILED;
    if (final_state == v1::TASK_FAILED) error = "its output was released";
  } catch (const std::exception& e) {
    final_state = cancel_requested_.HasBeenNotified() ? v1::TASK_CANCELED : v1::TASK_FAILED;
    error = e.what();
  } catch (...) {
    final_state = v1::TASK_FAILED;
    error = "user code threw a non-standard exception";
  }
  if (final_state == v1::TASK_FAILED) {
    log_->error("task {} FAILED: {}", tdd_.task_id(), error);
  } else {
    log_->info("task {} {} (records in {}, out {})", tdd_.task_id(), v1::TaskState_Name(final_state),
               records_in_.load(), records_out_.load());
  }
  Report(final_state, error);
  if (job != nullptr) {
    job.reset();
    env_.artifacts->Release(tdd_.job_id());
  }
  process::SetCrashContext(nullptr);
  done_.Notify();
}

}  // namespace weir::taskmanager
