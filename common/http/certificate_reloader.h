// CertificateReloader: the HTTPS endpoint's certificate and key, re-read
// from their files when they change, so that a renewed certificate (say,
// by cert-manager) is served without a restart.
//
// Installed as the SSL_CTX's certificate callback: at each TLS handshake it
// stats the two files and, when either changed, loads both; a pair that
// does not load or does not match is logged (at most every 10 s) and the
// last good pair stays in use.
//
// Thread-safety: thread-safe (handshakes run on the HTTP worker threads).
#pragma once

#include <openssl/ssl.h>
#include <sys/types.h>

#include <ctime>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/logging/logging.h"
#include "common/rpc/tls.h"

namespace weir::http {

class CertificateReloader {
 public:
  explicit CertificateReloader(rpc::TlsFiles files);

  // Loads the files now (kInvalidArgument saying what is wrong).
  absl::Status Load() ABSL_LOCKS_EXCLUDED(mu_);

  // Makes `ctx` ask this object for the certificate at every handshake.
  void Install(SSL_CTX* ctx);

 private:
  // What the files looked like when last loaded.
  struct Stamp {
    struct timespec cert_mtime {};
    struct timespec key_mtime {};
    off_t cert_size = -1, key_size = -1;
    bool operator==(const Stamp& o) const;
  };
  static int OnHandshake(SSL* ssl, void* self);
  Stamp StampNow() const;
  absl::Status LoadLocked(const Stamp& stamp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const rpc::TlsFiles files_;
  logging::RateLimiter failure_log_{std::chrono::seconds(10)};
  absl::Mutex mu_;
  std::shared_ptr<const rpc::CertificateKeyPair> current_ ABSL_GUARDED_BY(mu_);
  Stamp stamp_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weir::http
