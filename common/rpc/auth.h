// Shared-secret authentication of every Weir RPC.
//
// When security.auth.token-file is set, every process of the cluster reads
// the same secret from it: channels made by rpc::CreateChannel send it as
// "authorization: Bearer <secret>" on every call. Every server made by
// rpc::StartServer checks it when a call's metadata arrives and refuses a
// call without it (UNAUTHENTICATED) before gRPC reads its message, so such
// a call cannot make the server hold a message's worth of memory; every
// handler also starts with Authorize(). A daemon that listens beyond
// loopback refuses to start without a token, because job submission runs
// code.
//
// Without TLS the secret crosses the network in the clear: it keeps out
// anyone who cannot read the cluster's traffic, not an eavesdropper.
//
// Thread-safety: SetAuthToken before any RPC; the rest from any thread.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"

namespace weir::rpc {

// Reads the secret from `path` (surrounding whitespace ignored); it must
// not be empty. An empty `path` means: no authentication.
absl::Status LoadAuthToken(const std::string& path);

// Sets the secret directly ("" = none).
void SetAuthToken(std::string token);

bool AuthEnabled();

// What a caller's "authorization" value says, for any transport.
enum class Credential { kAccepted, kMissing, kWrong };

// kAccepted when authentication is off or `authorization` (null: not sent)
// is "Bearer <secret>"; compared in constant time.
Credential CheckAuthorization(const std::string* authorization);

// Why a call was refused, and what to do about it (for the caller).
std::string RefusalMessage(Credential credential);

// Says in this daemon's log that `peer` was refused (at most every 10 s).
void LogRefusal(const std::string& peer, Credential credential);

// OK when authentication is off or the call's metadata carries the secret;
// otherwise UNAUTHENTICATED, saying why, and the refusal is logged naming
// `peer()`.
grpc::Status AuthorizeCall(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                           const std::function<std::string()>& peer);

// AuthorizeCall for a handler's call.
grpc::Status Authorize(const grpc::ServerContextBase* context);

// Warns in the log when group or others may read `path` (a secret named by
// configuration key `key`).
void WarnIfOthersCanRead(const std::string& path, absl::string_view key);

// The secret to attach to outgoing calls ("" = none).
const std::string& AuthToken();

// Fails when `bind_host` is beyond loopback and no token is configured.
absl::Status CheckExposure(const std::string& bind_host, const std::string& bind_key);

}  // namespace weir::rpc

// The first statement of every RPC handler: returns UNAUTHENTICATED from the
// handler when the call lacks the cluster's secret.
#define WEIR_RPC_AUTHORIZE(context)                                     \
  do {                                                                  \
    ::grpc::Status weir_auth_status_ = ::weir::rpc::Authorize(context); \
    if (!weir_auth_status_.ok()) return weir_auth_status_;             \
  } while (false)
