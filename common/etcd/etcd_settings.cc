#include "common/etcd/etcd_settings.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/config/options.h"
#include "common/status_macros.h"

namespace weir::etcd {

absl::StatusOr<EtcdClientOptions> EtcdClientOptionsFromConfig(const config::Configuration& config) {
  namespace keys = config::keys;
  EtcdClientOptions client;
  const std::string endpoints = config.GetString(keys::kHaEtcdEndpoints);
  for (absl::string_view endpoint : absl::StrSplit(endpoints, ',', absl::SkipWhitespace())) {
    endpoint = absl::StripAsciiWhitespace(endpoint);
    const size_t colon = endpoint.rfind(':');
    if (colon == absl::string_view::npos || colon == 0 || colon + 1 == endpoint.size()) {
      return absl::InvalidArgumentError(absl::StrCat(keys::kHaEtcdEndpoints, ": '", endpoint,
                                                     "' is not host:port (the members are comma-separated)"));
    }
    client.endpoints.emplace_back(endpoint);
  }
  if (client.endpoints.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(keys::kHaEtcdEndpoints, " lists no etcd member"));
  }
  client.ca_file = config.GetString(keys::kHaEtcdCaFile);
  client.cert_file = config.GetString(keys::kHaEtcdCertFile);
  client.key_file = config.GetString(keys::kHaEtcdKeyFile);
  if (client.cert_file.empty() != client.key_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(keys::kHaEtcdCertFile, " and ", keys::kHaEtcdKeyFile,
                                                   " go together: set both or neither"));
  }
  if (!client.cert_file.empty() && client.ca_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(keys::kHaEtcdCertFile, " needs ", keys::kHaEtcdCaFile, " (TLS to etcd is on with a CA)"));
  }
  client.username = config.GetString(keys::kHaEtcdUsername);
  const std::string password_file = config.GetString(keys::kHaEtcdPasswordFile);
  if (client.username.empty() != password_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(keys::kHaEtcdUsername, " and ", keys::kHaEtcdPasswordFile,
                                                   " go together: set both or neither"));
  }
  if (!password_file.empty()) {
    std::ifstream in(password_file);
    if (!in) {
      return absl::InvalidArgumentError(
          absl::StrCat(keys::kHaEtcdPasswordFile, ": cannot read ", password_file));
    }
    std::stringstream text;
    text << in.rdbuf();
    std::string password = text.str();
    absl::string_view trimmed = password;
    absl::ConsumeSuffix(&trimmed, "\n");
    absl::ConsumeSuffix(&trimmed, "\r");
    client.password = std::string(trimmed);
    if (client.password.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(keys::kHaEtcdPasswordFile, ": ", password_file, " is empty"));
    }
  }
  RETURN_IF_ERROR(client.Validate());
  return client;
}

}  // namespace weir::etcd
