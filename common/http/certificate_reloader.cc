#include "common/http/certificate_reloader.h"

#include <sys/stat.h>

#include <utility>

namespace weir::http {

bool CertificateReloader::Stamp::operator==(const Stamp& o) const {
  return cert_mtime.tv_sec == o.cert_mtime.tv_sec && cert_mtime.tv_nsec == o.cert_mtime.tv_nsec &&
         key_mtime.tv_sec == o.key_mtime.tv_sec && key_mtime.tv_nsec == o.key_mtime.tv_nsec &&
         cert_size == o.cert_size && key_size == o.key_size;
}

CertificateReloader::CertificateReloader(rpc::TlsFiles files) : files_(std::move(files)) {}

CertificateReloader::Stamp CertificateReloader::StampNow() const {
  Stamp stamp;
  struct stat st {};
  if (stat(files_.cert_file.c_str(), &st) == 0) {
    stamp.cert_mtime = st.st_mtim;
    stamp.cert_size = st.st_size;
  }
  if (stat(files_.key_file.c_str(), &st) == 0) {
    stamp.key_mtime = st.st_mtim;
    stamp.key_size = st.st_size;
  }
  return stamp;
}

absl::Status CertificateReloader::Load() {
  absl::MutexLock lock(&mu_);
  return LoadLocked(StampNow());
}

absl::Status CertificateReloader::LoadLocked(const Stamp& stamp) {
  absl::StatusOr<std::unique_ptr<rpc::CertificateKeyPair>> pair = rpc::LoadCertificateKeyPair(files_);
  if (!pair.ok()) return pair.status();
  current_ = std::move(*pair);
  stamp_ = stamp;
  return absl::OkStatus();
}

void CertificateReloader::Install(SSL_CTX* ctx) { SSL_CTX_set_cert_cb(ctx, &CertificateReloader::OnHandshake, this); }

int CertificateReloader::OnHandshake(SSL* ssl, void* arg) {
  auto* self = static_cast<CertificateReloader*>(arg);
  std::shared_ptr<const rpc::CertificateKeyPair> pair;
  {
    absl::MutexLock lock(&self->mu_);
    const Stamp now = self->StampNow();
    if (!(now == self->stamp_)) {
      if (absl::Status loaded = self->LoadLocked(now); loaded.ok()) {
        logging::Get("http")->info("HTTPS certificate '{}' re-read: it changed", self->files_.cert_file);
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
