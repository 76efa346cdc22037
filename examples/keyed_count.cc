// keyed_count: counts the records of each distinct value. For every input
// record it writes one output: key = the input value, count = how many times
// that value has been seen so far.
//
//   weir submit keyed_count.so -p 2 -- --brokers HOST:PORT --input-topic in [--bounded]
//       [--sink kafka|redis|postgres]                                 (default kafka)
//   kafka:    --output-topic out [--guarantee exactly-once|at-least-once|at-most-once]
//             one record per count: key = the value, value = the count in decimal
//   redis:    --redis HOST:PORT [--redis-password PW]
//             SET <value> <count>: each key ends at its latest count
//   postgres: --postgres CONNINFO [--table NAME] [--write-ahead | --guarantee at-least-once]
//             [--batch-rows N]
//             one row (key text, count bigint) per count into NAME (default
//             keyed_counts, created if missing); two-phase commit on prepared
//             transactions unless --write-ahead or at-least-once
#include <cstdint>
#include <stdexcept>
#include <string>

#include "weir/job.h"
#include "weir/postgres.h"
#include "weir/redis.h"

namespace {

struct Count {
  std::string key;
  int64_t count = 0;
};

}  // namespace

template <>
struct weir::Serializer<Count> {
  static void Write(const Count& c, std::string& out) {
    internal::WriteField(c.key, out);
    internal::WriteField(c.count, out);
  }
  static Count Read(std::string_view in) {
    size_t pos = 0;
    Count c;
    c.key = std::string(internal::ReadField(in, &pos));
    c.count = Serializer<int64_t>::Read(internal::ReadField(in, &pos));
    return c;
  }
};

namespace {

void CountPerKey(const weir::kafka::Record& in, weir::KeyedContext<std::string>& ctx, weir::Collector<Count>& out) {
  auto count = ctx.State<int64_t>("count");
  int64_t n = count.Get().value_or(0) + 1;
  count.Set(n);
  out.Collect(Count{in.value, n});
}

void BuildJob(weir::StreamEnvironment& env, const weir::JobArgs& args) {
  std::string brokers = args.Require("--brokers");
  env.SetJobName("keyed_count");
  auto input = weir::kafka::Source(env, {.brokers = brokers,
                                         .topics = {args.Require("--input-topic")},
                                         .bounded = args.Flag("--bounded")});
  auto counts = input.KeyBy([](const weir::kafka::Record& r) { return r.value; })
                    .Process<Count>(CountPerKey)
                    .Name("CountPerKey");
  const std::string sink = args.Get("--sink", "kafka");
  if (sink == "kafka") {
    auto records = counts.Map([](const Count& c) {
      weir::kafka::Record r;
      r.key = c.key;
      r.value = std::to_string(c.count);
      return r;
    });
    weir::kafka::Sink(records, {.brokers = brokers,
                                .topic = args.Require("--output-topic"),
                                .guarantee = weir::kafka::ParseGuarantee(args.Get("--guarantee", "at-least-once"))});
  } else if (sink == "redis") {
    auto writes = counts.Map([](const Count& c) { return weir::redis::Record{c.key, std::nullopt, std::to_string(c.count)}; });
    weir::redis::Sink(writes, {.address = args.Require("--redis"), .password = args.Get("--redis-password", "")});
  } else if (sink == "postgres") {
    auto rows = counts.Map([](const Count& c) {
      return weir::postgres::Row{{c.key, std::to_string(c.count)}};
    });
    weir::postgres::Strategy strategy = weir::postgres::Strategy::kTwoPhaseCommit;
    if (args.Flag("--write-ahead")) strategy = weir::postgres::Strategy::kWriteAhead;
    if (args.Get("--guarantee", "exactly-once") == "at-least-once") strategy = weir::postgres::Strategy::kAtLeastOnce;
    weir::postgres::Sink(rows, {.conninfo = args.Require("--postgres"),
                                .table = args.Get("--table", "keyed_counts"),
                                .columns = {"key", "count"},
                                .create_table = "key text, count bigint",
                                .strategy = strategy,
                                .batch_rows = std::stoi(args.Get("--batch-rows", "1000"))});
  } else {
    throw std::invalid_argument("--sink is '" + sink + "'; expected kafka, redis or postgres");
  }
}

}  // namespace

WEIR_JOB(BuildJob)
