// Topic administration with librdkafka's Admin API, for `weir kafka` and the
// tests.
//
// Thread-safety: free functions, safe from any thread.
#pragma once

#include <map>
#include <string>

#include "absl/status/status.h"

namespace weir::connectors::kafka_admin {

// Creates `name` with `partitions` partitions and `replication_factor`
// replicas on the cluster at `bootstrap` (with `kafka_properties`, e.g.
// security settings), then waits until every partition has a leader
// (at most 60 s). kAlreadyExists when the topic exists; kUnavailable when
// the brokers cannot be reached or refuse.
absl::Status CreateTopic(const std::string& bootstrap, const std::string& name, int partitions,
                         int replication_factor = 1,
                         const std::map<std::string, std::string>& kafka_properties = {});

}  // namespace weir::connectors::kafka_admin
