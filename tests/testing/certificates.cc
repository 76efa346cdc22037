#include "tests/testing/certificates.h"

#include <fstream>
#include <stdexcept>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/testing/process.h"

namespace weir::testing {
namespace {

void OpenSsl(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/openssl"};
  argv.insert(argv.end(), args.begin(), args.end());
  CommandResult result = RunCommand(argv, absl::Seconds(60));
  if (result.exit_code != 0) {
    std::string line;
    for (const std::string& a : argv) absl::StrAppend(&line, a, " ");
    throw std::runtime_error(absl::StrCat("openssl failed (", result.exit_code, "): ", line, "\n", result.out, result.err));
  }
}

}  // namespace

CertificateFiles MakeCertificateAuthority(const std::string& dir, const std::string& name) {
  CertificateFiles ca{.cert = absl::StrCat(dir, "/", name, ".pem"), .key = absl::StrCat(dir, "/", name, ".key")};
  OpenSsl({"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", ca.key,
           "-out", ca.cert, "-days", "2", "-subj", "/CN=" + name});
  return ca;
}

CertificateFiles IssueCertificate(const CertificateFiles& ca, const std::string& dir, const std::string& name,
                                  Usage usage) {
  CertificateFiles issued{.cert = absl::StrCat(dir, "/", name, ".pem"), .key = absl::StrCat(dir, "/", name, ".key")};
  const std::string request = absl::StrCat(dir, "/", name, ".csr");
  const std::string extensions = absl::StrCat(dir, "/", name, ".ext");
  std::ofstream(extensions) << "basicConstraints=CA:FALSE\n"
                               "keyUsage=digitalSignature,keyEncipherment\n"
                            << (usage == Usage::kClientOnly ? "extendedKeyUsage=clientAuth\n"
                                                            : "extendedKeyUsage=serverAuth,clientAuth\n")
                            << "subjectAltName=DNS:" << name << ",IP:127.0.0.1\n";
  OpenSsl({"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", issued.key, "-out",
           request, "-subj", "/CN=" + name});
  OpenSsl({"x509", "-req", "-in", request, "-CA", ca.cert, "-CAkey", ca.key, "-CAcreateserial", "-out", issued.cert,
           "-days", "2", "-extfile", extensions});
  return issued;
}

std::vector<std::string> TlsSettings(const CertificateFiles& cert, const std::string& ca_cert) {
  return {"-Dsecurity.ssl.internal.enabled=true", "-Dsecurity.ssl.internal.cert-file=" + cert.cert,
          "-Dsecurity.ssl.internal.key-file=" + cert.key, "-Dsecurity.ssl.internal.ca-file=" + ca_cert};
}

}  // namespace weir::testing
