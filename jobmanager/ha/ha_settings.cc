#include "jobmanager/ha/ha_settings.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/config/options.h"
#include "common/etcd/etcd_settings.h"
#include "common/status_macros.h"

namespace weir::jobmanager::ha {

absl::StatusOr<EtcdHaSettings> EtcdHaSettingsFromConfig(const config::Configuration& config, std::string address) {
  namespace keys = config::keys;
  EtcdHaSettings settings;
  ASSIGN_OR_RETURN(settings.client, etcd::EtcdClientOptionsFromConfig(config));
  EtcdLeaderElectionOptions& election = settings.election;
  election.cluster_id = config.GetString(keys::kHaClusterId);
  election.address = std::move(address);
  election.lease_ttl = config.GetDuration(keys::kHaEtcdLeaseTtl);
  RETURN_IF_ERROR(election.Validate());
  return settings;
}

}  // namespace weir::jobmanager::ha
