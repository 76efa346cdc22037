// Transport security for every gRPC server and channel of a Weir cluster:
// TLS with mutual authentication (security.ssl.internal.*).
//
// With TLS on, every daemon and every `weir` client presents a certificate
// signed by the cluster's CA (ca-file) and accepts only peers whose
// certificate chains to that CA: a TaskManager, a client or a data-exchange
// peer with a certificate from another CA, or with none, fails the handshake
// before any RPC is read. The token of security.auth.token-file stays a
// second factor; it is checked when a call's metadata arrives, before its
// message is received, with TLS and without.
//
// Certificates are re-read when their files change (every reload-interval),
// so they can be rotated without a restart; the files are checked at start
// (readable, well formed, key matching the certificate, signed by the CA,
// valid today) and a bad one is a configuration error.
//
// The peer's host name is not checked against its certificate: the CA is the
// trust boundary (every certificate it signs is a member of the cluster), as
// for the internal connections of Apache Flink. See docs/security.md.
//
// Thread-safety: SetInternalTls before any RPC; the rest from any thread.
#pragma once

#include <openssl/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace weir::config {
class Configuration;
}

namespace weir::rpc {

// PEM files, each named together with the configuration key that set it.
struct TlsFiles {
  std::string cert_file;  // this process's certificate (chain)
  std::string key_file;   // its private key, unencrypted
  std::string ca_file;    // trusted CA certificates ("" = none: no chain check)
  // The keys that set them, for errors ("security.ssl.internal.cert-file").
  std::string cert_key, key_key, ca_key;
  // What the certificate must be good for (its extended key usage, when it
  // lists one): a daemon is both a TLS server and a TLS client.
  bool server = true;
  bool client = true;
};

// A certificate chain (leaf first) and its private key, loaded from PEM
// files; owns the OpenSSL objects.
struct CertificateKeyPair {
  CertificateKeyPair() = default;
  CertificateKeyPair(const CertificateKeyPair&) = delete;
  CertificateKeyPair& operator=(const CertificateKeyPair&) = delete;
  ~CertificateKeyPair();
  std::vector<X509*> chain;
  EVP_PKEY* key = nullptr;
};

// Reads files.cert_file and files.key_file: both readable PEM, the key
// unencrypted and belonging to the first certificate. kInvalidArgument
// naming the key, the file and what is wrong.
absl::StatusOr<std::unique_ptr<CertificateKeyPair>> LoadCertificateKeyPair(const TlsFiles& files);

// Checks the files as a handshake would use them: each readable; the
// certificate and the key parse and belong together; the certificate is
// valid now, may serve as `server` and `client` say, and, when ca_file is
// set, chains to a CA in it. The error names
// the key, the file and what is wrong (kInvalidArgument).
absl::Status CheckTlsFiles(const TlsFiles& files);

struct InternalTls {
  bool enabled = false;
  TlsFiles files;
  absl::Duration reload_interval = absl::Minutes(1);
};

// security.ssl.internal.* of `config`, checked (kInvalidArgument, naming the
// key, when enabled with a file missing, unreadable or wrong). A daemon's
// certificate must serve as TLS server and client; a client's (`weir`) as
// client.
enum class TlsRole { kDaemon, kClient };
absl::StatusOr<InternalTls> InternalTlsFromConfig(const config::Configuration& config, TlsRole role);

// security.ssl.rest.* of `config`: the HTTP endpoint's certificate and key
// when HTTPS is on (nullopt when off); kInvalidArgument when one is not set.
// RestTlsFiles reads no file; RestTlsFromConfig also checks them as
// CheckTlsFiles does.
absl::StatusOr<std::optional<TlsFiles>> RestTlsFiles(const config::Configuration& config);
absl::StatusOr<std::optional<TlsFiles>> RestTlsFromConfig(const config::Configuration& config);

// Switches TLS on (or off) for every server and channel made afterwards by
// StartServer and CreateChannel. Call once, before any RPC.
void SetInternalTls(const InternalTls& tls);

// The credentials StartServer and CreateChannel use (plaintext when TLS is
// off). Under TLS the server's credentials check the token at metadata time.
std::shared_ptr<grpc::ServerCredentials> ServerCredentialsForCluster();
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsForCluster();

}  // namespace weir::rpc
