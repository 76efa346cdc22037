#include "tests/kafka/test_kafka.h"

#include <librdkafka/rdkafka.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "connectors/kafka/kafka_admin.h"
#include "gtest/gtest.h"

#include "tests/testing/process.h"

namespace weir::test {

std::string TestKafkaBootstrap() {
  if (const char* env = std::getenv("WEIR_TEST_KAFKA_BOOTSTRAP"); env != nullptr && *env) {
    return std::string(absl::StripAsciiWhitespace(env));
  }
  const char* dir = std::getenv("WEIR_TEST_KAFKA_DIR");
  if (dir == nullptr || *dir == '\0') {
    ADD_FAILURE() << "No test Kafka broker: set WEIR_TEST_KAFKA_BOOTSTRAP=host:port, or "
                     "WEIR_TEST_KAFKA_DIR to a directory started with "
                     "`scripts/kafka.sh start DIR` (ctest does this through the "
                     "kafka fixture).";
    return "";
  }
  const std::string path = absl::StrCat(dir, "/bootstrap");
  std::ifstream in(path);
  std::stringstream contents;
  contents << in.rdbuf();
  std::string bootstrap(absl::StripAsciiWhitespace(contents.str()));
  if (!in || bootstrap.empty()) {
    ADD_FAILURE() << "No test Kafka broker: cannot read a bootstrap address from " << path
                  << " (WEIR_TEST_KAFKA_DIR=" << dir << "). Start one with "
                  << "`scripts/kafka.sh start " << dir << "`.";
    return "";
  }
  return bootstrap;
}

SecureListener TestKafkaSaslSsl() {
  SecureListener listener;
  const char* dir = std::getenv("WEIR_TEST_KAFKA_DIR");
  if (dir == nullptr || *dir == '\0') {
    ADD_FAILURE() << "the SASL_SSL listener needs WEIR_TEST_KAFKA_DIR (a broker started by scripts/kafka.sh)";
    return listener;
  }
  listener.bootstrap =
      std::string(absl::StripAsciiWhitespace(testing::ReadFile(absl::StrCat(dir, "/bootstrap-sasl-ssl"))));
  listener.ca_pem = testing::ReadFile(absl::StrCat(dir, "/tls/ca.pem"));
  if (listener.bootstrap.empty() || listener.ca_pem.empty()) {
    ADD_FAILURE() << "no SASL_SSL listener in " << dir << " (bootstrap-sasl-ssl, tls/ca.pem): restart the broker "
                  << "with this version of scripts/kafka.sh";
    listener.bootstrap.clear();
  }
  return listener;
}

absl::Status CreateTopic(const std::string& bootstrap, const std::string& name,
                         int partitions) {
  return connectors::kafka_admin::CreateTopic(bootstrap, name, partitions);
}

std::string UniqueTopicName(const std::string& prefix) {
  static std::atomic<int> counter{0};
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return absl::StrCat(prefix, "-", getpid(), "-",
                      std::chrono::duration_cast<std::chrono::microseconds>(now).count(),
                      "-", counter.fetch_add(1));
}

}  // namespace weir::test
