#include "taskmanager/eventtime/timer_service.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/logging/logging.h"
#include "common/state/key_groups.h"
#include "weir/event_time.h"
#include "weir/serializer.h"

namespace weir::taskmanager {

std::string EncodeTimer(int64_t time, std::string_view ns) {
  std::string out;
  weir::internal::AppendOrderedInt64(time, out);
  out.append(ns);
  return out;
}

bool DecodeTimer(std::string_view bytes, int64_t* time, std::string_view* ns) {
  if (bytes.size() < 8) return false;
  *time = weir::internal::ReadOrderedInt64(bytes);
  *ns = bytes.substr(8);
  return true;
}

InternalTimerService::InternalTimerService(KeyedStateBackend* backend, OperatorStateStore* operator_state,
                                           int max_parallelism, int64_t* element_time, int snapshots_before_write)
    : backend_(backend),
      floor_state_(operator_state->GetUnionListState(kWatermarkFloor)),
      max_parallelism_(max_parallelism),
      element_time_(element_time),
      event_(std::max(1, snapshots_before_write)),
      processing_(std::max(1, snapshots_before_write)) {}

void InternalTimerService::Timers::Add(Entry entry, bool in_backend) {
  const Entry* e = &*index.insert(std::move(entry)).first;
  by_value.insert(e);
  if (!in_backend) handed_over[0].insert(e);
}

InternalTimerService::Index::node_type InternalTimerService::Timers::Remove(Index::iterator it, bool* in_backend) {
  const Entry* e = &*it;
  by_value.erase(e);
  // Oldest first: timers due now are mostly old ones.
  bool unwritten = aged.erase(e) > 0;
  for (auto set = handed_over.rbegin(); !unwritten && set != handed_over.rend(); ++set) unwritten = set->erase(e) > 0;
  *in_backend = !unwritten;
  return index.extract(it);
}

void InternalTimerService::Restore() {
  // "<first key group>,<last key group (inclusive)>,<watermark>" from every
  // old subtask.
  const state::KeyGroupRange& range = backend_->range();
  for (const std::string& entry : floor_state_->Get()) {
    std::vector<std::string> parts = absl::StrSplit(entry, ',');
    int first = 0;
    int last = 0;
    int64_t watermark = 0;
    if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &first) || !absl::SimpleAtoi(parts[1], &last) ||
        !absl::SimpleAtoi(parts[2], &watermark)) {
      throw std::runtime_error(absl::StrCat("the checkpointed watermark floor '", entry,
                                            "' is malformed (expected first,last,watermark)"));
    }
    // `last` is inclusive, range.end exclusive.
    for (int group = std::max(first, range.start); group <= last && group < range.end; ++group) {
      if (floor_.empty()) floor_.assign(static_cast<size_t>(range.size()), kMinWatermark);
      int64_t& floor = floor_[static_cast<size_t>(group - range.start)];
      floor = std::max(floor, watermark);
      highest_floor_ = std::max(highest_floor_, floor);
    }
  }
  for (TimeDomain domain : {TimeDomain::kEventTime, TimeDomain::kProcessingTime}) {
    Timers& timers = TimersOf(domain);
    backend_->ForEachEntry(StateName(domain), [&](std::string_view key, std::string_view user_key, std::string_view) {
      int64_t time = 0;
      std::string_view ns;
      if (!DecodeTimer(user_key, &time, &ns)) {
        throw std::runtime_error(absl::StrCat("the keyed state holds a malformed timer in '", std::string(StateName(domain)), "'"));
      }
      timers.Add(Entry(time, std::string(key), std::string(ns)), /*in_backend=*/true);
    });
  }
}

void InternalTimerService::SnapshotState() {
  WriteAged();  // left by a snapshot without AfterSnapshot
  std::string user_key;
  static const std::string kEmpty;
  for (TimeDomain domain : {TimeDomain::kEventTime, TimeDomain::kProcessingTime}) {
    Timers& timers = TimersOf(domain);
    for (const EntrySet& set : timers.handed_over) {
      for (const Entry* e : set) {
        const auto& [time, key, ns] = *e;
        user_key.clear();
        weir::internal::AppendOrderedInt64(time, user_key);
        user_key.append(ns);
        backend_->AddPendingEntry(key, StateName(domain), user_key, &kEmpty);
      }
    }
    // One snapshot older each.
    std::vector<EntrySet>& generations = timers.handed_over;
    timers.aged = std::move(generations.back());
    for (size_t i = generations.size() - 1; i > 0; --i) generations[i] = std::move(generations[i - 1]);
    generations[0].clear();
  }
  // One entry per run of key groups with the same floor.
  const state::KeyGroupRange& range = backend_->range();
  std::vector<std::string> entries;
  auto floor_of = [&](int group) {
    return floor_.empty() ? watermark_ : std::max(watermark_, floor_[static_cast<size_t>(group - range.start)]);
  };
  for (int first = range.start; first < range.end;) {
    const int64_t floor = floor_of(first);
    int last = first;  // inclusive
    while (last + 1 < range.end && floor_of(last + 1) == floor) ++last;
    if (floor != kMinWatermark) entries.push_back(absl::StrCat(first, ",", last, ",", floor));
    first = last + 1;
  }
  floor_state_->Update(std::move(entries));
}

size_t InternalTimerService::AfterSnapshot() { return WriteAged(); }

size_t InternalTimerService::WriteAged() {
  size_t written = 0;
  for (TimeDomain domain : {TimeDomain::kEventTime, TimeDomain::kProcessingTime}) {
    EntrySet& aged = TimersOf(domain).aged;
    if (aged.empty()) continue;
    written += aged.size();
    backend_->StartWriteBatch();
    for (const Entry* e : aged) {
      const auto& [time, key, ns] = *e;
      backend_->SetCurrentKey(key);
      backend_->PutEntry(StateName(domain), EncodeTimer(time, ns), "");
    }
    backend_->CommitWriteBatch();
    aged.clear();
  }
  return written;
}

int64_t InternalTimerService::CurrentWatermark() const {
  if (highest_floor_ <= watermark_) return watermark_;
  const std::string_view key = backend_->current_key();
  const int group = state::KeyGroupForKey(absl::string_view(key.data(), key.size()), max_parallelism_);
  return std::max(watermark_, floor_[static_cast<size_t>(group - backend_->range().start)]);
}

int64_t InternalTimerService::CurrentProcessingTime() const { return weir::internal::WallClockMs(); }

void InternalTimerService::Register(TimeDomain domain, int64_t time, std::string_view ns) {
  if (domain == TimeDomain::kEventTime && warn_owner_.has_value()) {
    logging::Get("task")->warn("{} registered an event-time timer (at {}), but no watermark strategy is upstream of "
                               "it: its event time does not move, and event-time timers fire only when a bounded "
                               "input ends; give the source a watermark strategy (kafka::SourceOptions::watermarks) "
                               "or call AssignTimestampsAndWatermarks before it",
                               *warn_owner_, time);
    warn_owner_.reset();
  }
  const std::string_view key = backend_->current_key();
  Timers& timers = TimersOf(domain);
  // Most calls find the timer there (a window's every record registers it).
  if (timers.by_value.find(View(time, key, ns)) != timers.by_value.end()) return;
  // Into the snapshots, unless it is gone by then.
  timers.Add(Entry(time, std::string(key), std::string(ns)), /*in_backend=*/false);
}

void InternalTimerService::Delete(TimeDomain domain, int64_t time, std::string_view ns) {
  const std::string_view key = backend_->current_key();
  Timers& timers = TimersOf(domain);
  auto found = timers.by_value.find(View(time, key, ns));
  if (found == timers.by_value.end()) return;
  bool in_backend = false;
  timers.Remove(timers.index.find(**found), &in_backend);
  if (in_backend) backend_->RemoveEntry(StateName(domain), EncodeTimer(time, ns));
}

void InternalTimerService::AdvanceWatermark(int64_t watermark, absl::FunctionRef<void(const FiredTimer&)> fire) {
  if (watermark > watermark_) watermark_ = watermark;
  Fire(TimeDomain::kEventTime, watermark, fire);
}

void InternalTimerService::FireProcessingTimers(int64_t now_ms, absl::FunctionRef<void(const FiredTimer&)> fire) {
  Fire(TimeDomain::kProcessingTime, now_ms, fire);
}

std::optional<int64_t> InternalTimerService::NextProcessingTime() const {
  if (processing_.index.empty()) return std::nullopt;
  return std::get<0>(*processing_.index.begin());
}

void InternalTimerService::Fire(TimeDomain domain, int64_t limit, absl::FunctionRef<void(const FiredTimer&)> fire) {
  Timers& timers = TimersOf(domain);
  const absl::Cleanup restore_time = [slot = element_time_, saved = *element_time_] { *slot = saved; };
  while (!timers.index.empty() && std::get<0>(*timers.index.begin()) <= limit) {
    bool in_backend = false;
    auto node = timers.Remove(timers.index.begin(), &in_backend);
    const auto& [time, key, ns] = node.value();
    backend_->SetCurrentKey(key);
    // Never written (nothing to remove), or in the backend.
    if (in_backend) backend_->RemoveEntry(StateName(domain), EncodeTimer(time, ns));
    *element_time_ = domain == TimeDomain::kEventTime ? time : kNoTimestamp;
    fire(FiredTimer{.domain = domain, .time = time, .key = key, .ns = ns});
  }
}

}  // namespace weir::taskmanager
