// The Redis and PostgreSQL sink connectors' part of submission that
// contacts no server: what weir::redis::Sink and weir::postgres::Sink write
// into the job graph is what the connectors accept, bad properties are
// refused naming the property, the strategies map to the guarantees the
// JobManager checks, and rows are escaped for COPY.
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "connectors/builtin.h"
#include "connectors/mysql/mysql_sink.h"
#include "connectors/postgres/postgres_sink.h"
#include "connectors/redis/redis_sink.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "weir/mysql.h"
#include "weir/postgres.h"
#include "weir/redis.h"

namespace weir::connectors {
namespace {

using ::testing::HasSubstr;

// The properties of the sink vertex the job API adds after a source.
template <typename Record, typename AddSink>
Properties SinkProperties(AddSink add) {
  JobGraph graph;
  StreamEnvironment env(&graph);
  auto records = env.AddSource<Record>("In", [] { return std::unique_ptr<SourceFunction<Record>>(); });
  add(records);
  return graph.vertices.back().properties;
}

// Sets each (property, value) of `bad` in turn over `written`: the connector
// refuses it with kInvalidArgument naming the property, and, when `secret`
// is given, never shows it.
void ExpectEachRefusedNamingTheProperty(const Connector& connector, const Properties& written,
                                        const std::vector<std::pair<std::string, std::string>>& bad,
                                        const std::string& secret = "") {
  for (const auto& [key, value] : bad) {
    Properties properties = written;
    properties[key] = value;
    absl::Status status = connector.Validate(properties);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << key << "=" << value;
    EXPECT_THAT(status.message(), HasSubstr("'" + key + "'")) << status;
    if (!secret.empty()) {
      EXPECT_THAT(status.message(), ::testing::Not(HasSubstr(secret))) << status;
    }
  }
}

// A sink that writes as rows come, exact through the job's state (upserts):
// the JobManager's exactly-once checks do not apply, it claims no
// transaction names, and its operator is made without contacting anything.
void ExpectWritesAsRowsCome(const Connector& connector, const Properties& written) {
  EXPECT_FALSE(WritesExactlyOnce(written));
  EXPECT_FALSE(connector.ExclusiveName(written).has_value());
  absl::StatusOr<std::unique_ptr<StreamOperator>> op = connector.CreateSink(written);
  EXPECT_TRUE(op.ok()) << op.status();  // contacts nothing until opened
}

Properties PostgresProperties(postgres::Strategy strategy) {
  return SinkProperties<postgres::Row>([strategy](const DataStream<postgres::Row>& rows) {
    postgres::Sink(rows, {.conninfo = "host=db user=u password=secret",
                          .table = "public.counts",
                          .columns = {"key", "count"},
                          .create_table = "key text, count bigint",
                          .strategy = strategy});
  });
}

TEST(SinkConnectorsTest, AreBuiltIn) {
  const ConnectorRegistry registry = BuiltinConnectors(config::Configuration());
  ASSERT_NE(registry.Find(kRedisSinkConnector), nullptr);
  ASSERT_NE(registry.Find(kPostgresSinkConnector), nullptr);
  ASSERT_NE(registry.Find(kMySqlSinkConnector), nullptr);
  EXPECT_EQ(registry.Find(kMySqlSinkConnector)->kind(), Connector::Kind::kSink);
  EXPECT_EQ(registry.Find(kRedisSinkConnector)->kind(), Connector::Kind::kSink);
  EXPECT_EQ(registry.Find(kPostgresSinkConnector)->kind(), Connector::Kind::kSink);
}

TEST(SinkConnectorsTest, RedisAcceptsWhatTheJobApiWritesAndRefusesBadProperties) {
  const Properties written = SinkProperties<redis::Record>([](const DataStream<redis::Record>& s) {
    redis::Sink(s, {.address = "cache:6380", .password = "pw", .database = 2, .pipeline = 64});
  });
  absl::StatusOr<RedisSinkConfig> config = RedisSinkConfig::FromProperties(written);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->host, "cache");
  EXPECT_EQ(config->port, 6380);
  EXPECT_EQ(config->password, "pw");
  EXPECT_EQ(config->database, 2);
  EXPECT_EQ(config->pipeline, 64);
  EXPECT_FALSE(WritesExactlyOnce(written));

  Properties v6 = written;
  v6["address"] = "[::1]:6379";
  absl::StatusOr<RedisSinkConfig> ipv6 = RedisSinkConfig::FromProperties(v6);
  ASSERT_TRUE(ipv6.ok()) << ipv6.status();
  EXPECT_EQ(ipv6->host, "::1");
  EXPECT_EQ(ipv6->port, 6379);

  RedisSinkConnector connector;
  ExpectEachRefusedNamingTheProperty(connector, written, {
      {"address", "cache"}, {"address", "cache:0"}, {"address", ":6379"}, {"database", "-1"},
      {"pipeline", "0"}, {"reconnect.timeout.ms", "soon"}, {"guarantee", "exactly-once"}, {"address", "[::1]"}});
}

TEST(SinkConnectorsTest, PostgresStrategiesMapToTheGuaranteesTheJobManagerChecks) {
  PostgresSinkConnector connector;
  for (postgres::Strategy strategy :
       {postgres::Strategy::kAtLeastOnce, postgres::Strategy::kTwoPhaseCommit, postgres::Strategy::kWriteAhead}) {
    const Properties written = PostgresProperties(strategy);
    SCOPED_TRACE(postgres::StrategyName(strategy));
    absl::StatusOr<PostgresSinkConfig> config = PostgresSinkConfig::FromProperties(written);
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->strategy, strategy);
    EXPECT_EQ(config->table, "public.counts");
    EXPECT_EQ(config->columns, (std::vector<std::string>{"key", "count"}));
    EXPECT_EQ(config->create_table, "key text, count bigint");
    EXPECT_EQ(config->transaction_prefix, "weir-PostgresSink-public.counts");
    // Two-phase commit and write-ahead write when checkpoints complete:
    // the JobManager's exactly-once checks (checkpoints on, aligned) apply.
    EXPECT_EQ(WritesExactlyOnce(written), strategy != postgres::Strategy::kAtLeastOnce);
    const std::optional<ExclusiveNameClaim> claim = connector.ExclusiveName(written);
    EXPECT_EQ(claim.has_value(), strategy != postgres::Strategy::kAtLeastOnce);
    if (claim.has_value()) {
      EXPECT_EQ(claim->name, "weir-PostgresSink-public.counts");
    }
    absl::StatusOr<std::unique_ptr<StreamOperator>> op = connector.CreateSink(written);
    EXPECT_TRUE(op.ok()) << op.status();  // contacts nothing until opened
  }
}

TEST(SinkConnectorsTest, PostgresRefusesBadPropertiesNamingThemAndNeverShowsTheConnectionString) {
  const Properties written = PostgresProperties(postgres::Strategy::kTwoPhaseCommit);
  PostgresSinkConnector connector;
  ExpectEachRefusedNamingTheProperty(connector, written, {
      {"conninfo", ""},
      {"table", "counts; DROP TABLE x"},
      {"table", "a.b.c"},
      {"table", "\"Quoted\""},
      {"columns", "key,"},
      {"columns", "key,count)"},
      {"strategy", "xa"},
      {"guarantee", "at-least-once"},
      {"transaction.prefix", "it's"},
      {"transaction.prefix", std::string(151, 'p')},
      {"batch.rows", "0"},
      {"create.table", "key text); DROP TABLE users; --"}}, "secret");
}

Properties PostgresUpsertProperties(std::vector<std::string> columns, std::vector<std::string> keys) {
  return SinkProperties<postgres::Row>([&](const DataStream<postgres::Row>& rows) {
    postgres::Sink(rows, {.conninfo = "host=db user=u password=secret",
                          .table = "public.Counts",
                          .columns = columns,
                          .strategy = postgres::Strategy::kUpsert,
                          .batch_rows = 500,
                          .key_columns = keys});
  });
}

TEST(SinkConnectorsTest, PostgresUpsertIsAtLeastOnceByKeyAndClaimsNoTransactionNames) {
  const Properties written = PostgresUpsertProperties({"key", "count"}, {"key"});
  EXPECT_EQ(written.at("strategy"), "upsert");
  EXPECT_EQ(written.at("key.columns"), "key");
  absl::StatusOr<PostgresSinkConfig> config = PostgresSinkConfig::FromProperties(written);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->strategy, postgres::Strategy::kUpsert);
  EXPECT_EQ(config->key_columns, (std::vector<std::string>{"key"}));
  EXPECT_EQ(config->batch_rows, 500);
  // Writes as rows come, like the Redis sink.
  ExpectWritesAsRowsCome(PostgresSinkConnector(), written);
}

TEST(SinkConnectorsTest, PostgresUpsertStatementsQuoteNamesAndUpdateOnlyTheOtherColumns) {
  absl::StatusOr<PostgresSinkConfig> config =
      PostgresSinkConfig::FromProperties(PostgresUpsertProperties({"Tenant", "user", "order", "total"}, {"tenant", "User"}));
  ASSERT_TRUE(config.ok()) << config.status();
  const PostgresUpsertStatements statements(*config);
  EXPECT_EQ(statements.create_staging,
            "CREATE TEMPORARY TABLE IF NOT EXISTS pg_temp.weir_upsert ON COMMIT DELETE ROWS AS SELECT 0::bigint AS "
            "weir_upsert_seq, \"tenant\", \"user\", \"order\", \"total\" FROM \"public\".\"counts\" WITH NO DATA");
  EXPECT_EQ(statements.copy,
            "COPY pg_temp.weir_upsert (weir_upsert_seq, \"tenant\", \"user\", \"order\", \"total\") FROM STDIN");
  EXPECT_EQ(statements.upsert,
            "INSERT INTO \"public\".\"counts\" (\"tenant\", \"user\", \"order\", \"total\") SELECT DISTINCT ON "
            "(\"tenant\", \"user\") \"tenant\", \"user\", \"order\", \"total\" FROM pg_temp.weir_upsert ORDER BY "
            "\"tenant\", \"user\", weir_upsert_seq DESC ON CONFLICT (\"tenant\", \"user\") DO UPDATE SET \"order\" = "
            "EXCLUDED.\"order\", \"total\" = EXCLUDED.\"total\"");

  // Every column a key: a row already there stays.
  absl::StatusOr<PostgresSinkConfig> all_keys =
      PostgresSinkConfig::FromProperties(PostgresUpsertProperties({"a", "b"}, {"b", "a"}));
  ASSERT_TRUE(all_keys.ok()) << all_keys.status();
  EXPECT_THAT(PostgresUpsertStatements(*all_keys).upsert, ::testing::EndsWith("ON CONFLICT (\"b\", \"a\") DO NOTHING"));
}

TEST(SinkConnectorsTest, PostgresUpsertRefusesMissingAndStrayKeyColumnsSayingWhatToDo) {
  const Properties written = PostgresUpsertProperties({"key", "count"}, {"key"});
  PostgresSinkConnector connector;
  ExpectEachRefusedNamingTheProperty(connector, written, {
      {"key.columns", ""},
      {"key.columns", "id"},                  // not among the columns
      {"key.columns", "key,"},
      {"key.columns", "key,KEY"},             // one column twice
      {"key.columns", "key\"; DROP TABLE x"},
      {"key.columns", "\"key\""},
      {"columns", "key,count,Count"},         // an upsert sets each column once
      {"columns", "key,weir_upsert_seq"},
      {"table", ""},
      {"table", "t\"; DROP TABLE x; --"},
      {"batch.rows", "NaN"},
      {"batch.rows", "1e9"},
      {"batch.rows", "1000001"},
      {"batch.rows", "-1"},
      {"guarantee", "exactly-once"}}, "secret");
  Properties missing = written;
  missing.erase("key.columns");
  EXPECT_THAT(connector.Validate(missing).message(), HasSubstr("SinkOptions::key_columns")) << connector.Validate(missing);

  // Key columns belong to the upsert strategy alone.
  Properties stray = PostgresProperties(postgres::Strategy::kTwoPhaseCommit);
  stray["key.columns"] = "key";
  EXPECT_THAT(connector.Validate(stray).message(), HasSubstr("'key.columns'")) << connector.Validate(stray);

  // The job API refuses the same before the job is submitted.
  EXPECT_THROW(PostgresUpsertProperties({"key", "count"}, {}), std::invalid_argument);
  EXPECT_THROW(SinkProperties<postgres::Row>([](const DataStream<postgres::Row>& rows) {
                 postgres::Sink(rows, {.conninfo = "dbname=x", .table = "t", .columns = {"a"}, .key_columns = {"a"}});
               }),
               std::invalid_argument);
}

Properties MySqlProperties(std::vector<std::string> columns, std::vector<std::string> keys) {
  return SinkProperties<mysql::Row>([&](const DataStream<mysql::Row>& rows) {
    mysql::Sink(rows, {.host = "db",
                       .port = 3307,
                       .user = "weir",
                       .password_file = "/etc/weir/mysql-password",
                       .database = "app",
                       .table = "Counts",
                       .columns = columns,
                       .key_columns = keys,
                       .create_table = "word VARCHAR(64) PRIMARY KEY, count BIGINT",
                       .batch_rows = 250});
  });
}

TEST(SinkConnectorsTest, MySqlAcceptsWhatTheJobApiWritesWithoutASecretInIt) {
  const Properties written = MySqlProperties({"word", "count"}, {"word"});
  for (const auto& [key, value] : written) EXPECT_FALSE(absl::StrContains(key, "password") && key != "password.file");
  absl::StatusOr<MySqlSinkConfig> config = MySqlSinkConfig::FromProperties(written);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->host, "db");
  EXPECT_EQ(config->port, 3307);
  EXPECT_EQ(config->user, "weir");
  EXPECT_EQ(config->password_file, "/etc/weir/mysql-password");
  EXPECT_EQ(config->database, "app");
  EXPECT_EQ(config->table, "Counts");
  EXPECT_EQ(config->columns, (std::vector<std::string>{"word", "count"}));
  EXPECT_EQ(config->key_columns, (std::vector<std::string>{"word"}));
  EXPECT_EQ(config->batch_rows, 250);
  ExpectWritesAsRowsCome(MySqlSinkConnector(), written);

  const MySqlUpsertStatements statements(*config);
  EXPECT_EQ(statements.insert_head, "INSERT INTO `Counts` (`word`, `count`) VALUES ");
  EXPECT_EQ(statements.on_duplicate, " ON DUPLICATE KEY UPDATE `count` = VALUES(`count`)");
  EXPECT_EQ(statements.create_table,
            "CREATE TABLE IF NOT EXISTS `Counts` (word VARCHAR(64) PRIMARY KEY, count BIGINT)");
  absl::StatusOr<MySqlSinkConfig> reserved =
      MySqlSinkConfig::FromProperties(MySqlProperties({"select", "order", "from"}, {"ORDER", "select"}));
  ASSERT_TRUE(reserved.ok()) << reserved.status();
  EXPECT_EQ(MySqlUpsertStatements(*reserved).on_duplicate, " ON DUPLICATE KEY UPDATE `from` = VALUES(`from`)");
  absl::StatusOr<MySqlSinkConfig> all_keys = MySqlSinkConfig::FromProperties(MySqlProperties({"a", "b"}, {"b", "a"}));
  ASSERT_TRUE(all_keys.ok()) << all_keys.status();
  EXPECT_EQ(MySqlUpsertStatements(*all_keys).on_duplicate, " ON DUPLICATE KEY UPDATE `b` = `b`");
}

TEST(SinkConnectorsTest, MySqlRefusesBadPropertiesNamingThem) {
  const Properties written = MySqlProperties({"word", "count"}, {"word"});
  MySqlSinkConnector connector;
  ExpectEachRefusedNamingTheProperty(connector, written, {
      {"host", ""},
      {"host", "db/x"},
      {"port", "0"},
      {"port", "65536"},
      {"port", "http"},
      {"database", ""},
      {"database", "app`; DROP DATABASE app; --"},
      {"table", ""},
      {"table", "t`; DROP TABLE x; --"},
      {"table", std::string(65, 't')},
      {"table", "schema.table"},
      {"columns", "word,"},
      {"columns", "word,Word"},
      {"columns", "word,`count`"},
      {"key.columns", ""},
      {"key.columns", "id"},
      {"key.columns", "word,word"},
      {"key.columns", "word`"},
      {"batch.rows", "NaN"},
      {"batch.rows", "0"},
      {"batch.rows", "1000001"},
      {"batch.rows", "99999999999999999999"},
      {"create.table", "a INT); DROP TABLE users; --"},
      {"password.env", "MYSQL_PWD"},  // besides password.file
      {"guarantee", "exactly-once"}});
  EXPECT_THROW(MySqlProperties({"word", "count"}, {}), std::invalid_argument);
}

TEST(SinkConnectorsTest, MySqlReadsItsPasswordOnTheTaskManager) {
  MySqlSinkConfig config;
  EXPECT_EQ(config.ReadPassword().value_or("?"), "");
  config.password_env = "WEIR_TEST_MYSQL_PASSWORD_UNSET";
  EXPECT_EQ(config.ReadPassword().status().code(), absl::StatusCode::kFailedPrecondition);
  ::setenv("WEIR_TEST_MYSQL_PASSWORD", "s3cret", 1);
  config.password_env = "WEIR_TEST_MYSQL_PASSWORD";
  EXPECT_EQ(config.ReadPassword().value_or("?"), "s3cret");
  config.password_env.clear();
  config.password_file = ::testing::TempDir() + "/mysql-password";
  {
    std::ofstream out(config.password_file);
    out << "from-file\n";
  }
  EXPECT_EQ(config.ReadPassword().value_or("?"), "from-file");
  config.password_file += ".missing";
  EXPECT_EQ(config.ReadPassword().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(SinkConnectorsTest, ALongDefaultPrefixIsCutStablyToWhatATransactionNameTakes) {
  auto prefix_for = [](const std::string& table) {
    return SinkProperties<postgres::Row>([&](const DataStream<postgres::Row>& rows) {
      postgres::Sink(rows, {.conninfo = "dbname=x", .table = table, .columns = {"a"}},
                     std::string(100, 'n'));
    }).at("transaction.prefix");
  };
  const std::string a = prefix_for(std::string(63, 't')), again = prefix_for(std::string(63, 't'));
  const std::string b = prefix_for(std::string(62, 't'));
  EXPECT_EQ(a.size(), 150u);
  EXPECT_EQ(a, again);
  EXPECT_NE(a, b);
  EXPECT_TRUE(PostgresSinkConnector().Validate(SinkProperties<postgres::Row>([](const DataStream<postgres::Row>& rows) {
                postgres::Sink(rows, {.conninfo = "dbname=x", .table = std::string(63, 't'), .columns = {"a"}},
                               std::string(100, 'n'));
              })).ok());
}

TEST(SinkConnectorsTest, CopyTextEscapesWhatCopyWouldReadAsSyntax) {
  std::string out;
  AppendCopyText(std::string("a\tb\nc\\d\re"), out);
  out += '|';
  AppendCopyText(std::nullopt, out);
  out += '|';
  AppendCopyText(std::string("\\N"), out);
  EXPECT_EQ(out, "a\\tb\\nc\\\\d\\re|\\N|\\\\N");
}

TEST(SinkConnectorsTest, RowsAndRedisRecordsSurviveTheirSerializers) {
  const postgres::Row row{{std::string("k\0ey", 4), std::nullopt, std::string()}};
  std::string bytes;
  Serializer<postgres::Row>::Write(row, bytes);
  EXPECT_EQ(Serializer<postgres::Row>::Read(bytes), row);
  const redis::Record hash{"key", std::string("field"), "value"};
  const redis::Record plain{"key", std::nullopt, ""};
  for (const redis::Record& r : {hash, plain}) {
    std::string b;
    Serializer<redis::Record>::Write(r, b);
    EXPECT_EQ(Serializer<redis::Record>::Read(b), r);
  }
  EXPECT_THROW(Serializer<postgres::Row>::Read(bytes.substr(0, bytes.size() - 1)), std::runtime_error);
}

}  // namespace
}  // namespace weir::connectors
