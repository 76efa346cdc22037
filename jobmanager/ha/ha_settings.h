// The high-availability.* settings of a JobManager, checked and turned into
// the options of the etcd client and the election.
//
// Thread-safety: free functions, safe from any thread.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "common/config/configuration.h"
#include "common/etcd/etcd_client.h"
#include "jobmanager/ha/etcd_leader_election.h"

namespace weir::jobmanager::ha {

struct EtcdHaSettings {
  etcd::EtcdClientOptions client;
  EtcdLeaderElectionOptions election;
};

// high-availability.cluster-id and high-availability.etcd.* of `config`, for
// a JobManager announcing `address`; reads the password file. Errors are
// kInvalidArgument naming the key and what is wrong.
absl::StatusOr<EtcdHaSettings> EtcdHaSettingsFromConfig(const config::Configuration& config, std::string address);

}  // namespace weir::jobmanager::ha
