// Test certificates, made with the openssl command-line tool: a CA per test
// cluster (and another one, for intruders), and certificates it signs.
//
// Thread-safety: none; use from the test's thread.
#pragma once

#include <string>
#include <vector>

namespace weir::testing {

struct CertificateFiles {
  std::string cert;  // PEM certificate
  std::string key;   // PEM private key, unencrypted
};

// A self-signed CA named `name`, written under `dir` (name.pem, name.key).
// Throws std::runtime_error (with openssl's output) when openssl fails.
CertificateFiles MakeCertificateAuthority(const std::string& dir, const std::string& name);

// What a certificate may be used for (its extended key usage).
enum class Usage { kServerAndClient, kClientOnly };

// A certificate for `name` signed by `ca`, with subject alternative names
// DNS:<name> and IP:127.0.0.1; written under `dir` as <name>.pem and
// <name>.key.
CertificateFiles IssueCertificate(const CertificateFiles& ca, const std::string& dir, const std::string& name,
                                  Usage usage = Usage::kServerAndClient);

// The -D settings (security.ssl.internal.*) that make a Weir process present
// `cert` and trust the CA certificate `ca_cert`.
std::vector<std::string> TlsSettings(const CertificateFiles& cert, const std::string& ca_cert);

}  // namespace weir::testing
