// The three ways to end-to-end consistency beyond Kafka, on a real cluster:
// keyed_count reads the test broker and writes every count to a real Redis
// (idempotent writes), a real PostgreSQL (two-phase commit on prepared
// transactions, write-ahead log, or idempotent upserts) or a real MariaDB
// (idempotent upserts) while TaskManagers are SIGKILLed, a TaskManager
// crashes between "checkpoint complete" and "commit prepared", and the
// servers go away. The servers are throw-away instances from
// scripts/redis.sh, scripts/postgres.sh and scripts/mariadb.sh.
#include <hiredis/hiredis.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "connectors/mysql/mysql_connection.h"
#include "connectors/mysql/mysql_sink.h"
#include "connectors/postgres/postgres_connection.h"
#include "connectors/postgres/postgres_sink.h"
#include "gtest/gtest.h"
#include "tests/kafka/cluster_job_test.h"
#include "tests/kafka/kafka_io.h"
#include "tests/testing/fake_operator_context.h"
#include "tests/testing/local_cluster.h"
#include "tests/testing/script_server.h"

namespace weir {
namespace {

using connectors::PostgresConnection;
using test::KafkaMessage;
using testing::LocalCluster;
using testing::ScriptServer;
using testing::WaitFor;

const std::string kJobs = WEIR_JOBS_DIR;
constexpr int kDistinct = 300;

// Input record i: value "w<i % kDistinct>" (the word keyed_count counts).
std::vector<KafkaMessage> Words(int first, int n) {
  std::vector<KafkaMessage> batch;
  batch.reserve(n);
  for (int i = first; i < first + n; ++i) batch.push_back({absl::StrCat("id-", i), absl::StrCat("w", i % kDistinct)});
  return batch;
}

std::map<std::string, int> TrueCounts(int records) {
  std::map<std::string, int> truth;
  for (int i = 0; i < records; ++i) ++truth[absl::StrCat("w", i % kDistinct)];
  return truth;
}

// Every key's value in Redis at `address` ("127.0.0.1:PORT").
std::map<std::string, std::string> RedisValues(const std::string& address, const std::string& password = "") {
  std::map<std::string, std::string> values;
  const size_t colon = address.rfind(':');
  redisContext* c = redisConnect(address.substr(0, colon).c_str(), std::stoi(address.substr(colon + 1)));
  if (c == nullptr || c->err != 0) {
    if (c != nullptr) redisFree(c);
    return values;
  }
  if (!password.empty()) freeReplyObject(redisCommand(c, "AUTH %s", password.c_str()));
  auto* keys = static_cast<redisReply*>(redisCommand(c, "KEYS *"));
  if (keys != nullptr && keys->type == REDIS_REPLY_ARRAY) {
    for (size_t i = 0; i < keys->elements; ++i) {
      const std::string key(keys->element[i]->str, keys->element[i]->len);
      auto* value = static_cast<redisReply*>(redisCommand(c, "GET %b", key.data(), key.size()));
      if (value != nullptr && value->type == REDIS_REPLY_STRING) values[key] = std::string(value->str, value->len);
      freeReplyObject(value);
    }
  }
  freeReplyObject(keys);
  redisFree(c);
  return values;
}

// Runs `command` on Redis at `address`; its reply as text.
std::string RedisCommand(const std::string& address, const std::string& command) {
  const size_t colon = address.rfind(':');
  redisContext* c = redisConnect(address.substr(0, colon).c_str(), std::stoi(address.substr(colon + 1)));
  if (c == nullptr || c->err != 0) {
    if (c != nullptr) redisFree(c);
    return "";
  }
  auto* reply = static_cast<redisReply*>(redisCommand(c, command.c_str()));
  std::string text;
  if (reply != nullptr && reply->str != nullptr) text.assign(reply->str, reply->len);
  if (reply != nullptr && reply->type == REDIS_REPLY_INTEGER) text = absl::StrCat(reply->integer);
  freeReplyObject(reply);
  redisFree(c);
  return text;
}

std::unique_ptr<PostgresConnection> Postgres(const std::string& conninfo) {
  auto c = PostgresConnection::Connect(conninfo, "sinks_test");
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

// What the table of keyed_count holds: per key, how often each count is
// there.
struct TableContents {
  std::map<std::string, std::map<int64_t, int>> counts;
  int64_t rows = 0;
};
TableContents ReadTable(const std::string& conninfo, const std::string& table) {
  TableContents out;
  std::unique_ptr<PostgresConnection> c = Postgres(conninfo);
  if (c == nullptr) return out;
  auto rows = c->Exec(absl::StrCat("SELECT key, count FROM ", table));
  if (!rows.ok()) return out;  // not created yet
  for (const auto& row : *rows) {
    int64_t count = 0;
    EXPECT_TRUE(row[0].has_value() && row[1].has_value() && absl::SimpleAtoi(*row[1], &count));
    ++out.counts[*row[0]][count];
    ++out.rows;
  }
  return out;
}

// Every key's count in a table of one row per key (the upsert strategy's);
// rows counts them all.
std::map<std::string, int64_t> LatestCounts(const std::string& conninfo, const std::string& table,
                                            int64_t* rows = nullptr) {
  std::map<std::string, int64_t> out;
  const TableContents contents = ReadTable(conninfo, table);
  for (const auto& [key, counts] : contents.counts) {
    for (const auto& [count, times] : counts) out[key] = count;  // one row per key: the primary key
  }
  if (rows != nullptr) *rows = contents.rows;
  return out;
}

// A MariaDB server of scripts/mariadb.sh: its endpoint as user weir.
connectors::MySqlEndpoint MariaDb(const ScriptServer& server) {
  connectors::MySqlEndpoint endpoint;
  const size_t colon = server.address().rfind(':');
  endpoint.host = server.address().substr(0, colon);
  endpoint.port = std::stoi(server.address().substr(colon + 1));
  endpoint.user = "weir";
  endpoint.database = "weir";
  std::ifstream in(server.dir() + "/password");
  std::getline(in, endpoint.password);
  return endpoint;
}

std::unique_ptr<connectors::MySqlConnection> MySql(const connectors::MySqlEndpoint& endpoint) {
  auto c = connectors::MySqlConnection::Connect(endpoint);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

// Every word's count in keyed_count's MySQL table; rows counts them all.
std::map<std::string, int64_t> MySqlCounts(const connectors::MySqlEndpoint& endpoint, const std::string& table,
                                           int64_t* rows = nullptr) {
  std::map<std::string, int64_t> out;
  std::unique_ptr<connectors::MySqlConnection> c = MySql(endpoint);
  if (c == nullptr) return out;
  auto result = c->Exec("SELECT word, count FROM " + table);
  if (!result.ok()) return out;  // not created yet
  for (const auto& row : *result) {
    int64_t count = 0;
    EXPECT_TRUE(row[0].has_value() && row[1].has_value() && absl::SimpleAtoi(*row[1], &count));
    out[*row[0]] = count;
  }
  if (rows != nullptr) *rows = static_cast<int64_t>(result->size());
  return out;
}

// Kills every connection of user weir but the caller's.
int KillMySqlSinkConnections(const connectors::MySqlEndpoint& endpoint) {
  std::unique_ptr<connectors::MySqlConnection> c = MySql(endpoint);
  if (c == nullptr) return 0;
  auto ids = c->Exec("SELECT ID FROM information_schema.PROCESSLIST WHERE USER = 'weir' AND ID <> CONNECTION_ID()");
  int killed = 0;
  if (ids.ok()) {
    for (const auto& row : *ids) {
      if (row[0].has_value() && c->Exec("KILL CONNECTION " + *row[0]).ok()) ++killed;
    }
  }
  return killed;
}

// Prepared transactions whose name starts with `prefix`.
int64_t PreparedTransactions(const std::string& conninfo, const std::string& prefix) {
  std::unique_ptr<PostgresConnection> c = Postgres(conninfo);
  if (c == nullptr) return -1;
  auto rows = c->Exec("SELECT count(*) FROM pg_prepared_xacts WHERE starts_with(gid, $1)", {prefix});
  int64_t n = -1;
  if (rows.ok() && !rows->empty() && (*rows)[0][0].has_value()) {
    EXPECT_TRUE(absl::SimpleAtoi(*(*rows)[0][0], &n));
  }
  return n;
}

// Checks that every key's rows are its counts 1..n exactly once each (n its
// true count); returns how many rows repeat a (key, count) already there.
int64_t ExpectEveryCountOnce(const TableContents& table, const std::map<std::string, int>& truth,
                             bool allow_duplicates) {
  int64_t missing = 0, duplicates = 0, unexpected = 0;
  for (const auto& [key, n] : truth) {
    auto it = table.counts.find(key);
    for (int64_t count = 1; count <= n; ++count) {
      const int times = it == table.counts.end() || !it->second.contains(count) ? 0 : it->second.at(count);
      if (times == 0 && ++missing <= 5) ADD_FAILURE() << key << ": count " << count << " is missing";
      if (times > 1) duplicates += times - 1;
    }
  }
  for (const auto& [key, counts] : table.counts) {
    for (const auto& [count, times] : counts) {
      if (!truth.contains(key) || count < 1 || count > truth.at(key)) unexpected += times;
    }
  }
  EXPECT_EQ(missing, 0);
  EXPECT_EQ(unexpected, 0);
  if (!allow_duplicates) {
    EXPECT_EQ(duplicates, 0);
  }
  return duplicates;
}

// For the upsert sinks' tests against a real server: writes each of
// `values` as two rows of one key (a number counting up from 0, the value),
// "first" then the value itself, into three columns.
template <typename Row, typename Sink>
void WriteEachValueTwice(Sink& sink, const std::vector<std::string>& values) {
  int64_t user = 0;
  for (const std::string& v : values) {
    Row first{{absl::StrCat(user), v, std::string("first")}};
    Row last{{absl::StrCat(user), v, v}};
    sink.Process(&first);
    sink.Process(&last);  // same key, same batch: the last row wins
    ++user;
  }
}

// What WriteEachValueTwice left, read back ordered by key, with key 0
// written once more ("second"): every value arrived as it was, the last row
// of each key.
template <typename Rows>
void ExpectEachValueOnceAtItsLastRow(const Rows& rows, const std::vector<std::string>& values) {
  ASSERT_GE(rows.size(), values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(rows[i][0], absl::StrCat(i));
    EXPECT_EQ(rows[i][1], values[i]);
    EXPECT_EQ(rows[i][2], i == 0 ? std::string("second") : values[i]);
  }
}

// Opens `sink` on a table "pairs" (a, b) whose every column is the key and
// that holds ('x', 'y'), writes ('x', 'y'), ('x', 'z'), ('x', 'y') and
// ('x', 'w'), and lets the input run dry (OnIdle sends them) before closing.
// The table must then hold three rows: the one there is left alone.
template <typename Row, typename Sink, typename Connection>
void ExpectAllKeyRowsLeftAlone(Sink sink, Connection& admin) {
  {
    testing::FakeOperatorContext context;
    sink.Open(context, nullptr);
    for (const char* b : {"y", "z", "y", "w"}) {
      Row row{{std::string("x"), std::string(b)}};
      sink.Process(&row);
    }
    sink.OnIdle();  // the input ran dry: what is buffered goes
    sink.Close();
  }
  auto pairs = admin.Exec("SELECT b FROM pairs ORDER BY b");
  ASSERT_TRUE(pairs.ok()) << pairs.status();
  EXPECT_EQ(pairs->size(), 3u);
}

class SinksTest : public testing::ClusterJobTest {
 protected:
  // keyed_count at parallelism 2, checkpoints every 300 ms, restarts every
  // 200 ms for up to `attempts`.
  std::string SubmitCount(const std::string& in, const std::vector<std::string>& sink_args, std::string* error,
                          int attempts = 30) {
    std::vector<std::string> args = {"--brokers", bootstrap_, "--input-topic", in};
    args.insert(args.end(), sink_args.begin(), sink_args.end());
    return cluster_->Submit(kJobs + "/keyed_count.so",
                            {"-p", "2", "-Dexecution.checkpointing.interval=300ms",
                             "-Drestart-strategy.type=fixed-delay",
                             absl::StrCat("-Drestart-strategy.fixed-delay.attempts=", attempts),
                             "-Drestart-strategy.fixed-delay.delay=200ms"},
                            args, error);
  }

  // A cluster of one TaskManager, then one started with `fault` (which the
  // scheduler fills next), then a spare.
  int StartClusterWithFaultyTaskManager(const std::string& point) {
    cluster_ = std::make_unique<LocalCluster>(LocalCluster::Options{1, 1, {}, ""});
    cluster_->Start();
    const int faulty = cluster_->StartTaskManager(
        {"-Dtest.fault-injection.point=" + point, "-Dtest.fault-injection.checkpoint=4"});
    cluster_->StartTaskManager();
    EXPECT_TRUE(WaitFor([&] {
      nlohmann::json c = cluster_->WeirJson({"cluster"});
      return !c.is_null() && c["taskmanagers"].size() == 3u;
    }, absl::Seconds(60))) << cluster_->Logs();
    return faulty;
  }

  // Writes Words(0, records) while waiting for TaskManager `faulty` to
  // crash at `point`; starts a replacement then. False (with a failure)
  // when it did not crash.
  bool WriteUntilFault(const std::string& job, const std::string& in, int records, int faulty,
                       const std::string& point) {
    std::atomic<bool> failed{false};
    std::thread writer = testing::WriteSlowly(bootstrap_, in, records, Words, &failed);
    const bool crashed = WaitFor([&] { return !cluster_->taskmanager(faulty).running(); }, absl::Seconds(90));
    writer.join();
    EXPECT_FALSE(failed.load());
    if (!crashed) {
      ADD_FAILURE() << "the fault did not fire\n" << cluster_->Logs();
      return false;
    }
    const std::string log = cluster_->taskmanager(faulty).Log();
    EXPECT_TRUE(absl::StrContains(log, "FAULT INJECTION: killing this process at '" + point + "'")) << log;
    cluster_->StartTaskManager();
    return WaitUntilRunning(job, 2);
  }

  // Waits until the table holds `expected_rows` rows (or more), then for two
  // more checkpoints; returns what it holds then.
  TableContents WaitForTable(const std::string& job, const std::string& conninfo, const std::string& table,
                             int64_t expected_rows) {
    TableContents contents;
    const bool complete = WaitFor([&] {
      contents = ReadTable(conninfo, table);
      return contents.rows >= expected_rows;
    }, absl::Seconds(180), absl::Seconds(1));
    EXPECT_TRUE(complete) << contents.rows << " rows of " << expected_rows << "\n" << cluster_->Logs();
    int64_t newest = 0;
    const nlohmann::json checkpoints = cluster_->WeirJson({"checkpoints", job});
    for (const auto& cp : checkpoints["checkpoints"]) newest = std::max(newest, cp["id"].get<int64_t>());
    nlohmann::json status = cluster_->WeirJson({"status", job});
    EXPECT_TRUE(WaitForCompletedCheckpoint(job, status["attempt"].get<int>(), newest + 1)) << cluster_->Logs();
    return ReadTable(conninfo, table);
  }

  // A table that keyed_count upserts into, as an upsert test sees it.
  struct UpsertTable {
    std::string sink;  // names the figures printed
    // Every key's count; `rows` (may be null) counts the table's rows.
    std::function<std::map<std::string, int64_t>(int64_t* rows)> read;
    // Cuts every connection of the sinks.
    std::function<void()> cut_connections;
  };

  // For a running upsert `job` reading `in`: writes 30000 words while
  // TaskManagers are SIGKILLed twice (a replacement started each time) and,
  // once 100 keys are there, every connection of the sinks is cut. The table
  // must end with one row per key holding its true count, no key missing and
  // none extra, and the sinks must have reconnected. What a reader saw
  // meanwhile is counted: a key whose count went down was replayed from the
  // restored checkpoint (docs/exactly-once.md allows it; the figure is
  // printed, not asserted, as it depends on where the kills fall).
  void ExpectUpsertEndsAtEveryKeysTrueCount(const std::string& job, const std::string& in, const UpsertTable& table) {
    constexpr int kRecords = 30000, kKills = 2;
    std::atomic<bool> done{false}, cut{false};
    int64_t steps_back = 0, reads = 0;
    std::thread reader([&] {
      std::map<std::string, int64_t> highest;
      while (!done) {
        for (const auto& [key, count] : table.read(nullptr)) {
          int64_t& h = highest[key];
          if (count < h) ++steps_back;
          h = std::max(h, count);
        }
        ++reads;
        if (!cut && highest.size() >= 100) {
          table.cut_connections();  // the sinks reconnect and send again
          cut = true;
        }
        absl::SleepFor(absl::Milliseconds(200));
      }
    });
    const bool ok = WriteWhileKilling(job, in, kRecords, 1000, kKills, Words);
    std::map<std::string, int64_t> want;
    for (const auto& [key, n] : TrueCounts(kRecords)) want[key] = n;
    std::map<std::string, int64_t> counts;
    int64_t rows = 0;
    const bool exact = ok && WaitFor([&] {
      counts = table.read(&rows);
      return counts == want;
    }, absl::Seconds(120), absl::Seconds(1));
    done = true;
    reader.join();
    ASSERT_TRUE(ok) << cluster_->Logs();
    int wrong = 0;
    for (const auto& [key, n] : want) {
      if (counts[key] != n && ++wrong <= 5) ADD_FAILURE() << key << " is " << counts[key] << ", not " << n;
    }
    for (const auto& [key, n] : counts) {
      if (!want.contains(key)) ADD_FAILURE() << "unexpected key " << key;
    }
    std::printf("%s upsert: %d records, %lld rows, %zu keys (of %zu), %d wrong, %d TaskManager kills, "
                "attempts %d, %lld reads saw %lld steps back\n",
                table.sink.c_str(), kRecords, static_cast<long long>(rows), counts.size(), want.size(), wrong, kKills,
                cluster_->WeirJson({"status", job})["attempt"].get<int>(), static_cast<long long>(reads),
                static_cast<long long>(steps_back));
    EXPECT_TRUE(exact) << cluster_->Logs();
    EXPECT_EQ(rows, static_cast<int64_t>(want.size()));
    EXPECT_TRUE(cut.load());
    EXPECT_TRUE(absl::StrContains(cluster_->Logs(), "reconnecting to send the rows again")) << cluster_->Logs();
  }
};

// Idempotent writes: keyed_count SETs every key to its latest count while
// TaskManagers are SIGKILLed three times and every connection to Redis is
// cut once. At the end every key holds its true count: a replay set keys
// back to their checkpointed counts and then forward again.
TEST_F(SinksTest, RedisValuesEndExactAcrossTaskManagerKillsAndLostConnections) {
  auto redis = ScriptServer::Start("redis.sh");
  ASSERT_TRUE(redis.ok()) << redis.status();
  StartCluster(3);
  const std::string in = NewTopic("redis-in");
  std::string error;
  const std::string job = SubmitCount(in, {"--sink", "redis", "--redis", (*redis)->address()}, &error);
  ASSERT_FALSE(job.empty()) << error << cluster_->Logs();
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
  constexpr int kRecords = 40000, kKills = 3;
  std::atomic<bool> cut{false};
  std::thread cutter([&] {
    // Once some counts are in, every client connection is dropped.
    WaitFor([&] { return RedisValues((*redis)->address()).size() >= 100; }, absl::Seconds(60));
    const std::string killed = RedisCommand((*redis)->address(), "CLIENT KILL TYPE normal");
    std::printf("Redis dropped %s client connections\n", killed.c_str());
    cut = true;
  });
  const bool ok = WriteWhileKilling(job, in, kRecords, 1000, kKills, Words);
  cutter.join();
  ASSERT_TRUE(ok) << cluster_->Logs();
  EXPECT_TRUE(cut.load());

  std::map<std::string, int> truth = TrueCounts(kRecords);
  std::map<std::string, std::string> want;
  for (const auto& [key, n] : truth) want[key] = absl::StrCat(n);
  std::map<std::string, std::string> values;
  const bool exact = WaitFor([&] {
    values = RedisValues((*redis)->address());
    return values == want;
  }, absl::Seconds(120), absl::Seconds(1));
  int wrong = 0;
  for (const auto& [key, value] : want) {
    if (values[key] != value && ++wrong <= 5) ADD_FAILURE() << key << " is '" << values[key] << "', not " << value;
  }
  std::printf("redis: %d records, %zu keys, %d wrong, attempts %d\n", kRecords, values.size(), wrong,
              cluster_->WeirJson({"status", job})["attempt"].get<int>());
  EXPECT_TRUE(exact) << cluster_->Logs();
  EXPECT_TRUE(absl::StrContains(cluster_->Logs(), "reconnecting to send")) << cluster_->Logs();
  ASSERT_EQ(cluster_->Weir({"cancel", job}).exit_code, 0);
}

// Redis down at the start, then back; a wrong password: clear errors, and
// the job restarts by its strategy.
TEST_F(SinksTest, RedisDownAtStartAndAWrongPasswordAreClearErrors) {
  auto redis = ScriptServer::Start("redis.sh", {"--password", "right"});
  ASSERT_TRUE(redis.ok()) << redis.status();
  StartCluster(2);
  const std::string in = NewTopic("redis-errors-in");
  std::string error;
  // A wrong password fails every attempt; two restarts, then FAILED.
  const std::string wrong = SubmitCount(
      in, {"--sink", "redis", "--redis", (*redis)->address(), "--redis-password", "wrong"}, &error, 2);
  ASSERT_FALSE(wrong.empty()) << error << cluster_->Logs();
  nlohmann::json status = cluster_->WaitForJobEnd(wrong, absl::Seconds(120));
  EXPECT_EQ(status["state"], "FAILED") << status.dump(2);
  EXPECT_EQ(status["restarts"].get<int>(), 2) << status.dump(2);
  std::printf("wrong password: %s\n", status["error"].get<std::string>().c_str());
  EXPECT_TRUE(absl::StrContains(status["error"].get<std::string>(), "refused the password")) << status.dump(2);

  // Down at the start: attempts fail saying so until the server is back.
  ASSERT_TRUE((*redis)->Stop().ok());
  const std::string job = SubmitCount(
      in, {"--sink", "redis", "--redis", (*redis)->address(), "--redis-password", "right"}, &error, 100);
  ASSERT_FALSE(job.empty()) << error << cluster_->Logs();
  // The sink retries for reconnect_timeout_ms (10 s), then the attempt
  // fails saying why, and the job restarts.
  ASSERT_TRUE(WaitFor([&] {
    const std::string logs = cluster_->Logs();
    return absl::StrContains(logs, "cannot connect to Redis at") && absl::StrContains(logs, "(tried for 10000 ms: ");
  }, absl::Seconds(60))) << cluster_->Logs();
  ASSERT_TRUE((*redis)->Restart().ok());
  ASSERT_TRUE(WaitUntilRunning(job, 2)) << cluster_->Logs();
  ASSERT_TRUE(test::ProduceMessages(bootstrap_, in, Words(0, 3000)).ok());
  std::map<std::string, std::string> want;
  for (const auto& [key, n] : TrueCounts(3000)) want[key] = absl::StrCat(n);
  EXPECT_TRUE(WaitFor([&] { return RedisValues((*redis)->address(), "right") == want; }, absl::Seconds(60)))
      << cluster_->Logs();
  ASSERT_EQ(cluster_->Weir({"cancel", job}).exit_code, 0);
}

// Two-phase commit: a TaskManager crashes after a checkpoint completed and
// before its sinks ran COMMIT PREPARED; then TaskManagers are SIGKILLed twice
// more while records stream in. The table holds every (key, count) exactly
// once, 1..n for every key, and no prepared transaction of the sink is left.
TEST_F(SinksTest, PostgresTwoPhaseCommitIsExactlyOnceThroughKillsAndACrashBeforeCommitPrepared) {
  auto postgres = ScriptServer::Start("postgres.sh");
  ASSERT_TRUE(postgres.ok()) << postgres.status();
  const std::string conninfo = (*postgres)->address();
  const std::string point = "taskmanager-before-commit";
  const int faulty = StartClusterWithFaultyTaskManager(point);
  const std::string in = NewTopic("pg-2pc-in");
  std::string error;
  const std::string job =
      SubmitCount(in, {"--sink", "postgres", "--postgres", conninfo, "--table", "counts_2pc"}, &error);
  ASSERT_FALSE(job.empty()) << error << cluster_->Logs();
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
  constexpr int kBeforeFault = 10000, kAfter = 30000, kKills = 2;
  ASSERT_TRUE(WriteUntilFault(job, in, kBeforeFault, faulty, point)) << cluster_->Logs();
  ASSERT_TRUE(WriteWhileKilling(job, in, kAfter, 1000, kKills,
                                [](int first, int n) { return Words(kBeforeFault + first, n); }))
      << cluster_->Logs();

  const std::map<std::string, int> truth = TrueCounts(kBeforeFault + kAfter);
  TableContents table = WaitForTable(job, conninfo, "counts_2pc", kBeforeFault + kAfter);
  const int64_t duplicates = ExpectEveryCountOnce(table, truth, /*allow_duplicates=*/false);
  const int64_t prepared = PreparedTransactions(conninfo, "weir-PostgresSink-counts_2pc-");
  std::printf("postgres two-phase commit: %d records, %lld rows, %lld duplicates, %lld prepared left, attempts %d\n",
              kBeforeFault + kAfter, static_cast<long long>(table.rows), static_cast<long long>(duplicates),
              static_cast<long long>(prepared), cluster_->WeirJson({"status", job})["attempt"].get<int>());
  EXPECT_EQ(table.rows, kBeforeFault + kAfter);
  EXPECT_EQ(prepared, 0);
  EXPECT_FALSE(absl::StrContains(cluster_->Logs(), "DATA LOSS")) << cluster_->Logs();
  ASSERT_EQ(cluster_->Weir({"cancel", job}).exit_code, 0);
}

// Write-ahead log, first under TaskManager kills only, with batches of one
// COPY (committed together with the batch's mark): exact. Then a
// TaskManager crashes in the middle of writing a completed checkpoint's
// batch of several COPYs (after its first COPY of 100 rows): the restart
// writes the whole batch again, so the rows of that first COPY are there
// twice — the window this strategy leaves (docs/exactly-once.md). Nothing
// is missing.
TEST_F(SinksTest, PostgresWriteAheadIsExactThroughKillsAndRepeatsPartOfABatchAfterAMidBatchCrash) {
  auto postgres = ScriptServer::Start("postgres.sh");
  ASSERT_TRUE(postgres.ok()) << postgres.status();
  const std::string conninfo = (*postgres)->address();
  {
    StartCluster(3);
    const std::string in = NewTopic("pg-wal-in");
    std::string error;
    // Batches of one COPY, which commits with the batch's mark: exact.
    const std::string job = SubmitCount(in,
                                        {"--sink", "postgres", "--postgres", conninfo, "--table", "counts_wal",
                                         "--write-ahead", "--batch-rows", "100000"},
                                        &error);
    ASSERT_FALSE(job.empty()) << error << cluster_->Logs();
    ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
    constexpr int kRecords = 30000, kKills = 3;
    ASSERT_TRUE(WriteWhileKilling(job, in, kRecords, 1000, kKills, Words)) << cluster_->Logs();
    TableContents table = WaitForTable(job, conninfo, "counts_wal", kRecords);
    const int64_t duplicates = ExpectEveryCountOnce(table, TrueCounts(kRecords), /*allow_duplicates=*/false);
    std::printf("postgres write-ahead, kills: %d records, %lld rows, %lld duplicates\n", kRecords,
                static_cast<long long>(table.rows), static_cast<long long>(duplicates));
    EXPECT_EQ(table.rows, kRecords);
    ASSERT_EQ(cluster_->Weir({"cancel", job}).exit_code, 0);
    cluster_.reset();
  }
  const std::string point = "taskmanager-mid-write-ahead-batch";
  const int faulty = StartClusterWithFaultyTaskManager(point);
  const std::string in = NewTopic("pg-wal-fault-in");
  std::string error;
  constexpr int kBatchRows = 100;
  const std::string job = SubmitCount(in,
                                      {"--sink", "postgres", "--postgres", conninfo, "--table", "counts_wal_fault",
                                       "--write-ahead", "--batch-rows", absl::StrCat(kBatchRows)},
                                      &error);
  ASSERT_FALSE(job.empty()) << error << cluster_->Logs();
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
  constexpr int kRecords = 20000;
  ASSERT_TRUE(WriteUntilFault(job, in, kRecords, faulty, point)) << cluster_->Logs();
  TableContents table = WaitForTable(job, conninfo, "counts_wal_fault", kRecords);
  const int64_t duplicates = ExpectEveryCountOnce(table, TrueCounts(kRecords), /*allow_duplicates=*/true);
  std::printf("postgres write-ahead, crash in the middle of a batch: %d records, %lld rows, %lld duplicates "
              "(one COPY holds %d rows)\n",
              kRecords, static_cast<long long>(table.rows), static_cast<long long>(duplicates), kBatchRows);
  // The crash came after the first COPY of a batch and before the second:
  // exactly those rows are there twice.
  EXPECT_EQ(duplicates, kBatchRows);
  EXPECT_EQ(table.rows, kRecords + duplicates);
  ASSERT_EQ(cluster_->Weir({"cancel", job}).exit_code, 0);
}

// Upserts by key: keyed_count writes every count over the key's row in
// PostgreSQL through TaskManager kills and cut connections, and the table
// ends at every key's true count (ExpectUpsertEndsAtEveryKeysTrueCount).
// A table name that is not a plain identifier is refused at submission.
TEST_F(SinksTest, PostgresUpsertEndsAtEveryKeysTrueCountThroughTaskManagerKills) {
  auto postgres = ScriptServer::Start("postgres.sh");
  ASSERT_TRUE(postgres.ok()) << postgres.status();
  const std::string conninfo = (*postgres)->address();
  StartCluster(3);
  const std::string in = NewTopic("pg-upsert-in");
  std::string error;
  // A table name that is not a plain identifier: refused at submission.
  EXPECT_TRUE(SubmitCount(in, {"--sink", "postgres", "--postgres", conninfo, "--table", "counts\"; --", "--upsert"},
                          &error)
                  .empty());
  EXPECT_TRUE(absl::StrContains(error, "property 'table'")) << error;
  const std::string job = SubmitCount(
      in, {"--sink", "postgres", "--postgres", conninfo, "--table", "counts_upsert", "--upsert", "--batch-rows", "100"},
      &error);
  ASSERT_FALSE(job.empty()) << error << cluster_->Logs();
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
  ExpectUpsertEndsAtEveryKeysTrueCount(
      job, in,
      {"postgres", [&](int64_t* rows) { return LatestCounts(conninfo, "counts_upsert", rows); },
       [&] {
         auto c = Postgres(conninfo);
         if (c == nullptr) return;
         auto killed =
             c->Exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'weir'");
         std::printf("PostgreSQL dropped %zu sink connections\n", killed.ok() ? killed->size() : 0);
       }});
  ASSERT_EQ(cluster_->Weir({"cancel", job}).exit_code, 0);
}

// The upsert sink itself against the real server: values that are COPY or
// SQL syntax arrive as they were, a table and columns named by reserved
// words work (the table made by create.table), a key written twice in one batch ends at its last row (also when
// only the server sees the two as one key: '100' and '0100' of a bigint),
// rows of an all-key table are left alone, a table without a key on the
// key columns is refused at Open, and a cut connection costs nothing.
TEST(PostgresUpsertSinkTest, WritesHostileValuesAndTheLastRowPerKeyOnARealServer) {
  auto postgres = ScriptServer::Start("postgres.sh");
  ASSERT_TRUE(postgres.ok()) << postgres.status();
  const std::string conninfo = (*postgres)->address();
  auto admin = Postgres(conninfo);
  ASSERT_NE(admin, nullptr);
  ASSERT_TRUE(admin->Exec("CREATE TABLE nokey (k text, v text)").ok());
  auto config_for = [&](const std::string& table, std::vector<std::string> columns, std::vector<std::string> keys,
                        int batch_rows) {
    connectors::PostgresSinkConfig config;
    config.conninfo = conninfo;
    config.table = table;
    config.columns = std::move(columns);
    config.key_columns = std::move(keys);
    config.strategy = postgres::Strategy::kUpsert;
    config.transaction_prefix = "unused";
    config.batch_rows = batch_rows;
    return config;
  };
  const std::vector<std::string> hostile = {"tab\there",  "new\nline",  "back\\slash", "\\N",          "it's",
                                            "\"quoted\"", "'); DROP TABLE nokey; --", "semi;colon", "ümlaut ✓",
                                            ""};
  {
    // The table is created by create.table, its name a reserved word.
    connectors::PostgresSinkConfig config = config_for("order", {"user", "select", "from"}, {"User", "select"}, 1000);
    config.create_table = "\"user\" bigint, \"select\" text, \"from\" text, PRIMARY KEY (\"user\", \"select\")";
    connectors::PostgresUpsertSink sink(config);
    testing::FakeOperatorContext context;
    sink.Open(context, nullptr);
    WriteEachValueTwice<postgres::Row>(sink, hostile);
    // One key to the server, two to the sink's text comparison.
    postgres::Row seven{{std::string("100"), std::string("x"), std::string("older")}};
    postgres::Row padded{{std::string("0100"), std::string("x"), std::string("newer")}};
    postgres::Row null_value{{std::string("101"), std::string("x"), std::nullopt}};
    sink.Process(&seven);
    sink.Process(&padded);
    sink.Process(&null_value);
    auto before = admin->Exec("SELECT count(*) FROM \"order\"");
    ASSERT_TRUE(before.ok()) << before.status();
    EXPECT_EQ((*before)[0][0], "0");  // buffered
    sink.PrepareSnapshotPreBarrier(1);
    // Sent before the snapshot is acknowledged.
    auto flushed = admin->Exec("SELECT count(*) FROM \"order\"");
    ASSERT_TRUE(flushed.ok()) << flushed.status();
    EXPECT_EQ((*flushed)[0][0], absl::StrCat(hostile.size() + 2));
    // The connection goes; the next batch reconnects and updates in place.
    ASSERT_TRUE(admin->Exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'weir'")
                    .ok());
    postgres::Row again{{std::string("0"), hostile[0], std::string("second")}};
    sink.Process(&again);
    sink.EndInput();
    sink.Close();
  }
  auto rows = admin->Exec("SELECT \"user\", \"select\", \"from\" FROM \"order\" ORDER BY \"user\"");
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), hostile.size() + 2);
  ExpectEachValueOnceAtItsLastRow(*rows, hostile);
  EXPECT_EQ((*rows)[hostile.size()][2], "newer");
  EXPECT_EQ((*rows)[hostile.size() + 1][2], std::nullopt);
  EXPECT_TRUE(admin->Exec("SELECT 1 FROM nokey").ok());  // still there

  // Every column a key: rows already there are left as they are.
  ASSERT_TRUE(admin->Exec("CREATE TABLE pairs (a text, b text, PRIMARY KEY (a, b)); "
                          "INSERT INTO pairs VALUES ('x', 'y')").ok());
  ExpectAllKeyRowsLeftAlone<postgres::Row>(
      connectors::PostgresUpsertSink(config_for("pairs", {"a", "b"}, {"a", "b"}, 10)), *admin);

  // No unique constraint on the key: refused at Open, saying what to add.
  connectors::PostgresUpsertSink sink(config_for("nokey", {"k", "v"}, {"k"}, 10));
  testing::FakeOperatorContext context;
  try {
    sink.Open(context, nullptr);
    ADD_FAILURE() << "opened without a key on the table";
  } catch (const UnrecoverableError& e) {
    std::printf("no key: %s\n", e.what());
    EXPECT_TRUE(absl::StrContains(e.what(), "ADD PRIMARY KEY (k)")) << e.what();
  }
}

// The MySQL sink on a real MariaDB: keyed_count upserts every word's count
// through TaskManager kills and killed connections, and the table ends at
// every word's true count (ExpectUpsertEndsAtEveryKeysTrueCount). A table
// name that is not a plain identifier is refused at submission.
TEST_F(SinksTest, MySqlUpsertEndsAtEveryKeysTrueCountThroughTaskManagerKills) {
  auto mariadb = ScriptServer::Start("mariadb.sh");
  ASSERT_TRUE(mariadb.ok()) << mariadb.status();
  const connectors::MySqlEndpoint endpoint = MariaDb(**mariadb);
  StartCluster(3);
  const std::string in = NewTopic("mysql-upsert-in");
  std::string error;
  // A table name that is not a plain identifier: refused at submission.
  EXPECT_TRUE(SubmitCount(in,
                          {"--sink", "mysql", "--mysql", (*mariadb)->address(), "--mysql-database", "weir", "--table",
                           "counts`; --"},
                          &error)
                  .empty());
  EXPECT_TRUE(absl::StrContains(error, "property 'table'")) << error;
  const std::string job = SubmitCount(in,
                                      {"--sink", "mysql", "--mysql", (*mariadb)->address(), "--mysql-database",
                                       "weir", "--mysql-password-file", (*mariadb)->dir() + "/password", "--table",
                                       "counts_upsert", "--batch-rows", "100"},
                                      &error);
  ASSERT_FALSE(job.empty()) << error << cluster_->Logs();
  ASSERT_TRUE(WaitUntilRunning(job)) << cluster_->Logs();
  ExpectUpsertEndsAtEveryKeysTrueCount(
      job, in,
      {"mysql", [&](int64_t* rows) { return MySqlCounts(endpoint, "counts_upsert", rows); },
       [&] { std::printf("MariaDB killed %d sink connections\n", KillMySqlSinkConnections(endpoint)); }});
  ASSERT_EQ(cluster_->Weir({"cancel", job}).exit_code, 0);
}

// MariaDB down when the job starts, then SIGKILLed in the middle of the run
// and started again (InnoDB recovers its log): attempts fail saying so until
// the server is back, the sinks reconnect, and every word ends at its true
// count.
TEST_F(SinksTest, MySqlDownAtStartAndKilledMidRunEndsExact) {
  auto mariadb = ScriptServer::Start("mariadb.sh");
  ASSERT_TRUE(mariadb.ok()) << mariadb.status();
  const connectors::MySqlEndpoint endpoint = MariaDb(**mariadb);
  StartCluster(2);
  const std::string in = NewTopic("mysql-down-in");
  ASSERT_TRUE((*mariadb)->Stop().ok());
  std::string error;
  const std::string job = SubmitCount(in,
                                      {"--sink", "mysql", "--mysql", (*mariadb)->address(), "--mysql-database",
                                       "weir", "--mysql-password-file", (*mariadb)->dir() + "/password", "--table",
                                       "counts_down"},
                                      &error, 200);
  ASSERT_FALSE(job.empty()) << error << cluster_->Logs();
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(cluster_->Logs(), "cannot connect to MySQL"); },
                      absl::Seconds(60))) << cluster_->Logs();
  ASSERT_TRUE((*mariadb)->Restart().ok());
  ASSERT_TRUE(WaitUntilRunning(job, 2)) << cluster_->Logs();
  constexpr int kRecords = 20000;
  std::atomic<bool> failed{false};
  std::thread writer = testing::WriteSlowly(bootstrap_, in, kRecords, Words, &failed);
  ASSERT_TRUE(WaitFor([&] { return MySqlCounts(endpoint, "counts_down").size() >= static_cast<size_t>(kDistinct); },
                      absl::Seconds(60)))
      << cluster_->Logs();
  ASSERT_TRUE((*mariadb)->Stop().ok());
  absl::SleepFor(absl::Seconds(2));
  ASSERT_TRUE((*mariadb)->Restart().ok());
  writer.join();
  ASSERT_FALSE(failed.load());
  std::map<std::string, int64_t> want;
  for (const auto& [key, n] : TrueCounts(kRecords)) want[key] = n;
  std::map<std::string, int64_t> counts;
  int64_t rows = 0;
  EXPECT_TRUE(WaitFor([&] {
    counts = MySqlCounts(endpoint, "counts_down", &rows);
    return counts == want;
  }, absl::Seconds(120), absl::Seconds(1))) << cluster_->Logs();
  const int attempts = cluster_->WeirJson({"status", job})["attempt"].get<int>();
  const bool reconnected = absl::StrContains(cluster_->Logs(), "reconnecting to send the rows again");
  std::printf("mysql down at start and killed mid-run: %d records, %lld rows, %zu keys (of %zu), attempts %d, "
              "sink reconnected: %s\n",
              kRecords, static_cast<long long>(rows), counts.size(), want.size(), attempts,
              reconnected ? "yes" : "no");
  EXPECT_EQ(rows, static_cast<int64_t>(want.size()));
  // The sinks noticed the outage: they reconnected, or their task failed
  // and the job restarted once more.
  EXPECT_TRUE(reconnected || attempts > 2) << cluster_->Logs();
  ASSERT_EQ(cluster_->Weir({"cancel", job}).exit_code, 0);
}

// The MySQL sink itself against a real MariaDB: values that are SQL syntax
// (quotes, backslashes, a NUL byte) arrive as they were, reserved words as
// column names work, a key written twice in one batch ends at its last row,
// a killed connection costs nothing, rows of an all-key table are left
// alone, a table without a key on the key columns is refused at Open, and
// so is a password file that is not there.
TEST(MySqlUpsertSinkTest, WritesHostileValuesAndTheLastRowPerKeyOnARealServer) {
  auto mariadb = ScriptServer::Start("mariadb.sh");
  ASSERT_TRUE(mariadb.ok()) << mariadb.status();
  const connectors::MySqlEndpoint endpoint = MariaDb(**mariadb);
  auto admin = MySql(endpoint);
  ASSERT_NE(admin, nullptr);
  ASSERT_TRUE(admin->Exec("CREATE TABLE `order` (`user` BIGINT, `select` VARCHAR(200), `from` TEXT, "
                          "PRIMARY KEY (`user`, `select`))").ok());
  ASSERT_TRUE(admin->Exec("CREATE TABLE nokey (k VARCHAR(20), v TEXT)").ok());
  ASSERT_TRUE(admin->Exec("CREATE TABLE pairs (a VARCHAR(20), b VARCHAR(20), PRIMARY KEY (a, b))").ok());
  ASSERT_TRUE(admin->Exec("INSERT INTO pairs VALUES ('x', 'y')").ok());
  auto config_for = [&](const std::string& table, std::vector<std::string> columns, std::vector<std::string> keys,
                        int batch_rows) {
    connectors::MySqlSinkConfig config;
    config.host = endpoint.host;
    config.port = endpoint.port;
    config.user = "weir";
    config.password_file = (*mariadb)->dir() + "/password";
    config.database = "weir";
    config.table = table;
    config.columns = std::move(columns);
    config.key_columns = std::move(keys);
    config.batch_rows = batch_rows;
    return config;
  };
  const std::vector<std::string> hostile = {"it's",      "\"quoted\"", "back\\slash", "\\'", "'); DROP TABLE nokey; --",
                                            "new\nline", std::string("nul\0byte", 8), "ümlaut ✓", "%_", ""};
  {
    connectors::MySqlUpsertSink sink(config_for("order", {"user", "select", "from"}, {"USER", "select"}, 1000));
    testing::FakeOperatorContext context;
    sink.Open(context, nullptr);
    WriteEachValueTwice<mysql::Row>(sink, hostile);
    mysql::Row null_value{{std::string("100"), std::string("x"), std::nullopt}};
    sink.Process(&null_value);
    auto before = admin->Exec("SELECT count(*) FROM `order`");
    ASSERT_TRUE(before.ok()) << before.status();
    EXPECT_EQ((*before)[0][0], "0");  // buffered
    sink.PrepareSnapshotPreBarrier(1);
    // Sent before the snapshot is acknowledged.
    auto flushed = admin->Exec("SELECT count(*) FROM `order`");
    ASSERT_TRUE(flushed.ok()) << flushed.status();
    EXPECT_EQ((*flushed)[0][0], absl::StrCat(hostile.size() + 1));
    EXPECT_GE(KillMySqlSinkConnections(endpoint), 2);  // the sink's and ours
    admin = MySql(endpoint);
    ASSERT_NE(admin, nullptr);
    mysql::Row again{{std::string("0"), hostile[0], std::string("second")}};
    sink.Process(&again);
    sink.EndInput();
    sink.Close();
  }
  auto rows = admin->Exec("SELECT `user`, `select`, `from` FROM `order` ORDER BY `user`");
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), hostile.size() + 1);
  ExpectEachValueOnceAtItsLastRow(*rows, hostile);
  EXPECT_EQ((*rows)[hostile.size()][2], std::nullopt);
  EXPECT_TRUE(admin->Exec("SELECT 1 FROM nokey").ok());  // still there

  ExpectAllKeyRowsLeftAlone<mysql::Row>(
      connectors::MySqlUpsertSink(config_for("pairs", {"a", "b"}, {"a", "b"}, 10)), *admin);

  // Unrecoverable: no restart helps; refused credentials: the job restarts
  // by its strategy (someone may be fixing them).
  // Literals survive a round trip with and without NO_BACKSLASH_ESCAPES
  // (where a backslash is no escape and only a doubled quote is).
  for (const char* mode : {"", "NO_BACKSLASH_ESCAPES"}) {
    SCOPED_TRACE(mode);
    auto c = MySql(endpoint);
    ASSERT_NE(c, nullptr);
    ASSERT_TRUE(c->Exec(absl::StrCat("SET SESSION sql_mode = '", mode, "'")).ok());
    for (const std::string& v : hostile) {
      std::string sql = "SELECT ";
      c->AppendLiteral(v, sql);
      auto echoed = c->Exec(sql);
      ASSERT_TRUE(echoed.ok()) << echoed.status();
      EXPECT_EQ((*echoed)[0][0], v);
    }
  }

  auto open_fails = [&](connectors::MySqlSinkConfig config, const std::string& expected, bool unrecoverable) {
    connectors::MySqlUpsertSink sink(std::move(config));
    testing::FakeOperatorContext context;
    try {
      sink.Open(context, nullptr);
      ADD_FAILURE() << "opened; expected " << expected;
    } catch (const std::runtime_error& e) {
      std::printf("refused at open: %s\n", e.what());
      EXPECT_TRUE(absl::StrContains(e.what(), expected)) << e.what();
      EXPECT_EQ(dynamic_cast<const UnrecoverableError*>(&e) != nullptr, unrecoverable) << e.what();
    }
  };
  open_fails(config_for("nokey", {"k", "v"}, {"k"}, 10), "ADD PRIMARY KEY (k)", true);
  connectors::MySqlSinkConfig no_file = config_for("pairs", {"a", "b"}, {"a"}, 10);
  no_file.password_file = (*mariadb)->dir() + "/no-such-file";
  open_fails(no_file, "cannot read password file", true);
  connectors::MySqlSinkConfig wrong = config_for("pairs", {"a", "b"}, {"a"}, 10);
  wrong.password_file.clear();
  open_fails(wrong, "refused the credentials", false);
}

// PostgreSQL down at the start, gone in the middle of the run, and a wrong
// password: clear errors, restarts by the strategy, nothing committed twice.
// And a server that cannot prepare transactions fails the job at once,
// saying what to set.
TEST_F(SinksTest, PostgresDownAtStartGoneMidRunAndRefusedCredentialsLoseAndRepeatNothing) {
  auto postgres = ScriptServer::Start("postgres.sh");
  ASSERT_TRUE(postgres.ok()) << postgres.status();
  const std::string conninfo = (*postgres)->address();
  StartCluster(2);
  const std::string in = NewTopic("pg-errors-in");
  std::string error;
  std::string bad = conninfo;
  bad.replace(bad.find("password=weir"), 13, "password=nope");
  const std::string refused = SubmitCount(in, {"--sink", "postgres", "--postgres", bad, "--table", "counts_bad"},
                                          &error, 1);
  ASSERT_FALSE(refused.empty()) << error << cluster_->Logs();
  nlohmann::json status = cluster_->WaitForJobEnd(refused, absl::Seconds(120));
  EXPECT_EQ(status["state"], "FAILED") << status.dump(2);
  EXPECT_EQ(status["restarts"].get<int>(), 1) << status.dump(2);
  std::printf("wrong password: %s\n", status["error"].get<std::string>().c_str());
  EXPECT_TRUE(absl::StrContains(status["error"].get<std::string>(), "PostgreSQL refused the credentials"))
      << status.dump(2);
  EXPECT_FALSE(absl::StrContains(status["error"].get<std::string>(), "nope")) << status.dump(2);

  ASSERT_TRUE((*postgres)->Stop().ok());
  const std::string job = SubmitCount(in, {"--sink", "postgres", "--postgres", conninfo, "--table", "counts_down"},
                                      &error, 200);
  ASSERT_FALSE(job.empty()) << error << cluster_->Logs();
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(cluster_->Logs(), "cannot connect to PostgreSQL"); },
                      absl::Seconds(60))) << cluster_->Logs();
  ASSERT_TRUE((*postgres)->Restart().ok());
  ASSERT_TRUE(WaitUntilRunning(job, 2)) << cluster_->Logs();
  // Records stream in; the server is killed in the middle and comes back.
  constexpr int kRecords = 20000;
  std::atomic<bool> failed{false};
  std::thread writer = testing::WriteSlowly(bootstrap_, in, kRecords, Words, &failed);
  ASSERT_TRUE(WaitFor([&] { return ReadTable(conninfo, "counts_down").rows >= 3000; }, absl::Seconds(60)))
      << cluster_->Logs();
  ASSERT_TRUE((*postgres)->Stop().ok());
  absl::SleepFor(absl::Seconds(2));
  ASSERT_TRUE((*postgres)->Restart().ok());
  writer.join();
  ASSERT_FALSE(failed.load());
  TableContents table = WaitForTable(job, conninfo, "counts_down", kRecords);
  ExpectEveryCountOnce(table, TrueCounts(kRecords), /*allow_duplicates=*/false);
  EXPECT_EQ(table.rows, kRecords);
  EXPECT_EQ(PreparedTransactions(conninfo, "weir-PostgresSink-counts_down-"), 0);
  ASSERT_EQ(cluster_->Weir({"cancel", job}).exit_code, 0);

  // No prepared transactions on the server: the job fails at once.
  auto no_prepare = ScriptServer::Start("postgres.sh", {"--max-prepared-transactions", "0"});
  ASSERT_TRUE(no_prepare.ok()) << no_prepare.status();
  const std::string unprepared = SubmitCount(
      in, {"--sink", "postgres", "--postgres", (*no_prepare)->address(), "--table", "counts_np"}, &error, 5);
  ASSERT_FALSE(unprepared.empty()) << error << cluster_->Logs();
  status = cluster_->WaitForJobEnd(unprepared, absl::Seconds(120));
  EXPECT_EQ(status["state"], "FAILED") << status.dump(2);
  EXPECT_EQ(status["restarts"].get<int>(), 0) << status.dump(2);
  std::printf("no prepared transactions: %s\n", status["error"].get<std::string>().c_str());
  EXPECT_TRUE(absl::StrContains(status["error"].get<std::string>(), "set max_prepared_transactions")) << status.dump(2);
}

}  // namespace
}  // namespace weir
