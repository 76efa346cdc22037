#include "jobmanager/ha/ha_settings.h"

#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "common/config/configuration.h"
#include "gtest/gtest.h"
#include "tests/testing/process.h"

namespace weir::jobmanager::ha {
namespace {

absl::StatusOr<EtcdHaSettings> Settings(const std::vector<std::string>& overrides) {
  absl::StatusOr<config::Configuration> config = config::Configuration::Load(std::nullopt, overrides);
  if (!config.ok()) return config.status();
  return EtcdHaSettingsFromConfig(*config, "jm:6123");
}

void ExpectError(const absl::Status& status, const std::string& needle) {
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), needle)) << status << " lacks " << needle;
}

TEST(HaSettingsTest, Defaults) {
  config::Configuration defaults;
  EXPECT_EQ(defaults.GetString(config::keys::kHaType), "none");
  absl::StatusOr<EtcdHaSettings> settings = Settings({});
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_EQ(settings->client.endpoints, (std::vector<std::string>{"127.0.0.1:2379"}));
  EXPECT_EQ(settings->election.cluster_id, "default");
  EXPECT_EQ(settings->election.lease_ttl, absl::Seconds(3));
  EXPECT_EQ(settings->election.address, "jm:6123");
  EXPECT_TRUE(settings->client.username.empty());
}

TEST(HaSettingsTest, LeaseTtlBelowOneSecondOrNotADurationIsRefusedNamingTheKey) {
  ExpectError(Settings({"high-availability.etcd.lease-ttl=500ms"}).status(), "high-availability.etcd.lease-ttl");
  ExpectError(Settings({"high-availability.etcd.lease-ttl=0"}).status(), "high-availability.etcd.lease-ttl");
  ExpectError(Settings({"high-availability.etcd.lease-ttl=NaN"}).status(), "high-availability.etcd.lease-ttl");
  ExpectError(Settings({"high-availability.etcd.lease-ttl=soon"}).status(), "high-availability.etcd.lease-ttl");
  ExpectError(Settings({"high-availability.etcd.lease-ttl=-3 s"}).status(), "high-availability.etcd.lease-ttl");
  absl::StatusOr<EtcdHaSettings> ten = Settings({"high-availability.etcd.lease-ttl=10 s"});
  ASSERT_TRUE(ten.ok()) << ten.status();
  EXPECT_EQ(ten->election.lease_ttl, absl::Seconds(10));
}

TEST(HaSettingsTest, TypeIsNoneOrEtcd) {
  EXPECT_TRUE(config::Configuration::Load(std::nullopt, {"high-availability.type=etcd"}).ok());
  ExpectError(config::Configuration::Load(std::nullopt, {"high-availability.type=zookeeper"}).status(),
              "high-availability.type");
}

TEST(HaSettingsTest, EndpointsAreCommaSeparatedHostPorts) {
  absl::StatusOr<EtcdHaSettings> three =
      Settings({"high-availability.etcd.endpoints=etcd-0:2379, etcd-1:2379,etcd-2:2379"});
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_EQ(three->client.endpoints, (std::vector<std::string>{"etcd-0:2379", "etcd-1:2379", "etcd-2:2379"}));
  ExpectError(Settings({"high-availability.etcd.endpoints=etcd-0"}).status(), "high-availability.etcd.endpoints");
  ExpectError(Settings({"high-availability.etcd.endpoints= , "}).status(), "high-availability.etcd.endpoints");
}

TEST(HaSettingsTest, ClusterIdIsAName) {
  ExpectError(config::Configuration::Load(std::nullopt, {"high-availability.cluster-id=a/b"}).status(),
              "high-availability.cluster-id");
}

TEST(HaSettingsTest, UserNeedsAReadablePasswordFile) {
  ExpectError(Settings({"high-availability.etcd.username=root"}).status(), "high-availability.etcd.password-file");
  ExpectError(Settings({"high-availability.etcd.username=root", "high-availability.etcd.password-file=/nonexistent"})
                  .status(),
              "cannot read /nonexistent");
  std::string dir = testing::MakeTempDir("weir-ha-settings-");
  std::string file = dir + "/password";
  std::ofstream(file) << "s3cret\n";
  absl::StatusOr<EtcdHaSettings> settings =
      Settings({"high-availability.etcd.username=root", "high-availability.etcd.password-file=" + file});
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_EQ(settings->client.username, "root");
  EXPECT_EQ(settings->client.password, "s3cret");
}

TEST(HaSettingsTest, ClientCertificateNeedsKeyAndCa) {
  ExpectError(Settings({"high-availability.etcd.ssl.cert-file=/c.pem"}).status(), "high-availability.etcd.ssl.key-file");
  ExpectError(
      Settings({"high-availability.etcd.ssl.cert-file=/c.pem", "high-availability.etcd.ssl.key-file=/k.pem"}).status(),
      "high-availability.etcd.ssl.ca-file");
}

}  // namespace
}  // namespace weir::jobmanager::ha
