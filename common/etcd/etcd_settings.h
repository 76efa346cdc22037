// The high-availability.etcd.* settings of a process that talks to etcd (a
// JobManager in the election, a TaskManager looking for the leader), checked
// and turned into the client's options.
//
// Thread-safety: free functions, safe from any thread.
#pragma once

#include "absl/status/statusor.h"
#include "common/config/configuration.h"
#include "common/etcd/etcd_client.h"

namespace weir::etcd {

// high-availability.etcd.* of `config`; reads the password file. Errors are
// kInvalidArgument naming the key and what is wrong.
absl::StatusOr<EtcdClientOptions> EtcdClientOptionsFromConfig(const config::Configuration& config);

}  // namespace weir::etcd
