#include "connectors/kafka/kafka_transactional_sink.h"

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafkacpp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <stdexcept>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/check.h"
#include "common/status_macros.h"
#include "common/logging/logging.h"
#include "common/retry/backoff.h"
#include "connectors/kafka/kafka_client.h"
#include "connectors/kafka/protocol/transaction_client.h"

namespace weir::connectors {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kStateName[] = "kafka-sink-transactions";
constexpr char kPoolStateName[] = "kafka-sink-transaction-pool";
// How often a producer reports statistics: they carry its producer id and
// epoch, which a committable needs.
constexpr char kStatisticsIntervalMs[] = "250";
constexpr int kPollEveryRecords = 1024;
constexpr int kQueueFullPollMs = 100;
constexpr int kFlushStepMs = 1000;
// linger.ms of the transactional producers unless the job sets
// kafka.linger.ms. Records become visible only when their checkpoint's
// transaction commits, and the barrier flushes, so a longer linger costs no
// latency; it makes one request per partition every 100 ms instead of one
// every 5 ms (librdkafka's default). That matters beyond the broker's load:
// while a partition has the idempotent producer's maximum of 5 requests in
// flight and records older than linger.ms wait, librdkafka 2.0's broker
// thread wakes up without pause. With 5 ms, a broker GC pause of ~25 ms was
// enough; two such threads then took both cores of a 2-core host with the
// broker on it, and the pause grew to seconds (bench/README.md).
constexpr char kTransactionalLingerMs[] = "100";
constexpr int64_t kFlushBudgetMs = 300000 + 10000;  // message.timeout.ms + margin
constexpr int kCommitTimeoutMs = 60000;
constexpr int kAbortTimeoutMs = 5000;
// Bounds the DescribeTransactions probes of one start (FindLingering).
constexpr int kMaxLingeringProbes = 10000;

int64_t Millis(Clock::duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); }

// The integer after `"name":` in `json` from `from`, or -1.
int64_t JsonInt(const std::string& json, size_t from, absl::string_view name) {
  const std::string needle = absl::StrCat("\"", name, "\":");
  const size_t at = json.find(needle, from);
  if (at == std::string::npos) return -1;
  size_t pos = at + needle.size();
  while (pos < json.size() && json[pos] == ' ') ++pos;
  size_t end = pos;
  while (end < json.size() && (json[end] == '-' || (json[end] >= '0' && json[end] <= '9'))) ++end;
  int64_t value = -1;
  if (!absl::SimpleAtoi(absl::string_view(json).substr(pos, end - pos), &value)) return -1;
  return value;
}

}  // namespace

std::string Committable::Encode() const {
  return absl::StrCat("v1 ", subtask, " ", checkpoint_id, " ", producer_id, " ", producer_epoch, " ",
                      transactional_id);
}

absl::StatusOr<Committable> Committable::Decode(std::string_view std_text) {
  const absl::string_view text(std_text.data(), std_text.size());
  std::vector<absl::string_view> parts = absl::StrSplit(text, absl::MaxSplits(' ', 5));
  Committable c;
  int64_t epoch = -1;
  if (parts.size() != 6 || parts[0] != "v1" || !absl::SimpleAtoi(parts[1], &c.subtask) ||
      !absl::SimpleAtoi(parts[2], &c.checkpoint_id) || !absl::SimpleAtoi(parts[3], &c.producer_id) ||
      !absl::SimpleAtoi(parts[4], &epoch) || parts[5].empty() || c.subtask < 0 || c.producer_id < 0 || epoch < 0 ||
      epoch > 0x7fff) {
    return absl::DataLossError(absl::StrCat("the checkpoint holds a Kafka sink transaction the sink cannot read: '",
                                            text.substr(0, 200), "'"));
  }
  c.producer_epoch = static_cast<int16_t>(epoch);
  c.transactional_id = std::string(parts[5]);
  return c;
}

std::string TransactionalId(const std::string& prefix, int subtask, int k) {
  return absl::StrCat(prefix, "-", subtask, "-", k);
}

absl::StatusOr<int64_t> MarkerOffset(int64_t producer_id, int16_t producer_epoch, MarkerKind kind) {
  if (producer_id < 0 || producer_id >= (int64_t{1} << 46) || producer_epoch < 0) {
    return absl::OutOfRangeError(absl::StrCat("producer id ", producer_id, " and epoch ", producer_epoch,
                                              " do not fit a transaction marker"));
  }
  return (producer_id << 17) | (int64_t{producer_epoch} << 1) | static_cast<int64_t>(kind);
}

std::string DescribeMarker(int64_t offset) {
  return absl::StrCat("producer id ", offset >> 17, ", epoch ", (offset >> 1) & 0xffff, ", ",
                      (offset & 1) != 0 ? "data" : "initialization");
}

std::string MarkerMetadata(int64_t chain_from) {
  return chain_from < 0 ? std::string("weir v1") : absl::StrCat("weir v1 chain=", chain_from);
}

std::optional<int64_t> MarkerChainFrom(absl::string_view metadata) {
  const size_t at = metadata.find(" chain=");
  int64_t chain = -1;
  if (!absl::StartsWith(metadata, "weir v1") || at == absl::string_view::npos ||
      !absl::SimpleAtoi(metadata.substr(at + 7), &chain) || chain < 0) {
    return std::nullopt;
  }
  return chain;
}

RestoredCommit ClassifyRestoredCommit(const absl::Status& end_txn, std::optional<int64_t> newest_marker,
                                      std::optional<int64_t> chain_from, const Committable& committable) {
  namespace kp = kafka_protocol;
  if (end_txn.ok()) return RestoredCommit::kCommitted;
  if (!absl::IsDataLoss(end_txn)) return RestoredCommit::kFailed;
  const std::optional<int16_t> code = kp::KafkaErrorCodeOf(end_txn);
  if (!code.has_value() || *code == kp::kTransactionAbortable) return RestoredCommit::kLost;
  absl::StatusOr<int64_t> own =
      MarkerOffset(committable.producer_id, committable.producer_epoch, MarkerKind::kData);
  if (own.ok() && newest_marker.has_value()) {
    if (*newest_marker == *own) return RestoredCommit::kAlreadyCommitted;
    if (*newest_marker > *own) {
      // Every session since `chain_from` followed a confirmed commit: one
      // that came after this transaction means it was committed.
      return chain_from.has_value() && *chain_from <= *own ? RestoredCommit::kAlreadyCommitted
                                                          : RestoredCommit::kResolvedLater;
    }
  }
  // Nothing of Weir committed on the id since the transaction began.
  if (*code == kp::kInvalidProducerIdMapping || *code == kp::kUnknownProducerId ||
      *code == kp::kTransactionalIdNotFound) {
    return RestoredCommit::kUnknown;  // the broker forgot the id (idle past its expiration)
  }
  return RestoredCommit::kLost;
}

bool SettledBeforeStart(const IdBeforeStart& before) {
  if (!before.description.has_value()) return false;
  const kafka_protocol::TransactionDescription& d = *before.description;
  if (!d.found) return true;
  if (d.state == "CompleteCommit") return true;
  if (d.state != "Empty") return false;
  // Epoch 0: the producer id was only ever initialized, and a transaction
  // of an earlier producer id cannot be taken for lost (its recovery
  // commit gets a producer id mapping error, never "lost").
  if (d.producer_epoch == 0) return true;
  // The newest marker's session is (P, e - 1): its transaction committed,
  // and the one initialization since bumped the epoch once — a fence of an
  // open transaction bumps it twice.
  if (!before.newest_marker.has_value()) return false;
  const int64_t marker = *before.newest_marker;
  return marker >> 17 == d.producer_id && ((marker >> 1) & 0xffff) == d.producer_epoch - 1;
}

bool InitNeedsMarker(const IdBeforeStart& before, int64_t producer_id, int16_t producer_epoch) {
  if (!SettledBeforeStart(before)) return true;
  const kafka_protocol::TransactionDescription& d = *before.description;
  if (!d.found) return producer_epoch != 0;  // epoch 0: this initialization created the id
  return producer_id != d.producer_id || producer_epoch != d.producer_epoch + 1;
}

// A thread that runs posted work in order. Thread-safety: Post and Stop from
// the task thread.
class KafkaTransactionalSink::Worker {
 public:
  Worker() : thread_([this] { Run(); }) {}
  ~Worker() { Stop(/*drain=*/false); }

  void Post(std::function<void()> work) {
    absl::MutexLock lock(&mutex_);
    work_.push_back(std::move(work));
  }

  // After the queued work when `drain`, else after the work in progress.
  void Stop(bool drain) {
    if (!thread_.joinable()) return;
    {
      absl::MutexLock lock(&mutex_);
      stopping_ = true;
      if (!drain) work_.clear();
    }
    thread_.join();
  }

 private:
  void Run() {
    while (true) {
      std::function<void()> work;
      {
        absl::MutexLock lock(&mutex_);
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return !work_.empty() || stopping_; };
        mutex_.Await(absl::Condition(&ready));
        if (work_.empty()) return;  // stopping, nothing left
        work = std::move(work_.front());
        work_.pop_front();
      }
      work();
    }
  }

  absl::Mutex mutex_;
  std::deque<std::function<void()>> work_ ABSL_GUARDED_BY(mutex_);
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  std::thread thread_;  // last: starts once the fields above exist
};

// Logs like ClientEvents and learns the producer id and epoch from the
// statistics. Thread-safety: like ClientEvents.
class KafkaTransactionalSink::Events final : public kafka_internal::ClientEvents {
 public:
  using ClientEvents::ClientEvents;

  void event_cb(RdKafka::Event& event) override {
    if (event.type() != RdKafka::Event::EVENT_STATS) {
      ClientEvents::event_cb(event);
      return;
    }
    const std::string json = event.str();
    const size_t eos = json.find("\"eos\":");
    if (eos == std::string::npos) return;
    const int64_t id = JsonInt(json, eos, "producer_id");
    const int64_t epoch = JsonInt(json, eos, "producer_epoch");
    if (id >= 0 && epoch >= 0) {
      producer_id.store(id);
      producer_epoch.store(epoch);
    }
  }

  std::atomic<int64_t> producer_id{-1};
  std::atomic<int64_t> producer_epoch{-1};
};

// Counts a producer's acknowledged records and keeps its first failure.
// Runs on the thread that polls the producer (the one that owns the slot).
class KafkaTransactionalSink::DeliveryReports final : public RdKafka::DeliveryReportCb {
 public:
  void dr_cb(RdKafka::Message& message) override {
    if (message.err() == RdKafka::ERR_NO_ERROR) {
      ++delivered;
    } else if (first_failure.empty()) {
      first_failure = message.errstr();
    }
  }
  // Read by the task thread while a commit on the committer thread may run
  // this callback.
  std::atomic<int64_t> delivered{0};
  std::string first_failure;
};

// One transactional id and its producer. Owned by the sink; touched by the
// task thread, or by the committer thread while the slot is kCommitting, or
// by the preparer thread (or Open's threads) while it is kPreparing (then
// the task thread leaves it alone).
struct KafkaTransactionalSink::Slot {
  enum class State {
    kPreparing,   // gets a new producer: a new slot (Open, Grow) or a released one
    kFree,        // initialized, no transaction
    kOpen,        // the current slot: takes records
    kPending,     // pre-committed for checkpoint_id, waiting for its completion
    kCommitting,  // the committer thread commits it
    kCommitted,   // committed; free again once `released_by` completes
  };

  int index = 0;
  std::string transactional_id;
  State state = State::kPreparing;
  std::unique_ptr<Events> events;
  DeliveryReports reports;
  std::unique_ptr<RdKafka::Producer> producer;
  std::unique_ptr<RdKafka::Topic> topic;
  int64_t producer_id = -1;
  int16_t producer_epoch = -1;
  bool in_transaction = false;
  int64_t records = 0;        // written in the open transaction
  int64_t checkpoint_id = 0;  // kPending / kCommitting: pre-committed at this barrier
  int64_t released_by = 0;    // kCommitted: the first snapshot that omits it (0: none yet)
  // The marker of the oldest session since which every session of this id
  // began after its predecessor's commit was confirmed (-1: unknown). Data
  // markers carry it, so a recovery can tell "committed" from "maybe
  // aborted by a later run".
  int64_t chain_from = -1;
  bool init_marker = false;  // its last Prepare committed an init marker
};

KafkaTransactionalSink::KafkaTransactionalSink(KafkaSinkConfig config)
    : config_(std::move(config)), log_(logging::Get("kafka")) {}

KafkaTransactionalSink::~KafkaTransactionalSink() { Close(); }

void KafkaTransactionalSink::InitializeState(OperatorContext& context) {
  const std::string where = absl::StrCat("KafkaSink '", context.operator_name(), "' subtask ",
                                         context.subtask_index(), ": restoring its transactions: ");
  committables_state_ = context.operator_state()->GetUnionListState(kStateName);
  pool_state_ = context.operator_state()->GetUnionListState(kPoolStateName);
  restored_.clear();
  for (const std::string& entry : committables_state_->Get()) {
    absl::StatusOr<Committable> c = Committable::Decode(entry);
    if (!c.ok()) throw std::runtime_error(absl::StrCat(where, c.status().message()));
    restored_.push_back(*std::move(c));
  }
  restored_pool_sizes_.clear();
  for (const std::string& entry : pool_state_->Get()) {
    std::vector<absl::string_view> parts = absl::StrSplit(entry, ' ');
    int subtask = -1, size = 0;
    if (parts.size() != 3 || parts[0] != "v1" || !absl::SimpleAtoi(parts[1], &subtask) ||
        !absl::SimpleAtoi(parts[2], &size) || subtask < 0 || size < 0 || size > 100000) {
      throw std::runtime_error(absl::StrCat(where, "unreadable pool entry '", entry.substr(0, 100), "'"));
    }
    restored_pool_sizes_[subtask] = size;
  }
  // What this subtask lists is decided at every SnapshotState.
  committables_state_->Clear();
  pool_state_->Clear();
}

KafkaTransactionalSink::Slot* KafkaTransactionalSink::NewSlot(int k) {
  auto slot = std::make_unique<Slot>();
  slot->index = k;
  slot->transactional_id = TransactionalId(prefix_, subtask_, k);
  slots_.push_back(std::move(slot));
  return slots_.back().get();
}

void KafkaTransactionalSink::Open(OperatorContext& context, RecordOutput* /*output*/) {
  if (!slots_.empty()) throw std::logic_error("KafkaTransactionalSink::Open called twice");
  context_ = &context;
  subtask_ = context.subtask_index();
  parallelism_ = context.parallelism();
  prefix_ = config_.transactional_id_prefix;
  client_ = absl::StrCat("KafkaSink '", context.operator_name(), "' subtask ", subtask_, "/", parallelism_);
  if (committables_state_ == nullptr) InitializeState(context);
  const MetricLabels topic = {{"topic", config_.topic}};
  committed_metric_ = &context.metrics().counter(
      "weir_kafka_transactions_committed_total",
      "Transactions the exactly-once Kafka sink committed when their checkpoint completed.", topic);
  recovery_commits_metric_ = &context.metrics().counter(
      "weir_kafka_transactions_recovery_commits_total",
      "Transactions of a restored checkpoint the sink committed (again) after a restart.", topic);
  const char* resolved_help =
      "Transactions of a restored checkpoint that were no longer open, by what their markers say: committed "
      "before, resolved by a later run (committed before it or aborted by it), or unknown (the id expired).";
  auto resolved = [&](const char* outcome) {
    return &context.metrics().counter("weir_kafka_transactions_recovery_resolved_total", resolved_help,
                                      {{"topic", config_.topic}, {"outcome", outcome}});
  };
  resolved_committed_metric_ = resolved("committed");
  resolved_later_metric_ = resolved("later_run");
  resolved_unknown_metric_ = resolved("unknown");
  aborted_metric_ = &context.metrics().counter(
      "weir_kafka_transactions_aborted_total",
      "Open transactions the sink aborted (at cancellation or failure; never pre-committed ones).", topic);
  int pool_size = kTransactionPoolSize;
  if (auto it = restored_pool_sizes_.find(subtask_); it != restored_pool_sizes_.end()) {
    pool_size = std::max(pool_size, it->second);
  }
  for (int k = 0; k < pool_size; ++k) NewSlot(k);

  // One client for every request of the start to the transaction and group
  // coordinators (it contacts no broker until it is used).
  // Without a broker, the recovery calls below would each retry for a
  // minute and then say so less plainly.
  CheckBrokersReachable();
  const kafka_protocol::TransactionClient recovery = RecoveryClient();
  // First finish what the restored checkpoint pre-committed...
  const absl::flat_hash_map<std::string, int64_t> committed_now = CommitRestored(recovery);
  // ...then initialize every id, which aborts what a previous attempt or a
  // later run left open on it, with an init marker where the id's state
  // before says one may be owed. In parallel: each is a few round trips to
  // the coordinators (and maybe a marker transaction).
  std::vector<absl::Status> statuses(slots_.size());
  {
    std::vector<std::jthread> threads;  // joined on every way out of this block
    for (size_t k = 0; k < slots_.size(); ++k) {
      if (auto it = committed_now.find(slots_[k]->transactional_id); it != committed_now.end()) {
        slots_[k]->chain_from = it->second;  // its chain starts at the transaction just committed
        threads.emplace_back([this, k, &statuses] { statuses[k] = Prepare(*slots_[k], InitKind::kRelease); });
        continue;
      }
      threads.emplace_back([this, k, &statuses, &recovery] {
        const IdBeforeStart before = DescribeBeforeStart(recovery, slots_[k]->transactional_id);
        statuses[k] = Prepare(*slots_[k], InitKind::kStart, &before);
      });
    }
  }
  int markers = 0;
  for (size_t k = 0; k < slots_.size(); ++k) {
    if (!statuses[k].ok()) throw std::runtime_error(std::string(statuses[k].message()));
    slots_[k]->state = Slot::State::kFree;
    markers += slots_[k]->init_marker ? 1 : 0;
  }
  log_->debug("{}: initialized {} pool ids, {} of them with an init marker", client_, slots_.size(), markers);
  AbortLingering(recovery);
  growth_limit_ = slots_.size() + kTransactionPoolGrowth;
  current_ = FreeSlot();
  if (current_ == nullptr) current_ = Grow(0);
  current_->state = Slot::State::kOpen;

  const int timeout_ms = kafka_internal::OpenTimeoutMs(config_.kafka_properties);
  absl::StatusOr<std::map<std::string, int32_t>> counts = kafka_internal::FetchPartitionCounts(
      *current_->producer, {config_.topic}, config_.brokers, timeout_ms, *current_->events);
  if (!counts.ok()) throw std::runtime_error(std::string(counts.status().message()));
  committer_ = std::make_unique<Worker>();
  preparer_ = std::make_unique<Worker>();
  log_->info("{}: writing to topic '{}' ({} partitions) on brokers {}, exactly-once, transactional ids {}-{}-0..{}",
             client_, config_.topic, counts->at(config_.topic), config_.brokers, prefix_, subtask_,
             slots_.size() - 1);
}

void KafkaTransactionalSink::AbortLingering(const kafka_protocol::TransactionClient& client) {
  std::vector<std::string> ids;
  for (size_t i = 0; i < kTransactionPoolGrowth; ++i) {
    ids.push_back(TransactionalId(prefix_, subtask_, static_cast<int>(slots_.size() + i)));
  }
  // Scaled down: the ids of old subtasks that no longer exist are cleaned up
  // by the subtask that committed what they pre-committed (CommitRestored
  // ran first). A second restore of the same checkpoint then finds those
  // transactions resolved by their markers.
  for (const auto& [old, size] : restored_pool_sizes_) {
    if (old < parallelism_ || old % parallelism_ != subtask_) continue;
    for (int k = 0; k < size + static_cast<int>(kTransactionPoolGrowth); ++k) {
      ids.push_back(TransactionalId(prefix_, old, k));
    }
  }
  // These are described first: one that nothing is open on and that owes no
  // init marker is left alone (never created, if the broker does not know
  // it). The ones FindLingering finds hold an open transaction.
  const size_t described = ids.size();
  std::vector<std::string> later = FindLingering(client);
  if (!later.empty()) {
    log_->info("{}: aborting the transactions later runs left open on ids {}", client_, absl::StrJoin(later, ", "));
    ids.insert(ids.end(), later.begin(), later.end());
  }
  std::vector<Slot> probes(ids.size());
  std::vector<absl::Status> statuses(probes.size());
  std::vector<char> left_alone(probes.size(), 0);
  {
    std::vector<std::jthread> threads;
    for (size_t i = 0; i < probes.size(); ++i) {
      probes[i].index = -1;
      probes[i].transactional_id = ids[i];
      threads.emplace_back([this, i, described, &client, &probes, &statuses, &left_alone] {
        if (i < described && SettledBeforeStart(DescribeBeforeStart(client, probes[i].transactional_id))) {
          left_alone[i] = 1;
          return;
        }
        statuses[i] = Prepare(probes[i], InitKind::kBreak);
      });
    }
  }
  for (size_t i = 0; i < probes.size(); ++i) {
    if (!statuses[i].ok()) throw std::runtime_error(std::string(statuses[i].message()));
    probes[i].topic.reset();
    probes[i].producer.reset();
  }
  log_->debug("{}: {} ids past the pool initialized with an init marker, {} left alone (nothing open)", client_,
              probes.size() - std::count(left_alone.begin(), left_alone.end(), 1),
              std::count(left_alone.begin(), left_alone.end(), 1));
}

IdBeforeStart KafkaTransactionalSink::DescribeBeforeStart(const kafka_protocol::TransactionClient& client,
                                                          const std::string& id) const {
  IdBeforeStart before;
  absl::StatusOr<kafka_protocol::TransactionDescription> described = client.DescribeTransaction(id);
  if (!described.ok()) {
    log_->debug("{}: cannot describe transactional id '{}' ({}); initializing it with an init marker", client_, id,
                described.status().message());
    return before;
  }
  if (described->found && described->state == "Empty" && described->producer_epoch > 0) {
    absl::StatusOr<std::optional<kafka_protocol::CommittedOffset>> marker =
        client.FetchCommittedOffset(id, config_.topic, 0);
    if (!marker.ok()) {
      log_->debug("{}: cannot read the outcome marker of '{}' ({}); initializing it with an init marker", client_,
                  id, marker.status().message());
      return before;
    }
    if (marker->has_value()) before.newest_marker = (*marker)->offset;
  }
  before.description = *std::move(described);
  return before;
}

std::vector<std::string> KafkaTransactionalSink::FindLingering(
    const kafka_protocol::TransactionClient& client) const {
  struct NotSupported {};
  std::vector<std::string> found;
  int probes = 0;
  // Whether `id` holds an open transaction; nullopt if the broker does not
  // know it.
  auto open_on = [&](const std::string& id) -> std::optional<bool> {
    if (++probes > kMaxLingeringProbes) {
      throw std::runtime_error(absl::StrCat(client_, ": more than ", kMaxLingeringProbes, " transactional ids with "
                                            "the prefix '", prefix_, "' exist; give this sink a new prefix"));
    }
    absl::StatusOr<kafka_protocol::TransactionDescription> d = client.DescribeTransaction(id);
    if (absl::IsUnimplemented(d.status())) throw NotSupported{};
    if (!d.ok()) throw std::runtime_error(absl::StrCat(client_, ": looking for open transactions: ", d.status().message()));
    if (!d->found) return std::nullopt;
    return d->state != "Empty" && d->state != "CompleteCommit" && d->state != "CompleteAbort" && d->state != "Dead";
  };
  // Ids are dense from 0 per subtask (the pool grows at its end): two
  // unknown ones in a row end a subtask's ids.
  auto scan = [&](int subtask, int from) {
    for (int k = from, unknown = 0; unknown < 2; ++k) {
      const std::string id = TransactionalId(prefix_, subtask, k);
      const std::optional<bool> open = open_on(id);
      unknown = open.has_value() ? 0 : unknown + 1;
      if (open.value_or(false)) found.push_back(id);
    }
  };
  try {
    scan(subtask_, static_cast<int>(slots_.size() + kTransactionPoolGrowth));
    // Subtasks of a higher parallelism than this run's, whose ids this
    // subtask answers for (old index mod parallelism).
    for (int old = subtask_ + parallelism_;; old += parallelism_) {
      if (auto it = restored_pool_sizes_.find(old); it != restored_pool_sizes_.end()) {
        scan(old, it->second + static_cast<int>(kTransactionPoolGrowth));
        continue;
      }
      const std::string first = TransactionalId(prefix_, old, 0);
      const std::optional<bool> open = open_on(first);
      if (!open.has_value()) break;  // no run had that many subtasks
      if (*open) found.push_back(first);
      scan(old, 1);
    }
  } catch (const NotSupported&) {
    log_->info("{}: the brokers cannot describe transactions (Kafka before 3.0); transactions later runs left "
               "open on ids this start does not use end at their timeout", client_);
    return {};
  }
  return found;
}

void KafkaTransactionalSink::CheckBrokersReachable() const {
  const int timeout_ms = kafka_internal::OpenTimeoutMs(config_.kafka_properties);
  kafka_protocol::TransactionClientOptions options;
  options.client_id = "weir-kafka-sink-probe";
  options.deadline = absl::Milliseconds(timeout_ms);
  options.request_timeout = std::min(options.request_timeout, absl::Milliseconds(timeout_ms));
  absl::StatusOr<kafka_protocol::TransactionClient> probe =
      kafka_protocol::TransactionClient::Create(config_.brokers, options);
  if (!probe.ok()) throw std::runtime_error(absl::StrCat(client_, ": ", probe.status().message()));
  // Any request does; the first id of this subtask's pool is one it reads
  // anyway.
  absl::StatusOr<kafka_protocol::TransactionDescription> answer =
      probe->DescribeTransaction(TransactionalId(prefix_, subtask_, 0));
  if (absl::IsUnavailable(answer.status()) || absl::IsDeadlineExceeded(answer.status())) {
    throw std::runtime_error(Unreachable(timeout_ms, "", answer.status().message()));
  }
}

std::string KafkaTransactionalSink::Unreachable(int timeout_ms, absl::string_view doing,
                                                absl::string_view detail) const {
  return absl::StrCat(client_, ": cannot reach Kafka brokers at ", config_.brokers, " within ",
                      kafka_internal::SecondsText(timeout_ms), doing, detail.empty() ? "" : " (", detail,
                      detail.empty() ? "" : ")",
                      "; check that the brokers are up and that the sink's brokers name them");
}

kafka_protocol::TransactionClient KafkaTransactionalSink::RecoveryClient() const {
  kafka_protocol::TransactionClientOptions options;
  options.client_id = "weir-kafka-sink-recovery";
  options.logger = log_;
  absl::StatusOr<kafka_protocol::TransactionClient> client =
      kafka_protocol::TransactionClient::Create(config_.brokers, options);
  if (!client.ok()) throw std::runtime_error(absl::StrCat(client_, ": ", client.status().message()));
  return *std::move(client);
}

KafkaTransactionalSink::Slot* KafkaTransactionalSink::Grow(int64_t checkpoint_id) {
  if (slots_.size() >= growth_limit_) {
    throw std::runtime_error(absl::StrCat(
        client_, ": all ", slots_.size(), " transactional ids hold transactions waiting for a checkpoint to "
        "complete (checkpoint ", checkpoint_id, " is the latest); checkpoints are not completing — see the "
        "JobManager's log for why they fail. The job restarts from its last completed checkpoint."));
  }
  Slot* slot = NewSlot(static_cast<int>(slots_.size()));
  if (absl::Status s = Prepare(*slot, InitKind::kBreak); !s.ok()) throw std::runtime_error(std::string(s.message()));
  slot->state = Slot::State::kFree;
  log_->info("{}: no free transactional id at checkpoint {} (transactions wait for checkpoints to complete); "
             "the pool grows to {} ids",
             client_, checkpoint_id, slots_.size());
  return slot;
}

void KafkaTransactionalSink::PollOwned() {
  records_since_poll_ = 0;
  for (auto& slot : slots_) {
    if (slot->producer == nullptr || slot->state == Slot::State::kCommitting ||
        slot->state == Slot::State::kPreparing) {
      continue;  // none yet, or the committer thread holds it
    }
    slot->producer->poll(0);
  }
}

absl::flat_hash_map<std::string, int64_t> KafkaTransactionalSink::CommitRestored(
    const kafka_protocol::TransactionClient& client) {
  absl::flat_hash_map<std::string, int64_t> committed_now;
  std::vector<const Committable*> mine;
  for (const Committable& c : restored_) {
    // A subtask that no longer exists (scaled down) leaves its transactions
    // to subtask (its index mod the parallelism), which also aborts what it
    // left open (AbortLingering).
    if (c.subtask == subtask_ || (c.subtask >= parallelism_ && c.subtask % parallelism_ == subtask_)) {
      mine.push_back(&c);
    }
  }
  if (mine.empty()) return committed_now;
  for (const Committable* c : mine) {
    const absl::Status committed = client.CommitTransaction(c->transactional_id, c->producer_id, c->producer_epoch);
    std::optional<int64_t> marker;
    std::optional<int64_t> chain_from;
    if (absl::IsDataLoss(committed)) {
      // Not open at the recorded producer id and epoch: the id's newest
      // marker tells why.
      absl::StatusOr<std::optional<kafka_protocol::CommittedOffset>> fetched =
          client.FetchCommittedOffset(c->transactional_id, config_.topic, 0);
      if (!fetched.ok()) {
        throw std::runtime_error(absl::StrCat(
            client_, ": transaction '", c->transactional_id, "' of restored checkpoint ", c->checkpoint_id,
            " is no longer open (", committed.message(), ") and its outcome marker cannot be read: ",
            fetched.status().message(), "; the job restarts and tries again"));
      }
      if (fetched->has_value()) {
        marker = (*fetched)->offset;
        chain_from = MarkerChainFrom((*fetched)->metadata);
      }
    }
    const std::string what = absl::StrCat("transaction '", c->transactional_id, "' (producer id ", c->producer_id,
                                          ", epoch ", c->producer_epoch, ") of restored checkpoint ", c->checkpoint_id);
    switch (ClassifyRestoredCommit(committed, marker, chain_from, *c)) {
      case RestoredCommit::kCommitted:
        log_->info("{}: committed {}", client_, what);
        recovery_commits_metric_->Inc();
        committed_now[c->transactional_id] =
            MarkerOffset(c->producer_id, c->producer_epoch, MarkerKind::kData).value_or(-1);
        break;
      case RestoredCommit::kAlreadyCommitted:
        log_->info("{}: {} was already committed; skipped", client_, what);
        resolved_committed_metric_->Inc();
        break;
      case RestoredCommit::kResolvedLater:
        log_->warn("{}: {} was resolved by a later run (newest marker on the id: {}): committed before it, or "
                   "aborted by a run of this sink that restored an older point — its records are in the output "
                   "only if it was committed; skipped",
                   client_, what, DescribeMarker(*marker));
        resolved_later_metric_->Inc();
        break;
      case RestoredCommit::kUnknown:
        log_->warn("{}: cannot tell whether {} was committed: the broker no longer knows the id ({}), and no marker "
                   "on it says; most likely it was idle longer than transactional.id.expiration.ms; skipped",
                   client_, what, committed.message());
        resolved_unknown_metric_->Inc();
        break;
      case RestoredCommit::kLost:
        ThrowDataLoss(*c, committed, marker);
      case RestoredCommit::kFailed:
        throw std::runtime_error(absl::StrCat(client_, ": cannot commit ", what, " after recovery: ",
                                              committed.message()));
    }
  }
  return committed_now;
}

absl::Status KafkaTransactionalSink::Prepare(Slot& slot, InitKind kind, const IdBeforeStart* before) const {
  using kafka_internal::SetOrThrow;
  if (kind == InitKind::kStart && before == nullptr) {
    return absl::InternalError("KafkaTransactionalSink::Prepare(kStart) without the id's state before");
  }
  try {
    slot.init_marker = false;
    // A new session (rule 1): the old producer holds no transaction.
    slot.topic.reset();
    slot.producer.reset();
    slot.producer_id = -1;
    slot.producer_epoch = -1;
    slot.reports.first_failure.clear();
    slot.events = std::make_unique<Events>(absl::StrCat(client_, " transactional id '", slot.transactional_id, "'"));
    std::unique_ptr<RdKafka::Conf> conf(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
    SetOrThrow(*conf, "client.id", "weir-kafka-sink");
    SetOrThrow(*conf, "partitioner", "murmur2_random");
    SetOrThrow(*conf, "transaction.timeout.ms", absl::StrCat(kDefaultTransactionTimeoutMs));
    SetOrThrow(*conf, "linger.ms", kTransactionalLingerMs);
    for (const auto& [name, value] : config_.memory_properties) SetOrThrow(*conf, name, value);
    for (const auto& [name, value] : config_.kafka_properties) SetOrThrow(*conf, name, value);
    SetOrThrow(*conf, "bootstrap.servers", config_.brokers);
    SetOrThrow(*conf, "transactional.id", slot.transactional_id);
    SetOrThrow(*conf, "enable.idempotence", "true");
    SetOrThrow(*conf, "acks", "all");
    SetOrThrow(*conf, "statistics.interval.ms", kStatisticsIntervalMs);
    std::string error;
    if (conf->set("dr_cb", static_cast<RdKafka::DeliveryReportCb*>(&slot.reports), error) != RdKafka::Conf::CONF_OK ||
        conf->set("event_cb", static_cast<RdKafka::EventCb*>(slot.events.get()), error) != RdKafka::Conf::CONF_OK) {
      return absl::InternalError(absl::StrCat("cannot install the Kafka producer callbacks: ", error));
    }
    slot.producer.reset(RdKafka::Producer::create(conf.get(), error));
    if (!slot.producer) {
      return absl::UnavailableError(absl::StrCat(client_, ": cannot create a transactional Kafka producer for brokers ",
                                                 config_.brokers, ": ", error));
    }
    slot.topic.reset(RdKafka::Topic::create(slot.producer.get(), config_.topic, nullptr, error));
    if (!slot.topic) {
      return absl::InternalError(absl::StrCat("cannot create a librdkafka handle for topic '", config_.topic, "': ", error));
    }
    const int timeout_ms = kafka_internal::OpenTimeoutMs(config_.kafka_properties);
    std::unique_ptr<RdKafka::Error> init(slot.producer->init_transactions(timeout_ms));
    if (init && init->code() == RdKafka::ERR__TIMED_OUT) {
      // No broker answered (or none is the transaction coordinator yet):
      // said as the at-least-once sink and the source say it.
      const std::string last = slot.events->last_error();
      return absl::UnavailableError(Unreachable(
          timeout_ms, absl::StrCat(" to initialize transactions for transactional id '", slot.transactional_id, "'"),
          last.empty() ? "" : absl::StrCat("last broker error: ", last)));
    }
    if (init) {
      std::string message = absl::StrCat(client_, ": cannot initialize transactions for transactional id '",
                                         slot.transactional_id, "' on brokers ", config_.brokers, ": ", init->str());
      if (init->code() == RdKafka::ERR_INVALID_TRANSACTION_TIMEOUT) {
        absl::StrAppend(&message, " (kafka.transaction.timeout.ms exceeds the broker's transaction.max.timeout.ms; "
                                  "lower the one or raise the other)");
      }
      return absl::UnavailableError(message);
    }
    // The producer id and epoch arrive with the next statistics.
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (slot.events->producer_id.load() < 0 || slot.events->producer_epoch.load() < 0) {
      if (Clock::now() > deadline) {
        return absl::UnavailableError(absl::StrCat(client_, ": the producer for transactional id '",
                                                   slot.transactional_id, "' did not report its producer id"));
      }
      slot.producer->poll(10);
    }
    slot.producer_id = slot.events->producer_id.load();
    slot.producer_epoch = static_cast<int16_t>(slot.events->producer_epoch.load());
    if (kind == InitKind::kStart && !InitNeedsMarker(*before, slot.producer_id, slot.producer_epoch)) {
      // This initialization aborted nothing and the id owes no marker; its
      // session still starts a chain of its own (nothing here says that the
      // sessions before it followed confirmed commits).
      slot.chain_from = MarkerOffset(slot.producer_id, slot.producer_epoch, MarkerKind::kInit).value_or(-1);
    } else if (kind != InitKind::kRelease) {
      // The init marker: later recoveries of transactions this
      // initialization may have aborted find it (rule 2).
      std::unique_ptr<RdKafka::Error> begun(slot.producer->begin_transaction());
      if (begun) {
        return absl::UnavailableError(absl::StrCat(client_, ": cannot begin the marker transaction of '",
                                                   slot.transactional_id, "': ", begun->str()));
      }
      // This session may abort a transaction: the chain starts again here.
      slot.chain_from = MarkerOffset(slot.producer_id, slot.producer_epoch, MarkerKind::kInit).value_or(-1);
      RETURN_IF_ERROR(SendMarker(slot, MarkerKind::kInit));
      if (absl::Status committed = Commit(slot); !committed.ok()) {
        return absl::Status(committed.code(), absl::StrCat(client_, ": committing the marker transaction of '",
                                                           slot.transactional_id, "': ", committed.message()));
      }
      slot.init_marker = true;
    }
    log_->debug("{}: transactional id '{}' ready: producer id {}, epoch {}{}", client_, slot.transactional_id,
                slot.producer_id, slot.producer_epoch, slot.init_marker ? ", init marker committed" : "");
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(client_, ": ", e.what()));
  }
}

absl::Status KafkaTransactionalSink::SendMarker(Slot& slot, MarkerKind kind) const {
  absl::StatusOr<int64_t> offset = MarkerOffset(slot.producer_id, slot.producer_epoch, kind);
  if (!offset.ok()) return offset.status();
  std::unique_ptr<rd_kafka_topic_partition_list_t, decltype(&rd_kafka_topic_partition_list_destroy)> offsets(
      rd_kafka_topic_partition_list_new(1), &rd_kafka_topic_partition_list_destroy);
  rd_kafka_topic_partition_t* partition = rd_kafka_topic_partition_list_add(offsets.get(), config_.topic.c_str(), 0);
  partition->offset = *offset;
  // librdkafka frees it with the list.
  const std::string metadata = MarkerMetadata(slot.chain_from);
  partition->metadata = malloc(metadata.size());
  if (partition->metadata == nullptr) return absl::ResourceExhaustedError("out of memory for a transaction marker");
  memcpy(partition->metadata, metadata.data(), metadata.size());
  partition->metadata_size = metadata.size();
  std::unique_ptr<rd_kafka_consumer_group_metadata_t, decltype(&rd_kafka_consumer_group_metadata_destroy)> group(
      rd_kafka_consumer_group_metadata_new(slot.transactional_id.c_str()), &rd_kafka_consumer_group_metadata_destroy);
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(kafka_internal::OpenTimeoutMs(config_.kafka_properties));
  while (true) {
    const int remaining = static_cast<int>(std::max<int64_t>(1, Millis(deadline - Clock::now())));
    std::unique_ptr<rd_kafka_error_t, decltype(&rd_kafka_error_destroy)> error(
        rd_kafka_send_offsets_to_transaction(slot.producer->c_ptr(), offsets.get(), group.get(), remaining),
        &rd_kafka_error_destroy);
    if (error == nullptr) return absl::OkStatus();
    if (rd_kafka_error_is_retriable(error.get()) && Clock::now() < deadline) continue;
    return absl::UnavailableError(absl::StrCat(
        client_, ": cannot record the outcome marker of transactional id '", slot.transactional_id,
        "' (offset of consumer group '", slot.transactional_id, "' on ", config_.topic, "-0): ",
        rd_kafka_error_string(error.get()),
        rd_kafka_error_code(error.get()) == RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED
            ? " (the sink's principal needs READ on consumer groups named after its transactional ids)"
            : ""));
  }
}

void KafkaTransactionalSink::BeginTransaction(Slot& slot) {
  std::unique_ptr<RdKafka::Error> begun(slot.producer->begin_transaction());
  if (begun) {
    throw std::runtime_error(absl::StrCat(client_, ": cannot begin a transaction on '", slot.transactional_id,
                                          "': ", begun->str()));
  }
  slot.in_transaction = true;
  if (absl::Status marked = SendMarker(slot, MarkerKind::kData); !marked.ok()) {
    throw std::runtime_error(std::string(marked.message()));
  }
}

void KafkaTransactionalSink::Process(void* record) {
  if (current_ == nullptr) throw std::logic_error("KafkaTransactionalSink::Process before Open or after Close");
  if (results_ready_.load(std::memory_order_relaxed)) DrainResults();
  if (++records_since_poll_ >= kPollEveryRecords) PollOwned();
  Slot& slot = *current_;
  if (!slot.in_transaction) BeginTransaction(slot);
  Produce(slot, *static_cast<const kafka::Record*>(record));
}

void KafkaTransactionalSink::Produce(Slot& slot, const kafka::Record& r) {
  while (true) {
    if (!slot.reports.first_failure.empty()) {
      throw std::runtime_error(absl::StrCat(client_, ": cannot write to Kafka topic '", config_.topic, "': ",
                                            slot.reports.first_failure, " (the transaction will be aborted)"));
    }
    const RdKafka::ErrorCode code = kafka_internal::ProduceRecord(*slot.producer, *slot.topic, r);
    if (code == RdKafka::ERR_NO_ERROR) break;
    if (code == RdKafka::ERR__QUEUE_FULL) {
      slot.producer->poll(kQueueFullPollMs);  // backpressure
      continue;
    }
    if (std::string fatal = slot.events->fatal_error(); !fatal.empty()) {
      throw std::runtime_error(absl::StrCat(client_, ": fatal Kafka producer error on transactional id '",
                                            slot.transactional_id, "': ", fatal));
    }
    throw std::runtime_error(absl::StrCat(client_, ": cannot write a record of ", r.value.size(),
                                          " bytes to Kafka topic '", config_.topic, "': ", RdKafka::err2str(code)));
  }
  ++slot.records;
  slot.producer->poll(0);
}

void KafkaTransactionalSink::Flush(Slot& slot) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(kFlushBudgetMs);
  while (slot.producer->outq_len() > 0) {
    if (Clock::now() > deadline) {
      throw std::runtime_error(absl::StrCat(client_, ": Kafka producer could not deliver ", slot.producer->outq_len(),
                                            " records to topic '", config_.topic, "' on brokers ", config_.brokers,
                                            ": ", slot.events->last_error()));
    }
    slot.producer->flush(kFlushStepMs);
  }
  if (!slot.reports.first_failure.empty()) {
    throw std::runtime_error(absl::StrCat(client_, ": cannot write to Kafka topic '", config_.topic, "': ",
                                          slot.reports.first_failure, " (the transaction will be aborted)"));
  }
}

KafkaTransactionalSink::Slot* KafkaTransactionalSink::FreeSlot() {
  for (auto& slot : slots_) {
    if (slot->state == Slot::State::kFree) return slot.get();
  }
  return nullptr;
}

void KafkaTransactionalSink::PreCommit(int64_t checkpoint_id) {
  Slot& open = *current_;
  if (!open.in_transaction || open.records == 0) return;  // nothing to commit for this interval
  // Flush first: a failure leaves the pool as it was.
  const auto flush_start = Clock::now();
  Flush(open);
  const int64_t flush_ms = Millis(Clock::now() - flush_start);
  Slot* next = FreeSlot();
  if (next == nullptr) next = Grow(checkpoint_id);
  open.state = Slot::State::kPending;
  open.checkpoint_id = checkpoint_id;
  next->state = Slot::State::kOpen;
  current_ = next;
  log_->debug("{}: pre-committed transaction '{}' ({} records, flushed in {} ms) for checkpoint {}", client_,
              open.transactional_id, open.records, flush_ms, checkpoint_id);
}

void KafkaTransactionalSink::PrepareSnapshotPreBarrier(int64_t checkpoint_id) {
  if (current_ == nullptr) throw std::logic_error("KafkaTransactionalSink::PrepareSnapshotPreBarrier before Open");
  DrainResults();
  PollOwned();
  PreCommit(checkpoint_id);
}

void KafkaTransactionalSink::SnapshotState(const CheckpointInfo& checkpoint) {
  DrainResults();
  std::vector<std::string> entries;
  for (auto& slot : slots_) {
    switch (slot->state) {
      case Slot::State::kPending:
      case Slot::State::kCommitting:
        entries.push_back(Committable{slot->transactional_id, slot->producer_id, slot->producer_epoch,
                                      slot->checkpoint_id, subtask_}
                              .Encode());
        break;
      case Slot::State::kCommitted:
        if (slot->released_by == 0) slot->released_by = checkpoint.checkpoint_id;
        break;
      default:
        break;
    }
  }
  committables_state_->Update(std::move(entries));
  pool_state_->Update({absl::StrCat("v1 ", subtask_, " ", slots_.size())});
  snapshot_sizes_[checkpoint.checkpoint_id] = slots_.size();
}

void KafkaTransactionalSink::NotifyCheckpointComplete(int64_t checkpoint_id) {
  if (current_ == nullptr) return;  // closed
  DrainResults();
  PollOwned();
  // A restore now finds at least this pool size, and aborts past it.
  for (auto it = snapshot_sizes_.begin(); it != snapshot_sizes_.end() && it->first <= checkpoint_id;) {
    growth_limit_ = std::max(growth_limit_, it->second + kTransactionPoolGrowth);
    it = snapshot_sizes_.erase(it);
  }
  for (auto& owned : slots_) {
    Slot* slot = owned.get();
    if (slot->state == Slot::State::kPending && slot->checkpoint_id <= checkpoint_id) {
      slot->state = Slot::State::kCommitting;
      PostForSlot(*committer_, slot, [this, slot] { return Commit(*slot); });
    } else if (slot->state == Slot::State::kCommitted && slot->released_by != 0 &&
               slot->released_by <= checkpoint_id) {
      // Never a second transaction in one session (rule 1).
      slot->state = Slot::State::kPreparing;
      PostForSlot(*preparer_, slot, [this, slot] { return Prepare(*slot, InitKind::kRelease); });
    }
  }
  if (!ended_for_final_checkpoint_) return;
  // The task ends once this returns (a final checkpoint completed): its
  // commits must be confirmed by then, or the job would finish with its
  // last transactions open and nobody left to commit them. A failed one
  // throws (DrainResults): the task fails and the restart commits it.
  while (true) {
    DrainResults();
    const bool committing = std::any_of(slots_.begin(), slots_.end(), [](const std::unique_ptr<Slot>& slot) {
      return slot->state == Slot::State::kCommitting;
    });
    if (!committing) break;
    absl::MutexLock lock(&mutex_);
    auto has_results = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return !results_.empty(); };
    mutex_.AwaitWithTimeout(absl::Condition(&has_results), absl::Seconds(1));
  }
}

absl::Status KafkaTransactionalSink::Commit(Slot& slot) const {
  // A retriable error (a coordinator moving, a request timed out) is tried
  // again after a short jittered wait, within the commit timeout; each try
  // gets what is left of it.
  const absl::Time deadline = absl::Now() + absl::Milliseconds(kCommitTimeoutMs);
  std::unique_ptr<RdKafka::Error> error;
  const retry::RetryOutcome outcome = retry::Retry(
      {.backoff = {.initial = absl::Milliseconds(50), .multiplier = 2, .max = absl::Seconds(1), .jitter = 0.5},
       .deadline = deadline},
      [&] {
        const int remaining = static_cast<int>(std::max<int64_t>(1, absl::ToInt64Milliseconds(deadline - absl::Now())));
        const auto start = Clock::now();
        error.reset(slot.producer->commit_transaction(remaining));
        if (!error) {
          log_->debug("{}: commit of '{}' (checkpoint {}) took {} ms", client_, slot.transactional_id,
                      slot.checkpoint_id, Millis(Clock::now() - start));
          return absl::OkStatus();
        }
        return error->is_retriable() ? absl::UnavailableError(error->str()) : absl::AbortedError(error->str());
      },
      [](const absl::Status& status) { return absl::IsUnavailable(status); },
      [&](const absl::Status& status, absl::Duration wait) {
        log_->debug("{}: retrying the commit of '{}' in {}: {}", client_, slot.transactional_id,
                    absl::FormatDuration(wait), status.message());
      });
  if (outcome.status.ok()) return absl::OkStatus();
  if (error->code() == RdKafka::ERR__FENCED || error->code() == RdKafka::ERR_PRODUCER_FENCED ||
      error->code() == RdKafka::ERR_INVALID_PRODUCER_EPOCH) {
    return absl::AbortedError(absl::StrCat(
        "another producer took over transactional id '", slot.transactional_id, "' (", error->str(),
        "): a previous attempt of this job still running, or another job writing with the transactional id "
        "prefix '", prefix_, "'; give each sink its own prefix"));
  }
  if (error->txn_requires_abort() || error->is_fatal()) {
    return absl::DataLossError(error->str());
  }
  return absl::UnavailableError(absl::StrCat("commit of transaction '", slot.transactional_id, "': ", error->str(),
                                             " (", outcome.Summary(), ")"));
}

void KafkaTransactionalSink::DrainResults() {
  std::vector<std::pair<int, absl::Status>> results;
  {
    absl::MutexLock lock(&mutex_);
    results.swap(results_);
    results_ready_.store(false);
  }
  for (auto& [index, status] : results) {
    Slot& slot = *slots_[index];
    if (slot.state == Slot::State::kCommitting) {
      if (!status.ok()) {
        // Whether the records are lost is decided after the restart: the
        // restored checkpoint lists this transaction, and committing it
        // again either succeeds or reports the loss.
        throw std::runtime_error(absl::StrCat(client_, ": committing transaction '", slot.transactional_id,
                                              "' of checkpoint ", slot.checkpoint_id, " failed: ", status.message(),
                                              "; the job restarts and commits it again"));
      }
      ++committed_transactions_;
      committed_metric_->Inc();
      log_->debug("{}: committed transaction '{}' ({} records) of checkpoint {}", client_, slot.transactional_id,
                  slot.records, slot.checkpoint_id);
      slot.state = Slot::State::kCommitted;
      slot.released_by = 0;
      slot.in_transaction = false;
      slot.records = 0;
    } else if (slot.state == Slot::State::kPreparing) {
      if (!status.ok()) throw std::runtime_error(std::string(status.message()));
      slot.state = Slot::State::kFree;
    }
  }
}

void KafkaTransactionalSink::ThrowDataLoss(const Committable& c, const absl::Status& status,
                                           std::optional<int64_t> newest_marker) const {
  const std::string message = absl::StrCat(
      client_, ": DATA LOSS: transaction '", c.transactional_id, "' (producer id ", c.producer_id, ", epoch ",
      c.producer_epoch, ") holding the records of checkpoint ", c.checkpoint_id,
      " cannot be committed: ", status.message(), "; no run of this sink committed anything on the id since (newest ",
      "marker: ", newest_marker.has_value() ? DescribeMarker(*newest_marker) : std::string("none"),
      "). Most likely the broker aborted it because it stayed open longer than transaction.timeout.ms — the job "
      "was down, or its checkpoints did not complete, for that long. Raise kafka.transaction.timeout.ms (up to the "
      "broker's transaction.max.timeout.ms) or fix what keeps checkpoints from completing.");
  log_->error("{}", message);
  // Restoring the same checkpoint again would meet the same loss.
  throw UnrecoverableError(message);
}

void KafkaTransactionalSink::EndInput() {
  if (current_ == nullptr) throw std::logic_error("KafkaTransactionalSink::EndInput before Open or after Close");
  if (context_->checkpoint_follows_end_of_input()) {
    // The final checkpoint pre-commits the open transaction and commits it
    // with the ones still pending.
    ended_for_final_checkpoint_ = true;
    log_->info("{}: input ended, {} records delivered; the final checkpoint commits what is open", client_,
               delivered());
    return;
  }
  // No checkpoint follows the end of the input: commit everything now, the
  // oldest transactions first.
  StopWorkers(/*drain=*/true);
  DrainResults();
  std::vector<Slot*> order;
  for (auto& slot : slots_) {
    if (slot->state == Slot::State::kPending) order.push_back(slot.get());
  }
  std::sort(order.begin(), order.end(), [](Slot* a, Slot* b) { return a->checkpoint_id < b->checkpoint_id; });
  if (current_->in_transaction) {
    Flush(*current_);
    current_->checkpoint_id = 0;  // covered by no checkpoint: the end of the input
    order.push_back(current_);
  }
  for (Slot* slot : order) {
    absl::Status status = Commit(*slot);
    if (!status.ok()) {
      throw std::runtime_error(absl::StrCat(client_, ": committing transaction '", slot->transactional_id,
                                            "' at the end of the input failed: ", status.message()));
    }
    ++committed_transactions_;
    slot->state = slot == current_ ? Slot::State::kOpen : Slot::State::kCommitted;
    slot->in_transaction = false;
    slot->records = 0;
  }
  log_->info("{}: input ended, {} records delivered, {} transactions committed", client_, delivered(),
             committed_transactions_);
}

int64_t KafkaTransactionalSink::delivered() const {
  int64_t total = 0;
  for (const auto& slot : slots_) total += slot->reports.delivered.load();
  return total;
}

void KafkaTransactionalSink::PostForSlot(Worker& worker, Slot* slot, std::function<absl::Status()> work) {
  worker.Post([this, slot, work = std::move(work)] {
    absl::Status status = work();
    absl::MutexLock lock(&mutex_);
    results_.emplace_back(slot->index, std::move(status));
    results_ready_.store(true);
  });
}

void KafkaTransactionalSink::StopWorkers(bool drain) {
  if (committer_ != nullptr) committer_->Stop(drain);
  if (preparer_ != nullptr) preparer_->Stop(drain);
}

void KafkaTransactionalSink::Close() {
  if (slots_.empty()) return;
  StopWorkers(/*drain=*/false);
  // The open transaction was never pre-committed: abort it now rather than
  // leave read_committed readers waiting for its timeout. Pre-committed ones
  // stay as they are: the checkpoint that lists them may have completed,
  // and recovery commits them.
  if (current_ != nullptr && current_->in_transaction && current_->producer != nullptr &&
      current_->events->fatal_error().empty()) {
    current_->producer->purge(RdKafka::Producer::PURGE_QUEUE | RdKafka::Producer::PURGE_INFLIGHT);
    std::unique_ptr<RdKafka::Error> aborted(current_->producer->abort_transaction(kAbortTimeoutMs));
    if (aborted == nullptr && aborted_metric_ != nullptr) aborted_metric_->Inc();
    if (aborted) {
      log_->warn("{}: could not abort the open transaction '{}' ({}); the next start aborts it", client_,
                 current_->transactional_id, aborted->str());
    }
  }
  const int64_t delivered_total = delivered();
  for (auto& slot : slots_) {
    slot->topic.reset();
    slot->producer.reset();
  }
  slots_.clear();
  current_ = nullptr;
  log_->info("{}: closed, {} records delivered, {} transactions committed", client_, delivered_total,
             committed_transactions_);
}

}  // namespace weir::connectors
