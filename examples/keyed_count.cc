// keyed_count: counts the records of each distinct value. For every input
// record it writes one output: key = the input value, count = how many times
// that value has been seen so far.
//
//   weir submit keyed_count.so -p 2 -- --brokers HOST:PORT --input-topic in [--bounded]
//       [--sink kafka|redis|postgres|mysql]                           (default kafka)
//   kafka:    --output-topic out [--guarantee exactly-once|at-least-once|at-most-once]
//             one record per count: key = the value, value = the count in decimal
//   redis:    --redis HOST:PORT [--redis-password PW]
//             SET <value> <count>: each key ends at its latest count
//   postgres: --postgres CONNINFO [--table NAME]
//             [--write-ahead | --upsert | --guarantee at-least-once] [--batch-rows N]
//             one row (key text, count bigint) per count into NAME (default
//             keyed_counts, created if missing); two-phase commit on prepared
//             transactions unless --write-ahead or at-least-once. --upsert:
//             one row per key (key text PRIMARY KEY, count bigint) that ends
//             at the key's latest count
//   mysql:    --mysql HOST:PORT --mysql-database DB [--mysql-user USER]
//             [--mysql-password-file FILE] [--table NAME] [--batch-rows N]
//             one row per key (word VARCHAR(255) PRIMARY KEY, count BIGINT)
//             in NAME (default keyed_counts, created if missing), upserted to
//             the key's latest count; FILE is read on the TaskManagers
#include <cstdint>
#include <stdexcept>
#include <string>

#include "weir/job.h"
#include "weir/mysql.h"
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
    const bool upsert = args.Flag("--upsert");
    if (upsert) strategy = weir::postgres::Strategy::kUpsert;
    weir::postgres::Sink(rows, {.conninfo = args.Require("--postgres"),
                                .table = args.Get("--table", "keyed_counts"),
                                .columns = {"key", "count"},
                                .create_table = upsert ? "key text PRIMARY KEY, count bigint" : "key text, count bigint",
                                .strategy = strategy,
                                .batch_rows = std::stoi(args.Get("--batch-rows", "1000")),
                                .key_columns = upsert ? std::vector<std::string>{"key"} : std::vector<std::string>{}});
  } else if (sink == "mysql") {
    auto rows = counts.Map([](const Count& c) { return weir::mysql::Row{{c.key, std::to_string(c.count)}}; });
    const std::string address = args.Require("--mysql");
    const size_t colon = address.rfind(':');
    if (colon == std::string::npos) throw std::invalid_argument("--mysql is '" + address + "'; expected HOST:PORT");
    weir::mysql::Sink(rows, {.host = address.substr(0, colon),
                             .port = std::stoi(address.substr(colon + 1)),
                             .user = args.Get("--mysql-user", "weir"),
                             .password_file = args.Get("--mysql-password-file", ""),
                             .database = args.Require("--mysql-database"),
                             .table = args.Get("--table", "keyed_counts"),
                             .columns = {"word", "count"},
                             .key_columns = {"word"},
                             .create_table = "word VARCHAR(255) PRIMARY KEY, count BIGINT NOT NULL",
                             .batch_rows = std::stoi(args.Get("--batch-rows", "1000"))});
  } else {
    throw std::invalid_argument("--sink is '" + sink + "'; expected kafka, redis, postgres or mysql");
  }
}

}  // namespace

WEIR_JOB(BuildJob)
