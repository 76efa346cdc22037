#include "common/rpc/tls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/config/configuration.h"
#include "common/config/options.h"
#include "common/io/atomic_file.h"
#include "common/rpc/auth.h"
#include "common/status_macros.h"
#include "grpc/grpc.h"
#include "grpc/grpc_security.h"
#include "grpcpp/security/auth_metadata_processor.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_certificate_verifier.h"
#include "grpcpp/security/tls_credentials_options.h"

namespace weir::rpc {
namespace {

// OpenSSL objects, freed on scope exit.
struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct StoreFree {
  void operator()(X509_STORE* s) const { X509_STORE_free(s); }
};
struct StoreCtxFree {
  void operator()(X509_STORE_CTX* c) const { X509_STORE_CTX_free(c); }
};
struct StackFree {
  void operator()(STACK_OF(X509) * s) const { sk_X509_pop_free(s, X509_free); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Cert = std::unique_ptr<X509, X509Free>;

absl::StatusOr<std::string> ReadPemFile(const std::string& key, const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(key, " is not set"));
  absl::StatusOr<std::string> contents = io::ReadWholeFile(path);
  if (!contents.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read ", key, ": ", contents.status().message()));
  }
  return contents;
}

Bio MemoryBio(const std::string& pem) { return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()))); }

// Every certificate in `pem`, in order.
std::vector<Cert> ReadCertificates(const std::string& pem) {
  std::vector<Cert> certs;
  Bio bio = MemoryBio(pem);
  while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) certs.emplace_back(cert);
  ERR_clear_error();  // the end of the file reads as an error
  return certs;
}

std::string OpenSslError() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "unknown error";
  char buffer[256];
  ERR_error_string_n(code, buffer, sizeof(buffer));
  return buffer;
}

// The process's TLS setting and the credentials built from it once.
struct TlsState {
  absl::Mutex mu;
  InternalTls tls ABSL_GUARDED_BY(mu);
  std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider ABSL_GUARDED_BY(mu);
};

TlsState& State() {
  static TlsState* state = new TlsState();
  return *state;
}

// Checks the cluster's token when a call's metadata arrives, before gRPC
// reads its message, on TLS connections (PlaintextServerCredentials does
// the same without TLS). Handlers still check too.
class TokenMetadataProcessor final : public grpc::AuthMetadataProcessor {
 public:
  bool IsBlocking() const override { return false; }

  grpc::Status Process(const InputMetadata& metadata, grpc::AuthContext* context, OutputMetadata*,
                       OutputMetadata*) override {
    return AuthorizeCall(metadata, [context] {
      if (context != nullptr) {
        for (const grpc::string_ref& identity : context->GetPeerIdentity()) {
          return absl::StrCat("the holder of certificate '", std::string(identity.data(), identity.size()), "'");
        }
      }
      return std::string("a peer");
    });
  }
};

// Plaintext, with the cluster's token checked when a call's metadata
// arrives, as under TLS. gRPC's C++ InsecureServerCredentials() takes no
// metadata processor; its core credentials do, so this wraps those. A call
// without the token is refused before gRPC reads its message: its stream
// cannot hold a message's worth of memory on this server.
class PlaintextServerCredentials final : public grpc::ServerCredentials {
 public:
  PlaintextServerCredentials() : credentials_(grpc_insecure_server_credentials_create()) {
    grpc_server_credentials_set_auth_metadata_processor(credentials_, {&Process, nullptr, nullptr});
  }
  ~PlaintextServerCredentials() override { grpc_server_credentials_release(credentials_); }

  void SetAuthMetadataProcessor(const std::shared_ptr<grpc::AuthMetadataProcessor>&) override {
    // The token check is built in; nothing else is set on Weir's servers.
  }

 private:
  int AddPortToServer(const std::string& address, grpc_server* server) override {
    return grpc_server_add_http2_port(server, address.c_str(), credentials_);
  }

  // Runs on a gRPC thread for every call; never blocks.
  static void Process(void*, grpc_auth_context*, const grpc_metadata* metadata, size_t count,
                      grpc_process_auth_metadata_done_cb done, void* user_data) {
    std::multimap<grpc::string_ref, grpc::string_ref> map;
    for (size_t i = 0; i < count; ++i) {
      const grpc_slice& key = metadata[i].key;
      const grpc_slice& value = metadata[i].value;
      map.emplace(grpc::string_ref(reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(key)), GRPC_SLICE_LENGTH(key)),
                  grpc::string_ref(reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(value)),
                                   GRPC_SLICE_LENGTH(value)));
    }
    // On a plaintext connection gRPC gives a metadata processor no peer
    // address (only the security type and level): the refusal is logged
    // without one.
    const grpc::Status status =
        AuthorizeCall(map, [] { return std::string("a plaintext peer (gRPC names no address before a handler)"); });
    done(user_data, nullptr, 0, nullptr, 0, static_cast<grpc_status_code>(status.error_code()),
         status.ok() ? nullptr : status.error_message().c_str());
  }

  grpc_server_credentials* const credentials_;
};

}  // namespace

CertificateKeyPair::~CertificateKeyPair() {
  for (X509* cert : chain) X509_free(cert);
  EVP_PKEY_free(key);
}

absl::StatusOr<std::unique_ptr<CertificateKeyPair>> LoadCertificateKeyPair(const TlsFiles& files) {
  ASSIGN_OR_RETURN(std::string cert_pem, ReadPemFile(files.cert_key, files.cert_file));
  ASSIGN_OR_RETURN(std::string key_pem, ReadPemFile(files.key_key, files.key_file));
  auto pair = std::make_unique<CertificateKeyPair>();
  for (Cert& cert : ReadCertificates(cert_pem)) pair->chain.push_back(cert.release());
  if (pair->chain.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(files.cert_key, " '", files.cert_file,
                                                   "' holds no PEM certificate (-----BEGIN CERTIFICATE-----)"));
  }
  Bio key_bio = MemoryBio(key_pem);
  pair->key = PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr);
  if (pair->key == nullptr) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(files.key_key, " '", files.key_file,
                                                   "' holds no PEM private key, or an encrypted one: give "
                                                   "an unencrypted PEM key (-----BEGIN PRIVATE KEY-----)"));
  }
  if (X509_check_private_key(pair->chain.front(), pair->key) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat("the private key in ", files.key_key, " '", files.key_file,
                                                   "' does not belong to the certificate in ", files.cert_key,
                                                   " '", files.cert_file, "'"));
  }
  return pair;
}

absl::Status CheckTlsFiles(const TlsFiles& files) {
  ASSIGN_OR_RETURN(std::unique_ptr<CertificateKeyPair> pair, LoadCertificateKeyPair(files));
  WarnIfOthersCanRead(files.key_file, files.key_key);
  X509* const leaf = pair->chain.front();
  if (X509_cmp_current_time(X509_get0_notAfter(leaf)) <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the certificate in ", files.cert_key, " '", files.cert_file, "' has expired"));
  }
  if (X509_cmp_current_time(X509_get0_notBefore(leaf)) >= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the certificate in ", files.cert_key, " '", files.cert_file, "' is not valid yet"));
  }
  for (const auto& [wanted, purpose, what] :
       {std::tuple{files.server, X509_PURPOSE_SSL_SERVER, "TLS server (extendedKeyUsage serverAuth)"},
        std::tuple{files.client, X509_PURPOSE_SSL_CLIENT, "TLS client (extendedKeyUsage clientAuth)"}}) {
    if (wanted && X509_check_purpose(leaf, purpose, 0) != 1) {
      ERR_clear_error();
      return absl::InvalidArgumentError(absl::StrCat(
          "the certificate in ", files.cert_key, " '", files.cert_file, "' may not serve as a ", what,
          files.server && files.client ? ": a daemon's certificate needs both serverAuth and clientAuth" : ""));
    }
  }
  if (files.ca_file.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::string ca_pem, ReadPemFile(files.ca_key, files.ca_file));
  std::vector<Cert> cas = ReadCertificates(ca_pem);
  if (cas.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(files.ca_key, " '", files.ca_file,
                                                   "' holds no PEM certificate (-----BEGIN CERTIFICATE-----)"));
  }
  std::unique_ptr<X509_STORE, StoreFree> store(X509_STORE_new());
  for (const Cert& ca : cas) X509_STORE_add_cert(store.get(), ca.get());
  std::unique_ptr<STACK_OF(X509), StackFree> intermediates(sk_X509_new_null());
  for (size_t i = 1; i < pair->chain.size(); ++i) {
    X509_up_ref(pair->chain[i]);
    sk_X509_push(intermediates.get(), pair->chain[i]);
  }
  std::unique_ptr<X509_STORE_CTX, StoreCtxFree> ctx(X509_STORE_CTX_new());
  if (X509_STORE_CTX_init(ctx.get(), store.get(), leaf, intermediates.get()) != 1) {
    return absl::InternalError(absl::StrCat("cannot check certificates: ", OpenSslError()));
  }
  if (X509_verify_cert(ctx.get()) != 1) {
    const int error = X509_STORE_CTX_get_error(ctx.get());
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(
        "the certificate in ", files.cert_key, " '", files.cert_file, "' does not chain to a CA in ",
        files.ca_key, " '", files.ca_file, "': ", X509_verify_cert_error_string(error),
        " (every process of the cluster needs a certificate signed by the cluster's CA)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<InternalTls> InternalTlsFromConfig(const config::Configuration& config, TlsRole role) {
  namespace k = config::keys;
  InternalTls tls;
  tls.enabled = config.GetBool(k::kSslInternalEnabled);
  tls.files = TlsFiles{.cert_file = config.GetString(k::kSslInternalCertFile),
                       .key_file = config.GetString(k::kSslInternalKeyFile),
                       .ca_file = config.GetString(k::kSslInternalCaFile),
                       .cert_key = std::string(k::kSslInternalCertFile),
                       .key_key = std::string(k::kSslInternalKeyFile),
                       .ca_key = std::string(k::kSslInternalCaFile),
                       .server = role == TlsRole::kDaemon,
                       .client = true};
  tls.reload_interval = config.GetDuration(k::kSslInternalReloadInterval);
  if (!tls.enabled) return tls;
  for (const auto& [key, value] : {std::pair{k::kSslInternalCertFile, tls.files.cert_file},
                                   std::pair{k::kSslInternalKeyFile, tls.files.key_file},
                                   std::pair{k::kSslInternalCaFile, tls.files.ca_file}}) {
    if (value.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          k::kSslInternalEnabled, " is true but ", key,
          " is not set: TLS between the cluster's processes needs this process's certificate, its key "
          "and the cluster's CA, as PEM files"));
    }
  }
  RETURN_IF_ERROR(CheckTlsFiles(tls.files));
  return tls;
}

absl::StatusOr<std::optional<TlsFiles>> RestTlsFiles(const config::Configuration& config) {
  namespace k = config::keys;
  if (!config.GetBool(k::kSslRestEnabled)) return std::nullopt;
  TlsFiles files{.cert_file = config.GetString(k::kSslRestCertFile),
                 .key_file = config.GetString(k::kSslRestKeyFile),
                 .cert_key = std::string(k::kSslRestCertFile),
                 .key_key = std::string(k::kSslRestKeyFile),
                 .server = true,
                 .client = false};
  if (files.cert_file.empty() || files.key_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(k::kSslRestEnabled, " is true but ",
                                                   files.cert_file.empty() ? k::kSslRestCertFile : k::kSslRestKeyFile,
                                                   " is not set: HTTPS needs a certificate and its key, as PEM files"));
  }
  return files;
}

absl::StatusOr<std::optional<TlsFiles>> RestTlsFromConfig(const config::Configuration& config) {
  ASSIGN_OR_RETURN(std::optional<TlsFiles> files, RestTlsFiles(config));
  if (files.has_value()) RETURN_IF_ERROR(CheckTlsFiles(*files));
  return files;
}

void SetInternalTls(const InternalTls& tls) {
  TlsState& state = State();
  absl::MutexLock lock(&state.mu);
  state.tls = tls;
  state.provider.reset();
  if (!tls.enabled) return;
  // One watcher for the process: it re-reads the files when they change, and
  // every server and channel made from it uses the new certificates for new
  // handshakes.
  const auto seconds = static_cast<unsigned>(std::max<int64_t>(1, absl::ToInt64Seconds(tls.reload_interval)));
  state.provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      tls.files.key_file, tls.files.cert_file, tls.files.ca_file, seconds);
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentialsForCluster() {
  TlsState& state = State();
  absl::MutexLock lock(&state.mu);
  if (!state.tls.enabled) {
    if (AuthEnabled()) return std::make_shared<PlaintextServerCredentials>();
    return grpc::InsecureServerCredentials();
  }
  grpc::experimental::TlsServerCredentialsOptions options(state.provider);
  options.watch_root_certs();
  options.watch_identity_key_cert_pairs();
  // Mutual: a peer without a certificate from the cluster's CA is refused
  // during the handshake.
  options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::experimental::TlsServerCredentials(options);
  if (AuthEnabled()) credentials->SetAuthMetadataProcessor(std::make_shared<TokenMetadataProcessor>());
  return credentials;
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsForCluster() {
  TlsState& state = State();
  absl::MutexLock lock(&state.mu);
  if (!state.tls.enabled) return grpc::InsecureChannelCredentials();
  grpc::experimental::TlsChannelCredentialsOptions options;
  options.set_certificate_provider(state.provider);
  options.watch_root_certs();
  options.watch_identity_key_cert_pairs();
  // The server's chain is verified against the cluster's CA; its host name
  // is not (see the header).
  options.set_verify_server_certs(true);
  options.set_certificate_verifier(std::make_shared<grpc::experimental::NoOpCertificateVerifier>());
  options.set_check_call_host(false);
  return grpc::experimental::TlsCredentials(options);
}

}  // namespace weir::rpc
