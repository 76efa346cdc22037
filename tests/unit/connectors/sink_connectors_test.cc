// The Redis and PostgreSQL sink connectors' part of submission that
// contacts no server: what weir::redis::Sink and weir::postgres::Sink write
// into the job graph is what the connectors accept, bad properties are
// refused naming the property, the strategies map to the guarantees the
// JobManager checks, and rows are escaped for COPY.
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "connectors/builtin.h"
#include "connectors/postgres/postgres_sink.h"
#include "connectors/redis/redis_sink.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
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
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"address", "cache"}, {"address", "cache:0"}, {"address", ":6379"}, {"database", "-1"},
           {"pipeline", "0"}, {"reconnect.timeout.ms", "soon"}, {"guarantee", "exactly-once"}, {"address", "[::1]"}}) {
    Properties bad = written;
    bad[key] = value;
    absl::Status status = connector.Validate(bad);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << key << "=" << value;
    EXPECT_THAT(status.message(), HasSubstr("'" + key + "'")) << status;
  }
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
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
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
           {"create.table", "key text); DROP TABLE users; --"}}) {
    Properties bad = written;
    bad[key] = value;
    absl::Status status = connector.Validate(bad);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << key << "=" << value;
    EXPECT_THAT(status.message(), HasSubstr("'" + key + "'")) << status;
    EXPECT_THAT(status.message(), ::testing::Not(HasSubstr("secret"))) << status;
  }
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
