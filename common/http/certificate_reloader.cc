#include "common/http/certificate_reloader.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <sys/stat.h>

#include <cstdio>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace weir::http {

// A loaded certificate chain and its key (OpenSSL objects, freed with it).
struct CertificateReloader::Pair {
  std::vector<X509*> chain;  // leaf first
  EVP_PKEY* key = nullptr;
  ~Pair() {
    for (X509* cert : chain) X509_free(cert);
    EVP_PKEY_free(key);
  }
};

bool CertificateReloader::Stamp::operator==(const Stamp& o) const {
  return cert_mtime.tv_sec == o.cert_mtime.tv_sec && cert_mtime.tv_nsec == o.cert_mtime.tv_nsec &&
         key_mtime.tv_sec == o.key_mtime.tv_sec && key_mtime.tv_nsec == o.key_mtime.tv_nsec &&
         cert_size == o.cert_size && key_size == o.key_size;
}

CertificateReloader::CertificateReloader(std::string cert_file, std::string key_file)
    : cert_file_(std::move(cert_file)), key_file_(std::move(key_file)) {}

CertificateReloader::~CertificateReloader() = default;

CertificateReloader::Stamp CertificateReloader::StampOf(const std::string& cert_file, const std::string& key_file) {
  Stamp stamp;
  struct stat st {};
  if (stat(cert_file.c_str(), &st) == 0) {
    stamp.cert_mtime = st.st_mtim;
    stamp.cert_size = st.st_size;
  }
  if (stat(key_file.c_str(), &st) == 0) {
    stamp.key_mtime = st.st_mtim;
    stamp.key_size = st.st_size;
  }
  return stamp;
}

absl::Status CertificateReloader::Load() {
  absl::MutexLock lock(&mu_);
  return LoadLocked(StampOf(cert_file_, key_file_));
}

absl::Status CertificateReloader::LoadLocked(const Stamp& stamp) {
  auto pair = std::make_shared<Pair>();
  if (FILE* f = std::fopen(cert_file_.c_str(), "r")) {
    while (X509* cert = PEM_read_X509(f, nullptr, nullptr, nullptr)) pair->chain.push_back(cert);
    std::fclose(f);
  }
  if (FILE* f = std::fopen(key_file_.c_str(), "r")) {
    pair->key = PEM_read_PrivateKey(f, nullptr, nullptr, nullptr);
    std::fclose(f);
  }
  ERR_clear_error();
  if (pair->chain.empty() || pair->key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("cannot load the HTTPS certificate '", cert_file_,
                                                   "' and key '", key_file_, "' (unreadable or not PEM)"));
  }
  if (X509_check_private_key(pair->chain.front(), pair->key) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat("the HTTPS key '", key_file_, "' does not belong to the certificate '",
                                                   cert_file_, "'"));
  }
  current_ = std::move(pair);
  stamp_ = stamp;
  return absl::OkStatus();
}

void CertificateReloader::Install(SSL_CTX* ctx) { SSL_CTX_set_cert_cb(ctx, &CertificateReloader::OnHandshake, this); }

int CertificateReloader::OnHandshake(SSL* ssl, void* arg) {
  auto* self = static_cast<CertificateReloader*>(arg);
  std::shared_ptr<Pair> pair;
  {
    absl::MutexLock lock(&self->mu_);
    const Stamp now = StampOf(self->cert_file_, self->key_file_);
    if (!(now == self->stamp_)) {
      if (absl::Status loaded = self->LoadLocked(now); loaded.ok()) {
        logging::Get("http")->info("HTTPS certificate '{}' re-read: it changed", self->cert_file_);
      } else {
        // A rotation half done, or a bad file: keep serving the last good
        // pair; try again at the next handshake.
        int64_t suppressed = 0;
        if (self->failure_log_.ShouldLog(&suppressed)) {
          logging::Get("http")->warn("{}; still serving the previous certificate ({} such lines suppressed)",
                                     loaded.message(), suppressed);
        }
      }
    }
    pair = self->current_;
  }
  if (pair == nullptr) return 0;
  if (SSL_use_certificate(ssl, pair->chain.front()) != 1 || SSL_use_PrivateKey(ssl, pair->key) != 1) return 0;
  SSL_clear_chain_certs(ssl);
  for (size_t i = 1; i < pair->chain.size(); ++i) {
    if (SSL_add1_chain_cert(ssl, pair->chain[i]) != 1) return 0;
  }
  return 1;
}

}  // namespace weir::http
