// Before a job is submitted, the client checks that the Kafka topics its
// sources read and its sinks write exist, so that a typo fails the
// submission with the topic's name instead of failing the job later.
//
// It asks the job's own brokers, with the job's own Kafka settings, from
// the machine the client runs on; a broker it cannot reach from there is not
// an error (the TaskManagers may reach it), only a warning.
#pragma once

#include <ostream>

#include "absl/status/status.h"
#include "weir/job_graph.h"

namespace weir::client {

// kNotFound naming the topic, the vertex and the brokers when a topic does
// not exist; OK otherwise. Warnings (brokers unreachable, no permission to
// describe a topic) go to `warnings` as "weir: warning: ..." lines.
absl::Status CheckKafkaTopics(const JobGraph& graph, std::ostream& warnings);

}  // namespace weir::client
