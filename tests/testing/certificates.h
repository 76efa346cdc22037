// Test certificates, made with the openssl command-line tool: a CA per test
// cluster (and another one, for intruders), and certificates it signs.
//
// Thread-safety: none; use from the test's thread.
#pragma once

#include <string>

namespace weir::testing {

struct CertificateFiles {
  std::string cert;  // PEM certificate
  std::string key;   // PEM private key, unencrypted
};

// A self-signed CA named `name`, written under `dir` (name.pem, name.key).
// Throws std::runtime_error (with openssl's output) when openssl fails.
CertificateFiles MakeCertificateAuthority(const std::string& dir, const std::string& name);

// A certificate for `name` signed by `ca`, valid for clients and servers,
// with subject alternative names DNS:<name> and IP:127.0.0.1; written under
// `dir` as <name>.pem and <name>.key.
CertificateFiles IssueCertificate(const CertificateFiles& ca, const std::string& dir, const std::string& name);

}  // namespace weir::testing
