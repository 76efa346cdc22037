#include "connectors/kafka/kafka_properties.h"

#include <librdkafka/rdkafkacpp.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "connectors/kafka/kafka_connectors.h"
#include "connectors/registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/process.h"

namespace weir::connectors {
namespace {

using ::testing::HasSubstr;

// The Kafka connectors as a cluster registers them, with `policy`.
ConnectorRegistry Kafka(const KafkaPropertyPolicy& policy = {}) {
  ConnectorRegistry registry;
  EXPECT_TRUE(RegisterKafkaConnectors(&registry, policy).ok());
  return registry;
}

Properties SourceWith(const std::string& name, const std::string& value) {
  return {{"brokers", "127.0.0.1:9"}, {"topics", "in"}, {"kafka." + name, value}};
}

TEST(KafkaPropertiesTest, RefusesPropertiesThatNameFilesLibrariesOrCommands) {
  for (const char* name :
       {"plugin.library.paths", "ssl.engine.location", "sasl.kerberos.kinit.cmd", "sasl.kerberos.keytab",
        "ssl.key.location", "ssl.certificate.location", "ssl.ca.location", "ssl.crl.location",
        "ssl.keystore.location", "ssl.providers", "ssl.engine.id", "offset.store.path", "no.such.property"}) {
    for (const char* connector : {kKafkaSourceConnector, kKafkaSinkConnector}) {
      Properties properties = SourceWith(name, "/tmp/x");
      if (std::string(connector) == kKafkaSinkConnector) {
        properties = {{"brokers", "127.0.0.1:9"}, {"topic", "out"}, {std::string("kafka.") + name, "/tmp/x"}};
      }
      const absl::Status status = Kafka().Validate(connector, properties);
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << name << ": " << status;
      EXPECT_THAT(status.message(), HasSubstr(std::string("'kafka.") + name + "'"));
      EXPECT_THAT(status.message(), HasSubstr("security.kafka.allowed-properties"));
      // A TaskManager refuses it in the same way, before any client exists.
      if (std::string(connector) == kKafkaSourceConnector) {
        EXPECT_EQ(Kafka().CreateSource(connector, properties, {}).status().code(), absl::StatusCode::kInvalidArgument);
      } else {
        EXPECT_EQ(Kafka().CreateSink(connector, properties).status().code(), absl::StatusCode::kInvalidArgument);
      }
    }
  }
}

TEST(KafkaPropertiesTest, ValidatingAJobNeverLoadsAPluginEvenWhenAllowed) {
  const std::string dir = weir::testing::MakeTempDir("weir-plugin");
  const std::string marker = dir + "/loaded";
  ASSERT_EQ(setenv("WEIR_PLUGIN_MARKER", marker.c_str(), 1), 0);
  const Properties properties = SourceWith("plugin.library.paths", WEIR_PLUGIN_MARKER_LIBRARY);

  EXPECT_FALSE(Kafka().Validate(kKafkaSourceConnector, properties).ok());
  // An operator allowed it: validation accepts the name, and still loads nothing.
  const KafkaPropertyPolicy allowed = KafkaPropertyPolicy::FromList("plugin.library.paths, debug");
  EXPECT_TRUE(Kafka(allowed).Validate(kKafkaSourceConnector, properties).ok());
  EXPECT_FALSE(std::filesystem::exists(marker)) << "validation loaded the plugin library";

  // The check above can fail: librdkafka itself does load the library.
  std::unique_ptr<RdKafka::Conf> conf(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  std::string error;
  conf->set("plugin.library.paths", WEIR_PLUGIN_MARKER_LIBRARY, error);
  EXPECT_TRUE(std::filesystem::exists(marker)) << "librdkafka did not load the marker library: " << error;
  unsetenv("WEIR_PLUGIN_MARKER");
}

TEST(KafkaPropertiesTest, ChecksValuesFromTheTable) {
  struct Case {
    std::string name, value;
    bool ok;
  };
  const Case cases[] = {
      {"fetch.max.bytes", "1000000", true},   {"fetch.max.bytes", "lots", false},
      {"fetch.max.bytes", "-1", false},       {"socket.timeout.ms", "5", false},
      {"linger.ms", "2.5", true},             {"linger.ms", "nan", false},
      {"check.crcs", "true", true},           {"check.crcs", "yes", false},
      {"compression.type", "zstd", true},     {"compression.type", "brotli", false},
      {"debug", "broker, fetch", true},       {"debug", "broker,everything", false},
      {"security.protocol", "sasl_ssl", true}, {"sasl.mechanism", "SCRAM-SHA-512", true},
      {"sasl.mechanism", "GSSAPI", false},    {"client.id", std::string(70 * 1024, 'x'), false},
      {"client.id", "orders", true},
  };
  for (const Case& c : cases) {
    const absl::Status status = Kafka().Validate(kKafkaSourceConnector, SourceWith(c.name, c.value));
    EXPECT_EQ(status.ok(), c.ok) << c.name << "=" << c.value.substr(0, 40) << ": " << status;
    if (!c.ok) {
      EXPECT_THAT(status.message(), HasSubstr("'kafka." + c.name + "'"));
    }
  }
  const Properties sink = {{"brokers", "127.0.0.1:9"}, {"topic", "out"}, {"guarantee", "at-most-once"},
                           {"kafka.acks", "all"}};
  EXPECT_TRUE(Kafka().Validate(kKafkaSinkConnector, sink).ok());
}

TEST(KafkaPropertiesTest, TableIsSortedAndLibrdkafkaAcceptsEveryEntry) {
  auto specs = JobSettableKafkaProperties();
  for (size_t i = 1; i < specs.size(); ++i) {
    EXPECT_LT(specs[i - 1].name, specs[i].name) << "the allow-list must stay sorted (binary search)";
  }
  // A representative value of each entry: the table and librdkafka agree on
  // names and value forms.
  for (const KafkaPropertySpec& spec : specs) {
    std::string value = "x";
    switch (spec.kind) {
      case KafkaPropertySpec::Kind::kInt:
      case KafkaPropertySpec::Kind::kFloat: value = std::to_string(spec.max_value); break;
      case KafkaPropertySpec::Kind::kBool: value = "true"; break;
      case KafkaPropertySpec::Kind::kEnum:
      case KafkaPropertySpec::Kind::kFlags:
        value = std::string(spec.values.substr(0, spec.values.find(','))); break;
      case KafkaPropertySpec::Kind::kString: break;
    }
    const std::string name(spec.name);
    EXPECT_TRUE(CheckJobKafkaProperty("test", name, value, {}).ok()) << name << "=" << value;
    std::unique_ptr<RdKafka::Conf> conf(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
    std::string error;
    EXPECT_EQ(conf->set(name, value, error), RdKafka::Conf::CONF_OK) << name << "=" << value << ": " << error;
  }
}

}  // namespace
}  // namespace weir::connectors
