#include "common/rpc/auth.h"

#include <sys/stat.h>

#include <atomic>
#include <cstdint>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
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

void WarnIfOthersCanRead(const std::string& path, absl::string_view key) {
  struct stat st {};
  if (stat(path.c_str(), &st) == 0 && (st.st_mode & 0077) != 0) {
    logging::Get("security")->warn("{} '{}' can be read by other users (mode {:o}); chmod 600 it", key, path,
                                   st.st_mode & 0777);
  }
}

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
  WarnIfOthersCanRead(path, "security.auth.token-file");
  Token() = token;
  return absl::OkStatus();
}

void SetAuthToken(std::string token) { Token() = std::move(token); }

bool AuthEnabled() { return !Token().empty(); }

const std::string& AuthToken() { return Token(); }

Credential CheckAuthorization(const std::string* authorization) {
  if (Token().empty()) return Credential::kAccepted;
  if (authorization == nullptr) return Credential::kMissing;
  return ConstantTimeEquals(*authorization, "Bearer " + Token()) ? Credential::kAccepted : Credential::kWrong;
}

std::string RefusalMessage(Credential credential) {
  switch (credential) {
    case Credential::kAccepted:
      return "";
    case Credential::kWrong:
      return "the token given does not match this cluster's: check that the client's --token-file "
             "(or WEIR_AUTH_TOKEN_FILE) and the daemons' security.auth.token-file hold the same secret";
    case Credential::kMissing:
      break;
  }
  return "this Weir cluster requires its shared secret and none was given: pass the cluster's "
         "token file (--token-file or WEIR_AUTH_TOKEN_FILE), or set security.auth.token-file "
         "for a daemon; over HTTP, send it as \"Authorization: Bearer <secret>\"";
}

void LogRefusal(const std::string& peer, Credential credential) {
  // Said in this daemon's log too, so that an operator sees who is knocking
  // with the wrong secret.
  static auto* limiter = new logging::RateLimiter(std::chrono::seconds(10));
  int64_t suppressed = 0;
  if (!limiter->ShouldLog(&suppressed)) return;
  logging::Get("security")->warn("refused a call from {}: {} ({} refusals since the last such line; they are logged "
                                 "at most every 10 s)",
                                 peer,
                                 credential == Credential::kWrong
                                     ? "its token does not match security.auth.token-file"
                                     : "it carries no token, and this cluster requires one",
                                 suppressed);
}

grpc::Status AuthorizeCall(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                           const std::function<std::string()>& peer) {
  if (Token().empty()) return grpc::Status::OK;
  auto it = metadata.find("authorization");
  std::string value;
  if (it != metadata.end()) value.assign(it->second.data(), it->second.size());
  const Credential credential = CheckAuthorization(it != metadata.end() ? &value : nullptr);
  if (credential == Credential::kAccepted) return grpc::Status::OK;
  LogRefusal(peer(), credential);
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, RefusalMessage(credential));
}

grpc::Status Authorize(const grpc::ServerContextBase* context) {
  return AuthorizeCall(context->client_metadata(), [context] { return context->peer(); });
}

absl::Status CheckExposure(const std::string& bind_host, const std::string& bind_key) {
  if (IsLoopbackHost(bind_host) || AuthEnabled()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      bind_key, " '", bind_host,
      "' listens beyond loopback, and job submission runs code: set security.auth.token-file to a file "
      "holding a shared secret (the same file for the JobManager, the TaskManagers and clients)"));
}

}  // namespace weir::rpc
