// windowed_count: how many records each key had per event-time window,
// Kafka to Kafka. One output record per key and window, once the watermark
// passes the window's end: key "<key>@<window start ms>", value the count,
// timestamp the window's last millisecond.
//
//   weir submit windowed_count.so -p 2 -Dexecution.checkpointing.interval=10s --
//       --brokers HOST:PORT --input-topic in --output-topic out   (one command line)
//       [--window-ms 60000] [--slide-ms N]          (sliding windows of window-ms every N)
//       [--out-of-orderness-ms 5000] [--idleness-ms 0] [--allowed-lateness-ms 0]
//       [--event-time kafka|value]                  (default kafka: the record timestamp;
//                                                    value: the value's leading "<unix ms>")
//       [--invalid-timestamps fail|drop]            (default fail: a record without a usable
//                                                    time fails the job, naming it; drop: dropped
//                                                    and counted)
//       [--guarantee exactly-once|at-least-once]    (default exactly-once)
//       [--late-topic late]                         (records too late for their windows)
//       [--skip-key KEY]                            (drop the records of KEY before counting)
//
// The key counted is the input record's key (records without one count
// under ""). Records later than the allowed lateness are counted in
// weir_window_late_records_total and written unchanged to --late-topic,
// with the same guarantee, or dropped without one.
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "weir/job.h"

namespace {

struct WindowCount {
  std::string key;
  int64_t window_start = 0;
  int64_t window_end = 0;
  int64_t count = 0;
};

}  // namespace

template <>
struct weir::Serializer<WindowCount> {
  static void Write(const WindowCount& c, std::string& out) {
    internal::WriteField(c.key, out);
    internal::WriteField(c.window_start, out);
    internal::WriteField(c.window_end, out);
    internal::WriteField(c.count, out);
  }
  static WindowCount Read(std::string_view in) {
    size_t pos = 0;
    WindowCount c;
    c.key = std::string(internal::ReadField(in, &pos));
    c.window_start = Serializer<int64_t>::Read(internal::ReadField(in, &pos));
    c.window_end = Serializer<int64_t>::Read(internal::ReadField(in, &pos));
    c.count = Serializer<int64_t>::Read(internal::ReadField(in, &pos));
    return c;
  }
};

namespace {

using weir::kafka::Record;

int64_t Millis(const weir::JobArgs& args, const std::string& flag, const std::string& fallback) {
  const std::string text = args.Get(flag, fallback);
  size_t used = 0;
  int64_t value = -1;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || value < 0) {
    throw std::invalid_argument(flag + " is '" + text + "'; expected milliseconds (a whole number, 0 or more)");
  }
  return value;
}

// The leading "<unix ms>" of a value ("1700000000000" or "1700000000000,...").
int64_t TimeInValue(const Record& r) {
  size_t used = 0;
  try {
    const int64_t ms = std::stoll(r.value, &used);
    if (used == r.value.size() || r.value[used] == ',') return ms;
  } catch (const std::exception&) {
  }
  // No usable time: the watermark strategy's invalid_timestamps policy
  // (fail, naming the record) decides.
  return weir::kNoTimestamp;
}

template <typename Windowed>
weir::WindowResult<WindowCount, Record> Count(const Windowed& windowed) {
  return windowed.template Aggregate<WindowCount>(
      weir::CountAggregate<Record>{},
      [](const std::string& key, const weir::TimeWindow& w, int64_t n, weir::Collector<WindowCount>& out) {
        out.Collect(WindowCount{key, w.start, w.end, n});
      });
}

void BuildJob(weir::StreamEnvironment& env, const weir::JobArgs& args) {
  const std::string brokers = args.Require("--brokers");
  env.SetJobName("windowed_count");
  const auto window = std::chrono::milliseconds(Millis(args, "--window-ms", "60000"));
  const auto slide = std::chrono::milliseconds(Millis(args, "--slide-ms", "0"));
  const auto lateness = std::chrono::milliseconds(Millis(args, "--allowed-lateness-ms", "0"));
  const std::string event_time = args.Get("--event-time", "kafka");
  if (event_time != "kafka" && event_time != "value") {
    throw std::invalid_argument("--event-time is '" + event_time + "'; expected kafka or value");
  }

  weir::kafka::SourceOptions in{.brokers = brokers, .topics = {args.Require("--input-topic")}};
  in.watermarks = weir::WatermarkStrategy<Record>{
      .out_of_orderness = std::chrono::milliseconds(Millis(args, "--out-of-orderness-ms", "5000")),
      .idleness = std::chrono::milliseconds(Millis(args, "--idleness-ms", "0"))};
  if (event_time == "value") in.watermarks->timestamp = TimeInValue;
  const std::string invalid = args.Get("--invalid-timestamps", "fail");
  if (invalid != "fail" && invalid != "drop") {
    throw std::invalid_argument("--invalid-timestamps is '" + invalid + "'; expected fail or drop");
  }
  if (invalid == "drop") in.watermarks->invalid_timestamps = weir::InvalidTimestamps::kDrop;

  auto records_in = weir::kafka::Source(env, in);
  // A stateless step a later version of a job may add: the savepoint of the
  // version without it restores into it (state is found by operator id).
  if (const std::string skip = args.Get("--skip-key", ""); !skip.empty()) {
    records_in = records_in.Filter([skip](const Record& r) { return r.key != skip; }).Name("SkipKey");
  }
  auto keyed = records_in.KeyBy([](const Record& r) { return r.key.value_or(""); });
  weir::WindowResult<WindowCount, Record> counts =
      slide.count() > 0 ? Count(keyed.Window(weir::SlidingWindows{.size = window, .slide = slide})
                                    .AllowedLateness(lateness))
                        : Count(keyed.Window(weir::TumblingWindows{.size = window}).AllowedLateness(lateness));
  counts.Name("CountPerWindow");
  const auto guarantee = weir::kafka::ParseGuarantee(args.Get("--guarantee", "exactly-once"));
  if (const std::string late = args.Get("--late-topic", ""); !late.empty()) {
    weir::kafka::Sink(counts.LateRecords(), {.brokers = brokers, .topic = late, .guarantee = guarantee},
                      "LateRecordsSink");
  }
  auto records = counts.Map([](const WindowCount& c) {
    Record r;
    r.key = c.key + "@" + std::to_string(c.window_start);
    r.value = std::to_string(c.count);
    r.timestamp_ms = c.window_end - 1;
    return r;
  });
  weir::kafka::Sink(records, {.brokers = brokers, .topic = args.Require("--output-topic"), .guarantee = guarantee});
}

}  // namespace

WEIR_JOB(BuildJob)
