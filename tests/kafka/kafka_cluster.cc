#include "tests/kafka/kafka_cluster.h"

#include <librdkafka/rdkafka.h>

#include <cstdlib>
#include <memory>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "connectors/kafka/protocol/broker_connection.h"
#include "connectors/kafka/protocol/kafka_codec.h"
#include "connectors/kafka/protocol/kafka_errors.h"
#include "gtest/gtest.h"
#include "tests/testing/process.h"

namespace weir::test {
namespace {

namespace kp = connectors::kafka_protocol;

struct KafkaDeleter {
  void operator()(rd_kafka_t* rk) const { rd_kafka_destroy(rk); }
  void operator()(const rd_kafka_metadata_t* m) const { rd_kafka_metadata_destroy(m); }
};

// The cluster's metadata, every topic (internal ones too), as one of
// `bootstrap`'s brokers answers it.
template <typename Use>
absl::Status WithMetadata(const std::string& bootstrap, const rd_kafka_topic_t* only, Use use) {
  char errstr[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  if (rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap.c_str(), errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK) {
    rd_kafka_conf_destroy(conf);
    return absl::InvalidArgumentError(errstr);
  }
  std::unique_ptr<rd_kafka_t, KafkaDeleter> rk(rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr)));
  if (!rk) {
    rd_kafka_conf_destroy(conf);
    return absl::InternalError(absl::StrCat("rd_kafka_new: ", errstr));
  }
  const rd_kafka_metadata_t* raw = nullptr;
  const rd_kafka_resp_err_t err = rd_kafka_metadata(rk.get(), only == nullptr ? 1 : 0,
                                                    const_cast<rd_kafka_topic_t*>(only), &raw, 10000);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return absl::UnavailableError(absl::StrCat("metadata from ", bootstrap, ": ", rd_kafka_err2str(err)));
  }
  std::unique_ptr<const rd_kafka_metadata_t, KafkaDeleter> metadata(raw);
  return use(*metadata);
}

}  // namespace

std::optional<TestKafkaCluster> TestKafkaCluster::FromEnvironment() {
  const char* dir = std::getenv("WEIR_TEST_KAFKA_DIR");
  if (dir == nullptr || *dir == '\0') {
    ADD_FAILURE() << "No test Kafka cluster: set WEIR_TEST_KAFKA_DIR to a directory started with "
                     "`scripts/kafka.sh start-cluster DIR` (ctest does this through the kafka_cluster fixture).";
    return std::nullopt;
  }
  const std::string size = std::string(absl::StripAsciiWhitespace(testing::ReadFile(absl::StrCat(dir, "/cluster"))));
  const std::string bootstrap =
      std::string(absl::StripAsciiWhitespace(testing::ReadFile(absl::StrCat(dir, "/bootstrap"))));
  int nodes = 0;
  if (!absl::SimpleAtoi(size, &nodes) || nodes < 1 || bootstrap.empty()) {
    ADD_FAILURE() << "No test Kafka cluster in " << dir << " (no cluster or bootstrap file): start one with "
                  << "`scripts/kafka.sh start-cluster " << dir << "`.";
    return std::nullopt;
  }
  return TestKafkaCluster(dir, bootstrap, nodes);
}

absl::Status TestKafkaCluster::RunScript(const std::string& verb, int node) const {
  const testing::CommandResult result =
      testing::RunCommand({WEIR_KAFKA_SCRIPT, verb, dir_, absl::StrCat(node)}, absl::Seconds(150));
  if (result.exit_code != 0) {
    return absl::InternalError(absl::StrCat("scripts/kafka.sh ", verb, " ", dir_, " ", node, " exited with ",
                                            result.exit_code, ":\n", result.err));
  }
  return absl::OkStatus();
}

absl::Status TestKafkaCluster::KillNode(int node) const { return RunScript("kill-node", node); }

absl::Status TestKafkaCluster::StartNode(int node) const { return RunScript("start-node", node); }

absl::Status TestKafkaCluster::WaitForTopicOnEveryNode(const std::string& topic, int partitions,
                                                       absl::Duration timeout) const {
  ASSIGN_OR_RETURN(const std::vector<kp::BrokerAddress> brokers, kp::ParseBootstrapServers(bootstrap_));
  const absl::Time deadline = absl::Now() + timeout;
  for (const kp::BrokerAddress& broker : brokers) {
    // A new client knows its bootstrap broker only, so that one answers.
    std::string problem;
    while (true) {
      const absl::Status asked = WithMetadata(broker.ToString(), nullptr, [&](const rd_kafka_metadata_t& metadata) {
        problem = "no such topic";
        for (int t = 0; t < metadata.topic_cnt; ++t) {
          const rd_kafka_metadata_topic_t& info = metadata.topics[t];
          if (topic != info.topic) continue;
          int led = 0;
          for (int p = 0; p < info.partition_cnt; ++p) led += info.partitions[p].leader >= 0 ? 1 : 0;
          problem = led == partitions && info.partition_cnt == partitions
                        ? ""
                        : absl::StrCat(info.partition_cnt, " partitions, ", led, " with a leader");
        }
        return absl::OkStatus();
      });
      if (!asked.ok()) problem = std::string(asked.message());
      if (problem.empty()) break;
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("topic ", topic, " not ready on ", broker.ToString(), ": ", problem));
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::map<int32_t, int32_t>> TestKafkaCluster::Leaders(const std::string& topic) const {
  std::map<int32_t, int32_t> leaders;
  RETURN_IF_ERROR(WithMetadata(bootstrap_, nullptr, [&](const rd_kafka_metadata_t& metadata) {
    for (int t = 0; t < metadata.topic_cnt; ++t) {
      const rd_kafka_metadata_topic_t& info = metadata.topics[t];
      if (topic != info.topic) continue;
      if (info.err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        return absl::UnavailableError(absl::StrCat("metadata of ", topic, ": ", rd_kafka_err2str(info.err)));
      }
      for (int p = 0; p < info.partition_cnt; ++p) leaders[info.partitions[p].id] = info.partitions[p].leader;
    }
    return absl::OkStatus();
  }));
  if (leaders.empty()) return absl::NotFoundError(absl::StrCat("no partitions of ", topic, " in the metadata"));
  return leaders;
}

absl::StatusOr<int32_t> TestKafkaCluster::TransactionCoordinator(const std::string& transactional_id) const {
  ASSIGN_OR_RETURN(const std::vector<kp::BrokerAddress> brokers, kp::ParseBootstrapServers(bootstrap_));
  absl::Status last = absl::UnavailableError("no broker");
  // Any live broker answers for the whole cluster.
  for (const kp::BrokerAddress& broker : brokers) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    absl::StatusOr<std::unique_ptr<kp::BrokerConnection>> connection = kp::BrokerConnection::Connect(broker, deadline);
    if (!connection.ok()) {
      last = connection.status();
      continue;
    }
    constexpr int16_t kVersion = kp::kFindCoordinatorVersions.max;
    const kp::RequestHeader header{kVersion, (*connection)->NextCorrelationId(), "weir-test-cluster"};
    ASSIGN_OR_RETURN(const std::string request,
                     kp::EncodeFindCoordinatorRequest(header, {transactional_id, kp::kCoordinatorTypeTransaction}));
    absl::StatusOr<std::string> frame = (*connection)->RoundTrip(request, deadline);
    if (!frame.ok()) {
      last = frame.status();
      continue;
    }
    ASSIGN_OR_RETURN(const kp::FindCoordinatorResponse found, kp::DecodeFindCoordinatorResponse(kVersion, *frame));
    if (found.error_code != kp::kNone) {
      last = absl::UnavailableError(absl::StrCat("FindCoordinator(", transactional_id, ") at ", broker.ToString(),
                                                 ": ", kp::DescribeKafkaError(found.error_code)));
      continue;
    }
    return found.node_id;
  }
  return last;
}

absl::StatusOr<std::vector<std::string>> TestKafkaCluster::UnderReplicated() const {
  std::vector<std::string> lagging;
  RETURN_IF_ERROR(WithMetadata(bootstrap_, nullptr, [&](const rd_kafka_metadata_t& metadata) {
    for (int t = 0; t < metadata.topic_cnt; ++t) {
      const rd_kafka_metadata_topic_t& info = metadata.topics[t];
      for (int p = 0; p < info.partition_cnt; ++p) {
        const rd_kafka_metadata_partition_t& partition = info.partitions[p];
        if (partition.leader < 0 || partition.isr_cnt < partition.replica_cnt) {
          std::vector<int32_t> isr(partition.isrs, partition.isrs + partition.isr_cnt);
          lagging.push_back(absl::StrCat(info.topic, "/", partition.id, " leader ", partition.leader, " isr ",
                                         absl::StrJoin(isr, ","), " of ", partition.replica_cnt, " replicas"));
        }
      }
    }
    return absl::OkStatus();
  }));
  return lagging;
}

}  // namespace weir::test
