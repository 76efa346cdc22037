// TestKafkaCluster: the multi-node test cluster that `scripts/kafka.sh
// start-cluster DIR` runs (see weir_add_kafka_cluster_test in
// cmake/WeirTesting.cmake): who leads which partition, which node
// coordinates a transactional id, whether every replica is in sync, and
// SIGKILL / restart of one node through the same script.
//
// Node i of the script (DIR/node-<i>) has node.id i, so the node ids the
// brokers answer with are the script's node numbers.
//
// Thread-safety: every method may be called from any thread; each opens its
// own client and closes it before it returns.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace weir::test {

class TestKafkaCluster {
 public:
  // The cluster in $WEIR_TEST_KAFKA_DIR; nullopt (with a test failure
  // saying why) when that is not a directory start-cluster started.
  static std::optional<TestKafkaCluster> FromEnvironment();

  const std::string& bootstrap() const { return bootstrap_; }
  int nodes() const { return nodes_; }

  // `scripts/kafka.sh kill-node` (SIGKILL; returns once the process is
  // gone) and `start-node` (returns once the node serves again and the
  // cluster's metadata lists every node).
  absl::Status KillNode(int node) const;
  absl::Status StartNode(int node) const;

  // Waits (at most `timeout`) until every node itself answers metadata
  // that shows `topic` with `partitions` partitions, each with a leader.
  // After CreateTopics a node learns of a topic when it replays the
  // cluster's metadata log, so a client asking another node than the one
  // that answered CreateTopic may be told it does not exist for a moment.
  absl::Status WaitForTopicOnEveryNode(const std::string& topic, int partitions,
                                       absl::Duration timeout = absl::Seconds(30)) const;

  // The leader of every partition of `topic`.
  absl::StatusOr<std::map<int32_t, int32_t>> Leaders(const std::string& topic) const;

  // The node coordinating `transactional_id` (FindCoordinator, key type 1,
  // sent with Weir's own Kafka protocol codec).
  absl::StatusOr<int32_t> TransactionCoordinator(const std::string& transactional_id) const;

  // The partitions (every topic, the internal ones included) whose in-sync
  // replicas are fewer than their replicas, or that have no leader, as
  // "topic/partition isr a,b of c replicas"; empty when all are in sync.
  absl::StatusOr<std::vector<std::string>> UnderReplicated() const;

 private:
  TestKafkaCluster(std::string dir, std::string bootstrap, int nodes)
      : dir_(std::move(dir)), bootstrap_(std::move(bootstrap)), nodes_(nodes) {}

  absl::Status RunScript(const std::string& verb, int node) const;

  std::string dir_;
  std::string bootstrap_;
  int nodes_ = 0;
};

}  // namespace weir::test
