// The Kafka connectors' part of submission checks that contacts no broker:
// their registration, the exactly-once sink's transaction timeout against
// the job's checkpoints, and the transactional id prefix it claims.
#include "connectors/kafka/kafka_connectors.h"

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "connectors/builtin.h"
#include "connectors/kafka/kafka_client.h"
#include "connectors/registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weir::connectors {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Properties ExactlyOnceSink() {
  return {{"brokers", "127.0.0.1:9"},
          {"topic", "out"},
          {"guarantee", "exactly-once"},
          {"transactional.id.prefix", "orders-tx"}};
}

JobCheckpointing Checkpoints(absl::Duration interval, absl::Duration timeout) {
  return JobCheckpointing{.enabled = true, .aligned = true, .interval = interval, .timeout = timeout};
}

// A SCRAM login refused as "invalid credentials" gets the known cause when
// the librdkafka in use has the SCRAM bug Kafka 4.x brokers refuse, and no
// such text otherwise (or for other errors).
TEST(KafkaConnectorsTest, ScramRefusalsNameTheLibrdkafkaBugWhereItApplies) {
  using connectors::kafka_internal::ExplainBrokerError;
  const std::string refused =
      "sasl_ssl://b:9093/bootstrap: SASL authentication error: Authentication failed during authentication due to "
      "invalid credentials with SASL mechanism SCRAM-SHA-256";
  EXPECT_THAT(ExplainBrokerError(refused, 0x020002ff), ::testing::HasSubstr("fixed in librdkafka 2.6.1"));
  EXPECT_EQ(ExplainBrokerError(refused, 0x020601ff), refused);
  const std::string plain = "SASL authentication error: Authentication failed: Invalid username or password";
  EXPECT_EQ(ExplainBrokerError(plain, 0x020002ff), plain);
}

TEST(KafkaConnectorsTest, RegistersSourceAndSink) {
  ConnectorRegistry registry;
  ASSERT_TRUE(RegisterKafkaConnectors(&registry).ok());
  EXPECT_THAT(registry.Names(), ElementsAre("kafka-sink", "kafka-source"));
  EXPECT_EQ(registry.Find(kKafkaSourceConnector)->kind(), Connector::Kind::kSource);
  EXPECT_EQ(registry.Find(kKafkaSinkConnector)->kind(), Connector::Kind::kSink);
  EXPECT_EQ(RegisterKafkaConnectors(&registry).code(), absl::StatusCode::kAlreadyExists);

  // The daemons' registry, with security.kafka.allowed-properties applied.
  config::Configuration cluster;
  ASSERT_TRUE(cluster.Set("security.kafka.allowed-properties", "ssl.ca.location", config::ValueSource::kCommandLine).ok());
  const ConnectorRegistry builtin = BuiltinConnectors(cluster);
  EXPECT_THAT(builtin.Names(), ElementsAre("kafka-sink", "kafka-source", "mysql-sink", "postgres-sink", "redis-sink"));
  const Properties with_ca = {{"brokers", "127.0.0.1:9"}, {"topics", "in"}, {"kafka.ssl.ca.location", "/etc/ssl/ca.pem"}};
  EXPECT_TRUE(builtin.Validate(kKafkaSourceConnector, with_ca).ok());
  EXPECT_EQ(registry.Validate(kKafkaSourceConnector, with_ca).code(), absl::StatusCode::kInvalidArgument);
}

TEST(KafkaConnectorsTest, TransactionsMustOutliveACheckpoint) {
  const KafkaSinkConnector sink;
  // The default timeout (15 min) outlives a 1 s interval and 10 min timeout.
  EXPECT_TRUE(sink.ValidateForJob(ExactlyOnceSink(), Checkpoints(absl::Seconds(1), absl::Minutes(10))).ok());

  Properties properties = ExactlyOnceSink();
  properties["kafka.transaction.timeout.ms"] = "60000";
  const absl::Status status = sink.ValidateForJob(properties, Checkpoints(absl::Seconds(1), absl::Minutes(10)));
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("kafka.transaction.timeout.ms is 60000 ms"));
  EXPECT_THAT(status.message(), HasSubstr("execution.checkpointing.interval + execution.checkpointing.timeout + "
                                          "the longest restart delay"));
  EXPECT_THAT(status.message(), HasSubstr("= 601000 ms"));
  EXPECT_TRUE(sink.ValidateForJob(properties, Checkpoints(absl::Seconds(1), absl::Seconds(50))).ok());
  // Equal is not enough: the broker aborts at the timeout.
  EXPECT_EQ(sink.ValidateForJob(properties, Checkpoints(absl::Seconds(10), absl::Seconds(50))).code(),
            absl::StatusCode::kFailedPrecondition);
  // A failure keeps a completed checkpoint's transaction open through the
  // wait before the restart, which then commits it.
  JobCheckpointing slow_restart = Checkpoints(absl::Seconds(1), absl::Seconds(50));
  slow_restart.restart_delay = absl::Seconds(30);
  const absl::Status restart = sink.ValidateForJob(properties, slow_restart);
  EXPECT_EQ(restart.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(restart.message(), HasSubstr("= 81000 ms"));

  // Nothing to check without transactions or without checkpoints (the
  // dispatcher refuses exactly-once without checkpoints by itself).
  EXPECT_TRUE(sink.ValidateForJob(properties, JobCheckpointing{}).ok());
  properties["guarantee"] = "at-least-once";
  properties.erase("transactional.id.prefix");
  EXPECT_TRUE(sink.ValidateForJob(properties, Checkpoints(absl::Seconds(1), absl::Minutes(10))).ok());
  // Properties that fail Validate fail here with the same error.
  properties["guarantee"] = "twice";
  EXPECT_EQ(sink.ValidateForJob(properties, Checkpoints(absl::Seconds(1), absl::Minutes(10))),
            sink.Validate(properties));
}

TEST(KafkaConnectorsTest, ExactlyOnceSinkClaimsItsTransactionalIdPrefix) {
  const KafkaSinkConnector sink;
  std::optional<ExclusiveNameClaim> claim = sink.ExclusiveName(ExactlyOnceSink());
  ASSERT_TRUE(claim.has_value());
  EXPECT_EQ(claim->name, "orders-tx");
  EXPECT_EQ(claim->what, "transactional id prefix");
  EXPECT_EQ(claim->setting, "transactional_id_prefix");

  Properties at_least_once = ExactlyOnceSink();
  at_least_once["guarantee"] = "at-least-once";
  EXPECT_EQ(sink.ExclusiveName(at_least_once), std::nullopt);
  EXPECT_EQ(KafkaSourceConnector().ExclusiveName({{"brokers", "127.0.0.1:9"}, {"topics", "in"}}), std::nullopt);
}

}  // namespace
}  // namespace weir::connectors
