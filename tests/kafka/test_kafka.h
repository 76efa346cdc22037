// Helpers for tests that talk to the real test Kafka broker started by
// scripts/kafka.sh (see weir_add_kafka_test in cmake/WeirTesting.cmake).
#ifndef WEIR_TESTS_KAFKA_TEST_KAFKA_H_
#define WEIR_TESTS_KAFKA_TEST_KAFKA_H_

#include <string>

#include "absl/status/status.h"

namespace weir::test {

// The bootstrap address ("host:port") of the test broker: $WEIR_TEST_KAFKA_BOOTSTRAP if
// set, else the contents of $WEIR_TEST_KAFKA_DIR/bootstrap. If neither gives an address
// this records a test failure (never a skip: Kafka tests must not pass silently without
// a broker) and returns "", so callers write
//   const std::string bootstrap = TestKafkaBootstrap();
//   ASSERT_FALSE(bootstrap.empty());
std::string TestKafkaBootstrap();

// The test broker's SASL_SSL listener (SCRAM-SHA-256 or PLAIN; see scripts/kafka.sh):
// its address, the PEM of the CA that signed its certificate, and the user.
// Needs $WEIR_TEST_KAFKA_DIR; records a test failure and returns an empty
// address when it cannot be read.
struct SecureListener {
  std::string bootstrap;
  std::string ca_pem;
  std::string username = "weirtest";
  std::string password = "weirtest-secret";
};
SecureListener TestKafkaSaslSsl();

// Creates `name` with `partitions` partitions and replication factor 1 through the
// librdkafka Admin API, then waits until the broker's metadata shows every partition
// with a leader, so producers and consumers can use it at once.
absl::Status CreateTopic(const std::string& bootstrap, const std::string& name,
                         int partitions);

// A topic name no other test (or earlier run against the same broker) uses:
// "<prefix>-<pid>-<time>-<counter>".
std::string UniqueTopicName(const std::string& prefix);

}  // namespace weir::test

#endif  // WEIR_TESTS_KAFKA_TEST_KAFKA_H_
