#include "common/etcd/leader_retrieval.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/config/options.h"
#include "common/status_macros.h"
#include "common/etcd/etcd_settings.h"

namespace weir::etcd {

std::string LeaderKey(absl::string_view cluster_id) { return absl::StrCat("/weir/", cluster_id, "/leader"); }

absl::StatusOr<std::optional<std::string>> ReadLeaderAddress(EtcdClient& client,
                                                             const std::string& leader_key, absl::Time deadline) {
  etcdserverpb::RangeRequest range;
  range.set_key(leader_key);
  ASSIGN_OR_RETURN(etcdserverpb::RangeResponse response, client.Range(range, deadline));
  if (response.kvs().empty()) return std::optional<std::string>();
  return std::optional<std::string>(response.kvs(0).value());
}

absl::StatusOr<std::unique_ptr<EtcdLeaderRetrieval>> EtcdLeaderRetrieval::FromConfig(
    const config::Configuration& config) {
  ASSIGN_OR_RETURN(EtcdClientOptions options, EtcdClientOptionsFromConfig(config));
  std::string cluster_id = config.GetString(config::keys::kHaClusterId);
  if (cluster_id.empty() || cluster_id.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(config::keys::kHaClusterId, " '", cluster_id,
                                                   "' must be non-empty and hold no '/'"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<EtcdClient> client, EtcdClient::Create(std::move(options)));
  return std::unique_ptr<EtcdLeaderRetrieval>(new EtcdLeaderRetrieval(std::move(client), std::move(cluster_id)));
}

absl::StatusOr<std::string> EtcdLeaderRetrieval::LeaderAddress(absl::Duration timeout) const {
  absl::StatusOr<std::optional<std::string>> leader = ReadLeaderAddress(*client_, leader_key_, absl::Now() + timeout);
  if (!leader.ok()) return Annotate(leader.status(), absl::StrCat("reading ", leader_key_, " from etcd"));
  if (!leader->has_value()) {
    return absl::NotFoundError(absl::StrCat("no JobManager leads cluster ", cluster_id_, " (", leader_key_,
                                            " is not set in etcd)"));
  }
  return **std::move(leader);
}

}  // namespace weir::etcd
