// sink_bench: keyed_count into Redis and PostgreSQL by each sink strategy,
// beside an at-least-once baseline to the same server, in one run:
//
//   bench/run.sh sinks [--records N] [--keys K] [--parallelism P] [--checkpoint-ms M] [--probes N]
//
// Throughput: N records (K distinct words) are in the input topic first;
// each configuration runs keyed_count --bounded from `weir submit` until the
// job is FINISHED (start-up and the final checkpoint included) and reports
// records/s and its ratio to the baseline:
//   Kafka       the same job into a topic (at-least-once): what the
//               pipeline allows whatever the sink, for reference;
//   Redis       a plain hiredis client SETting the same N counts, pipelined
//               1000 deep (the baseline), and the idempotent Redis sink;
//   PostgreSQL  the at-least-once sink (autocommitted COPY, the baseline),
//               two-phase commit, write-ahead log and upsert (one row per
//               key), each into its own table;
//   MariaDB     the MySQL upsert sink (one row per key), against the Kafka
//               reference (no baseline of its own).
// Visibility: with the job running unbounded and otherwise idle, a record
// with a new word is produced every 200 ms; the bench polls the server every
// 2 ms until its count is there and reports p50 and max of produce ->
// visible. Two-phase commit and write-ahead make a count visible when the
// checkpoint after it completes: expect about half a checkpoint interval
// plus the checkpoint's duration; every sink also waits for
// execution.buffer-timeout (100 ms), since keyed_count sends its records
// over the network between the source and the counting subtasks.
#include <hiredis/hiredis.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/bench_flags.h"
#include "connectors/mysql/mysql_connection.h"
#include "connectors/postgres/postgres_connection.h"
#include "tests/kafka/kafka_io.h"
#include "tests/kafka/test_kafka.h"
#include "tests/testing/local_cluster.h"
#include "tests/testing/script_server.h"

namespace {

using weir::connectors::PostgresConnection;
using weir::testing::LocalCluster;
using weir::testing::ScriptServer;

struct Flags {
  int64_t records = 1000000;
  int64_t keys = 10000;
  int64_t parallelism = 2;
  int64_t checkpoint_ms = 1000;
  int64_t probes = 25;
};

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

struct Redis {
  redisContext* c = nullptr;
  explicit Redis(const std::string& address) {
    const size_t colon = address.rfind(':');
    c = redisConnect(address.substr(0, colon).c_str(), std::stoi(address.substr(colon + 1)));
  }
  ~Redis() {
    if (c != nullptr) redisFree(c);
  }
  bool ok() const { return c != nullptr && c->err == 0; }
  bool Exists(const std::string& key) {
    auto* r = static_cast<redisReply*>(redisCommand(c, "EXISTS %b", key.data(), key.size()));
    const bool there = r != nullptr && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    freeReplyObject(r);
    return there;
  }
};

// The baseline for Redis: the counts keyed_count would write, SET by one
// client, 1000 commands in flight.
absl::Duration PlainRedisWriter(const std::string& address, const Flags& flags) {
  Redis redis(address);
  if (!redis.ok()) return absl::InfiniteDuration();
  std::map<std::string, int64_t> counts;
  const absl::Time start = absl::Now();
  int64_t in_flight = 0;
  auto drain = [&] {
    for (; in_flight > 0; --in_flight) {
      void* reply = nullptr;
      if (redisGetReply(redis.c, &reply) != REDIS_OK) return;
      freeReplyObject(reply);
    }
  };
  for (int64_t i = 0; i < flags.records; ++i) {
    const std::string word = absl::StrCat("plain-w", i % flags.keys);
    const std::string count = absl::StrCat(++counts[word]);
    redisAppendCommand(redis.c, "SET %b %b", word.data(), word.size(), count.data(), count.size());
    if (++in_flight >= 1000) drain();
  }
  drain();
  return absl::Now() - start;
}

std::vector<weir::test::KafkaMessage> Words(int64_t first, int64_t n, int64_t keys) {
  std::vector<weir::test::KafkaMessage> batch;
  batch.reserve(n);
  for (int64_t i = first; i < first + n; ++i) batch.push_back({absl::StrCat("id-", i), absl::StrCat("w", i % keys)});
  return batch;
}

// Submits keyed_count reading `in` with `sink_args`; "" on failure.
std::string SubmitCount(LocalCluster& cluster, const std::string& bootstrap, const std::string& in,
                        const Flags& flags, std::vector<std::string> sink_args, bool bounded) {
  std::vector<std::string> args = {"--brokers", bootstrap, "--input-topic", in};
  if (bounded) args.push_back("--bounded");
  args.insert(args.end(), sink_args.begin(), sink_args.end());
  std::string error;
  const std::string job = cluster.Submit(
      std::string(WEIR_JOBS_DIR) + "/keyed_count.so",
      {"-p", absl::StrCat(flags.parallelism), absl::StrCat("-Dexecution.checkpointing.interval=", flags.checkpoint_ms, "ms")},
      args, &error);
  if (job.empty()) std::fprintf(stderr, "bench: submission failed: %s\n", error.c_str());
  return job;
}

// keyed_count --bounded over the prepared input, submission to FINISHED.
absl::Duration TimeJob(LocalCluster& cluster, const std::string& bootstrap, const std::string& in, const Flags& flags,
                       std::vector<std::string> sink_args) {
  const absl::Time start = absl::Now();
  const std::string job = SubmitCount(cluster, bootstrap, in, flags, std::move(sink_args), true);
  if (job.empty()) return absl::InfiniteDuration();
  nlohmann::json end = cluster.WaitForJobEnd(job, absl::Minutes(10));
  if (end["state"] != "FINISHED") {
    std::fprintf(stderr, "bench: the job ended %s: %s\n", end.dump().c_str(), cluster.Logs().c_str());
    return absl::InfiniteDuration();
  }
  return absl::Now() - start;
}

// Produce -> visible for `flags.probes` new words, with an unbounded
// keyed_count running; `visible(word)` polls the server.
std::pair<double, double> Visibility(LocalCluster& cluster, const std::string& bootstrap, const Flags& flags,
                                     std::vector<std::string> sink_args,
                                     const std::function<bool(const std::string&)>& visible) {
  const std::string in = weir::test::UniqueTopicName("sink-bench-probe");
  if (!weir::test::CreateTopic(bootstrap, in, 4).ok()) return {-1, -1};
  const std::string job = SubmitCount(cluster, bootstrap, in, flags, std::move(sink_args), false);
  if (job.empty()) return {-1, -1};
  absl::SleepFor(absl::Seconds(3));  // started, first checkpoints done
  std::vector<double> ms;
  static int probe_run = 0;
  ++probe_run;
  for (int64_t i = 0; i < flags.probes; ++i) {
    const std::string word = absl::StrCat("probe-", probe_run, "-", i);
    const absl::Time sent = absl::Now();
    if (!weir::test::ProduceMessages(bootstrap, in, {{"probe", word}}).ok()) continue;
    const absl::Time deadline = sent + absl::Seconds(30);
    while (!visible(word) && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(2));
    ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - sent));
    absl::SleepFor(absl::Milliseconds(200));
  }
  cluster.Weir({"cancel", job});
  cluster.WaitForJobEnd(job, absl::Seconds(60));
  if (ms.empty()) return {-1, -1};
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.back()};
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  weir::bench::BenchFlags parser("bench");
  parser.Int("--records", &flags.records);
  parser.Int("--keys", &flags.keys);
  parser.Int("--parallelism", &flags.parallelism);
  parser.Int("--checkpoint-ms", &flags.checkpoint_ms);
  parser.Int("--probes", &flags.probes);
  if (!parser.Parse(argc, argv)) return 2;
  const std::string bootstrap = weir::test::TestKafkaBootstrap();
  if (bootstrap.empty()) return 1;
  auto redis = ScriptServer::Start("redis.sh");
  auto postgres = ScriptServer::Start("postgres.sh");
  auto mariadb = ScriptServer::Start("mariadb.sh");
  if (!redis.ok() || !postgres.ok() || !mariadb.ok()) {
    std::fprintf(stderr, "bench: %s %s %s\n", redis.status().ToString().c_str(), postgres.status().ToString().c_str(),
                 mariadb.status().ToString().c_str());
    return 1;
  }
  const std::string conninfo = (*postgres)->address();
  LocalCluster cluster({.taskmanagers = 1, .slots_per_taskmanager = static_cast<int>(flags.parallelism)});
  cluster.Start();

  const std::string in = weir::test::UniqueTopicName("sink-bench-in");
  if (!weir::test::CreateTopic(bootstrap, in, 4).ok()) return 1;
  for (int64_t first = 0; first < flags.records; first += 10000) {
    if (!weir::test::ProduceMessages(bootstrap, in, Words(first, std::min<int64_t>(10000, flags.records - first), flags.keys))
             .ok()) {
      return 1;
    }
  }
  std::printf("sink benchmark: keyed_count, %lld records over %lld keys, parallelism %lld, checkpoints every %lld ms\n",
              static_cast<long long>(flags.records), static_cast<long long>(flags.keys),
              static_cast<long long>(flags.parallelism), static_cast<long long>(flags.checkpoint_ms));

  const std::vector<std::string> redis_args = {"--sink", "redis", "--redis", (*redis)->address()};
  auto pg_args = [&](const std::string& table, std::vector<std::string> more) {
    std::vector<std::string> args = {"--sink", "postgres", "--postgres", conninfo, "--table", table};
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  const std::vector<std::string> mysql_args = {"--sink", "mysql", "--mysql", (*mariadb)->address(),
                                               "--mysql-database", "weir", "--mysql-password-file",
                                               (*mariadb)->dir() + "/password", "--table", "bench_upsert"};
  const double n = static_cast<double>(flags.records);
  auto row = [&](const char* name, absl::Duration d, double baseline_rate) {
    const double rate = n / Seconds(d);
    if (baseline_rate <= 0) {
      std::printf("  %-34s %8.1f s %10.0f records/s  (baseline)\n", name, Seconds(d), rate);
    } else {
      std::printf("  %-34s %8.1f s %10.0f records/s  ratio %.2f\n", name, Seconds(d), rate, rate / baseline_rate);
    }
    return rate;
  };
  std::printf("throughput (submission to FINISHED; ratio to the baseline of the same server):\n");
  // The same job into Kafka: what the pipeline itself (source, key-by,
  // state) allows, whatever the sink.
  const std::string out = weir::test::UniqueTopicName("sink-bench-out");
  if (!weir::test::CreateTopic(bootstrap, out, 4).ok()) return 1;
  const double kafka_rate =
      row("kafka: at-least-once (reference)",
          TimeJob(cluster, bootstrap, in, flags, {"--sink", "kafka", "--output-topic", out}), 0);
  const double redis_base = row("redis: plain client (baseline)", PlainRedisWriter((*redis)->address(), flags), 0);
  const double redis_rate = row("redis: idempotent sink", TimeJob(cluster, bootstrap, in, flags, redis_args), redis_base);
  std::printf("  %-34s %.2f\n", "redis sink / kafka sink", redis_rate / kafka_rate);
  const double pg_base =
      row("postgres: at-least-once (baseline)",
          TimeJob(cluster, bootstrap, in, flags, pg_args("bench_alo", {"--guarantee", "at-least-once"})), 0);
  row("postgres: two-phase commit", TimeJob(cluster, bootstrap, in, flags, pg_args("bench_2pc", {})), pg_base);
  row("postgres: write-ahead log", TimeJob(cluster, bootstrap, in, flags, pg_args("bench_wal", {"--write-ahead"})),
      pg_base);
  row("postgres: upsert", TimeJob(cluster, bootstrap, in, flags, pg_args("bench_upsert", {"--upsert"})), pg_base);
  row("mysql: upsert (ratio to kafka)", TimeJob(cluster, bootstrap, in, flags, mysql_args), kafka_rate);

  std::printf("produce -> visible (%lld probes, idle job):\n", static_cast<long long>(flags.probes));
  Redis reader((*redis)->address());
  auto pg = PostgresConnection::Connect(conninfo, "sink_bench");
  if (!reader.ok() || !pg.ok()) return 1;
  auto in_table = [&](const std::string& table) {
    return [&, table](const std::string& word) {
      auto rows = (*pg)->Exec(absl::StrCat("SELECT 1 FROM ", table, " WHERE key = $1"), {word});
      return rows.ok() && !rows->empty();
    };
  };
  auto report = [](const char* name, std::pair<double, double> l) {
    std::printf("  %-34s p50 %7.1f ms, max %7.1f ms\n", name, l.first, l.second);
  };
  report("redis: idempotent sink",
         Visibility(cluster, bootstrap, flags, redis_args, [&](const std::string& w) { return reader.Exists(w); }));
  report("postgres: at-least-once",
         Visibility(cluster, bootstrap, flags, pg_args("bench_alo", {"--guarantee", "at-least-once"}),
                    in_table("bench_alo")));
  report("postgres: two-phase commit",
         Visibility(cluster, bootstrap, flags, pg_args("bench_2pc", {}), in_table("bench_2pc")));
  report("postgres: write-ahead log",
         Visibility(cluster, bootstrap, flags, pg_args("bench_wal", {"--write-ahead"}), in_table("bench_wal")));
  report("postgres: upsert",
         Visibility(cluster, bootstrap, flags, pg_args("bench_upsert", {"--upsert"}), in_table("bench_upsert")));
  std::string password;
  std::getline(*std::make_unique<std::ifstream>((*mariadb)->dir() + "/password"), password);
  const size_t colon = (*mariadb)->address().rfind(':');
  auto my = weir::connectors::MySqlConnection::Connect({.host = (*mariadb)->address().substr(0, colon),
                                                         .port = std::stoi((*mariadb)->address().substr(colon + 1)),
                                                         .user = "weir",
                                                         .password = password,
                                                         .database = "weir"});
  if (!my.ok()) return 1;
  report("mysql: upsert", Visibility(cluster, bootstrap, flags, mysql_args, [&](const std::string& word) {
           std::string sql = "SELECT 1 FROM bench_upsert WHERE word = ";
           (*my)->AppendLiteral(word, sql);
           auto rows = (*my)->Exec(sql);
           return rows.ok() && !rows->empty();
         }));
  return 0;
}
