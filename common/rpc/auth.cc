#include "common/rpc/auth.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/logging/logging.h"
#include "common/rpc/rpc.h"

namespace weir::rpc {
namespace {

std::string& Token() {
  static std::string* token = new std::string();
  return *token;
}

// Compares without an early exit, so timing does not leak the secret.
bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

absl::Status LoadAuthToken(const std::string& path) {
  if (path.empty()) {
    Token().clear();
    return absl::OkStatus();
  }
  std::ifstream in(path);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read security.auth.token-file '", path, "'"));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  std::string token(absl::StripAsciiWhitespace(ss.str()));
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("security.auth.token-file '", path, "' is empty; put a long random secret in it"));
  }
  // The token lets its holder run code on the cluster: nobody but the
  // daemon's user should be able to read it.
  struct stat st {};
  if (stat(path.c_str(), &st) == 0 && (st.st_mode & 0077) != 0) {
    logging::Get("security")->warn("security.auth.token-file '{}' can be read by other users (mode {:o}); "
                                   "chmod 600 it",
                                   path, st.st_mode & 0777);
  }
  Token() = token;
  return absl::OkStatus();
}

void SetAuthToken(std::string token) { Token() = std::move(token); }

bool AuthEnabled() { return !Token().empty(); }

const std::string& AuthToken() { return Token(); }

grpc::Status Authorize(const grpc::ServerContext* context) {
  if (Token().empty()) return grpc::Status::OK;
  const auto& metadata = context->client_metadata();
  auto it = metadata.find("authorization");
  if (it != metadata.end()) {
    std::string value(it->second.data(), it->second.size());
    if (ConstantTimeEquals(value, "Bearer " + Token())) return grpc::Status::OK;
  }
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      "this Weir cluster requires its shared secret: give the client the cluster's token file "
                      "(--token-file or WEIR_AUTH_TOKEN_FILE) or the daemon security.auth.token-file");
}

absl::Status CheckExposure(const std::string& bind_host, const std::string& bind_key) {
  if (IsLoopbackHost(bind_host) || AuthEnabled()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      bind_key, " '", bind_host,
      "' listens beyond loopback, and job submission runs code: set security.auth.token-file to a file "
      "holding a shared secret (the same file for the JobManager, the TaskManagers and clients)"));
}

}  // namespace weir::rpc
