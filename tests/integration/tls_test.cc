// Transport security, end to end: the real daemons and client with mutual
// TLS (security.ssl.internal.*) and HTTPS (security.ssl.rest.*), on
// certificates this test makes with openssl.
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "tests/testing/certificates.h"
#include "tests/testing/http_get.h"
#include "tests/testing/process.h"
#include "weir/v1/job.grpc.pb.h"

namespace weir {
namespace {

using testing::BinDir;
using testing::CertificateFiles;
using testing::CommandResult;
using testing::RunCommand;
using testing::Subprocess;
using testing::WaitFor;

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("weir-tls-test");
    jm_port_ = testing::FreePort();
    ca_ = testing::MakeCertificateAuthority(dir_, "cluster-ca");
    other_ca_ = testing::MakeCertificateAuthority(dir_, "other-ca");
    token_ = dir_ + "/token";
    std::ofstream(token_) << "s3cret-of-the-cluster\n";
  }

  // The -D settings that make a process use `cert` and trust `ca`.
  static std::vector<std::string> Tls(const CertificateFiles& cert, const CertificateFiles& ca) {
    return testing::TlsSettings(cert, ca.cert);
  }

  std::string JobManagerAddress() const { return absl::StrCat("127.0.0.1:", jm_port_); }

  std::unique_ptr<Subprocess> StartJobManager(std::vector<std::string> extra) {
    std::vector<std::string> argv = {BinDir() + "/weir-jobmanager", absl::StrCat("-Djobmanager.rpc.port=", jm_port_),
                                     absl::StrCat("-Dhigh-availability.storageDir=", dir_, "/ha"), "-Drest.port=0"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return std::make_unique<Subprocess>(argv, absl::StrCat(dir_, "/jobmanager-", ++starts_, ".log"));
  }

  std::unique_ptr<Subprocess> StartTaskManager(const std::string& id, std::vector<std::string> extra) {
    std::vector<std::string> argv = {BinDir() + "/weir-taskmanager", absl::StrCat("-Djobmanager.rpc.port=", jm_port_),
                                     "-Dtaskmanager.resource-id=" + id, "-Dio.tmp.dirs=" + dir_};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return std::make_unique<Subprocess>(argv, absl::StrCat(dir_, "/", id, ".log"));
  }

  // `weir --json cluster` with the given client settings (-D before the command).
  CommandResult Cluster(std::vector<std::string> client) {
    std::vector<std::string> argv = {BinDir() + "/weir", "--jobmanager", JobManagerAddress()};
    argv.insert(argv.end(), client.begin(), client.end());
    argv.push_back("--json");
    argv.push_back("cluster");
    return RunCommand(argv);
  }

  std::vector<std::string> Members(std::vector<std::string> client) {
    CommandResult r = Cluster(std::move(client));
    std::vector<std::string> ids;
    if (r.exit_code != 0) return ids;
    const nlohmann::json cluster = nlohmann::json::parse(r.out);
    for (const auto& tm : cluster["taskmanagers"]) ids.push_back(tm["id"]);
    return ids;
  }

  static std::vector<std::string> Plus(std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }

  std::string dir_;
  int jm_port_ = 0;
  int starts_ = 0;
  CertificateFiles ca_, other_ca_;
  std::string token_;
};

// Only processes with a certificate from the cluster's CA get in: a
// TaskManager or a client with another CA's certificate, or speaking
// plaintext, fails the handshake. Under TLS the token is checked when the
// call's metadata arrives (the JobManager's log names the certificate of a
// caller without it), and it still has to be there.
TEST_F(TlsTest, OnlyCertificatesOfTheClustersCaGetIn) {
  const CertificateFiles jm_cert = testing::IssueCertificate(ca_, dir_, "jobmanager");
  const CertificateFiles tm_cert = testing::IssueCertificate(ca_, dir_, "tm-a");
  // An operator's certificate: for a TLS client only, as docs/security.md advises.
  const CertificateFiles client_cert = testing::IssueCertificate(ca_, dir_, "operator", testing::Usage::kClientOnly);
  const CertificateFiles intruder_cert = testing::IssueCertificate(other_ca_, dir_, "intruder");
  const std::vector<std::string> token = {"-Dsecurity.auth.token-file=" + token_};

  auto jm = StartJobManager(Plus(Plus(Tls(jm_cert, ca_), token), {"-Djobmanager.bind-host=0.0.0.0"}));
  auto a = StartTaskManager("tm-a", Plus(Tls(tm_cert, ca_), token));
  // A TaskManager of another CA.
  auto foreign = StartTaskManager("tm-foreign", Plus(Tls(intruder_cert, other_ca_), token));
  // No TLS at all, with the right token.
  auto plain = StartTaskManager("tm-plain", token);

  const std::vector<std::string> client = Plus(Tls(client_cert, ca_), {"--token-file", token_});
  ASSERT_TRUE(WaitFor([&] { return Members(client) == std::vector<std::string>{"tm-a"}; }, absl::Seconds(30)))
      << jm->Log() << a->Log();
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(plain->Log(), "cannot register"); }, absl::Seconds(30)))
      << plain->Log();
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(foreign->Log(), "cannot register"); }, absl::Seconds(30)))
      << foreign->Log();
  EXPECT_EQ(Members(client), std::vector<std::string>{"tm-a"});

  // Clients: plaintext, another CA's certificate, a server it cannot trust.
  CommandResult plaintext = Cluster({"--token-file", token_});
  EXPECT_EQ(plaintext.exit_code, 1) << plaintext.out;
  // (Weir's client refuses to start with a certificate its CA file does not
  // vouch for; a raw gRPC client does not ask.)
  auto raw_call = [&](const CertificateFiles& cert) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = testing::ReadFile(ca_.cert);
    ssl.pem_private_key = testing::ReadFile(cert.key);
    ssl.pem_cert_chain = testing::ReadFile(cert.cert);
    auto stub = v1::JobService::NewStub(grpc::CreateChannel(JobManagerAddress(), grpc::SslCredentials(ssl)));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    context.AddMetadata("authorization", "Bearer s3cret-of-the-cluster");
    v1::ListJobsResponse response;
    return stub->List(&context, v1::ListJobsRequest(), &response);
  };
  grpc::Status member_call = raw_call(client_cert);
  EXPECT_TRUE(member_call.ok()) << member_call.error_message();
  grpc::Status intruder_call = raw_call(intruder_cert);
  EXPECT_EQ(intruder_call.error_code(), grpc::StatusCode::UNAVAILABLE) << intruder_call.error_message();
  CommandResult distrusting = Cluster(Plus(Tls(intruder_cert, other_ca_), {"--token-file", token_}));
  EXPECT_EQ(distrusting.exit_code, 1) << distrusting.out;

  // The right certificate without the token: refused, at metadata time.
  CommandResult no_token = Cluster(Tls(client_cert, ca_));
  EXPECT_EQ(no_token.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(no_token.err, "none was given")) << no_token.err;
  EXPECT_TRUE(WaitFor([&] { return absl::StrContains(jm->Log(), "refused a call from the holder of certificate"); },
                      absl::Seconds(10)))
      << jm->Log();
  EXPECT_TRUE(jm->running());

  // A client-only certificate cannot pose as a daemon: a server presenting
  // it (a raw gRPC server here; Weir's daemons refuse it at start) fails
  // the client's handshake, although the cluster's CA signed it.
  grpc::SslServerCredentialsOptions server_ssl;
  server_ssl.pem_key_cert_pairs.push_back({testing::ReadFile(client_cert.key), testing::ReadFile(client_cert.cert)});
  grpc::ServerBuilder builder;
  int impostor_port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::SslServerCredentials(server_ssl), &impostor_port);
  // Past a handshake, the client would hear UNIMPLEMENTED from every method.
  v1::JobService::Service impostor_service;
  builder.RegisterService(&impostor_service);
  std::unique_ptr<grpc::Server> impostor = builder.BuildAndStart();
  ASSERT_NE(impostor, nullptr);
  CommandResult fooled = RunCommand(
      Plus({BinDir() + "/weir", "--jobmanager", absl::StrCat("127.0.0.1:", impostor_port)},
           Plus(Tls(tm_cert, ca_), {"--token-file", token_, "list"})));
  EXPECT_EQ(fooled.exit_code, 1) << fooled.out;
  EXPECT_TRUE(absl::StrContains(fooled.err, "cannot reach")) << fooled.err;
  impostor->Shutdown();
}

TEST_F(TlsTest, BadCertificateFilesStopEveryProcessAtStart) {
  const CertificateFiles good = testing::IssueCertificate(ca_, dir_, "good");
  const CertificateFiles foreign = testing::IssueCertificate(other_ca_, dir_, "foreign");
  const CertificateFiles client_only = testing::IssueCertificate(ca_, dir_, "client-only", testing::Usage::kClientOnly);
  const std::string garbage = dir_ + "/garbage.pem";
  std::ofstream(garbage) << "not a certificate\n";
  struct Case {
    std::vector<std::string> settings;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{"-Dsecurity.ssl.internal.enabled=true"}, "security.ssl.internal.cert-file is not set"},
      {Plus(Tls(good, ca_), {"-Dsecurity.ssl.internal.cert-file=" + dir_ + "/missing.pem"}),
       "cannot read security.ssl.internal.cert-file"},
      {Plus(Tls(good, ca_), {"-Dsecurity.ssl.internal.cert-file=" + garbage}), "holds no PEM certificate"},
      {Plus(Tls(good, ca_), {"-Dsecurity.ssl.internal.key-file=" + foreign.key}), "does not belong to the certificate"},
      {Tls(foreign, ca_), "does not chain to a CA in security.ssl.internal.ca-file"},
      {Tls(client_only, ca_), "may not serve as a TLS server"},
      {{"-Dsecurity.ssl.rest.enabled=true", "-Dsecurity.ssl.rest.cert-file=" + good.cert},
       "security.ssl.rest.key-file is not set"},
      {{"-Dsecurity.ssl.rest.enabled=true", "-Dsecurity.ssl.rest.cert-file=" + good.cert,
        "-Dsecurity.ssl.rest.key-file=" + foreign.key},
       "does not belong to the certificate"},
  };
  for (const Case& c : cases) {
    for (const char* binary : {"weir-jobmanager", "weir-taskmanager"}) {
      std::vector<std::string> argv = {BinDir() + "/" + binary};
      argv.insert(argv.end(), c.settings.begin(), c.settings.end());
      CommandResult result = RunCommand(argv);
      EXPECT_EQ(result.exit_code, 2) << binary << ": " << c.expected << "\n" << result.err;
      EXPECT_TRUE(absl::StrContains(result.err, c.expected)) << binary << ": " << result.err;
      // --check-config finds the same.
      argv.push_back("--check-config");
      EXPECT_EQ(RunCommand(argv).exit_code, 2) << binary << " --check-config: " << c.expected;
    }
  }
  // The client checks its files as the daemons do.
  std::vector<std::string> client = {BinDir() + "/weir"};
  for (const std::string& s : Tls(foreign, ca_)) client.push_back(s);
  client.push_back("cluster");
  CommandResult result = RunCommand(client);
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(result.err, "does not chain to a CA")) << result.err;
}

// Certificates are rotated by replacing their files: the JobManager takes
// the new ones (and the new CA) for new connections without a restart.
TEST_F(TlsTest, ReplacedCertificateFilesAreUsedWithoutARestart) {
  const CertificateFiles old_client = testing::IssueCertificate(ca_, dir_, "old-client");
  const CertificateFiles old_server = testing::IssueCertificate(ca_, dir_, "old-server");
  const CertificateFiles new_client = testing::IssueCertificate(other_ca_, dir_, "new-client");
  const CertificateFiles new_server = testing::IssueCertificate(other_ca_, dir_, "new-server");
  // The JobManager's files, replaced below.
  const std::string live = dir_ + "/live";
  std::filesystem::create_directories(live);
  const CertificateFiles live_cert{.cert = live + "/jm.pem", .key = live + "/jm.key"};
  const CertificateFiles live_ca{.cert = live + "/ca.pem", .key = ""};
  auto install = [&](const CertificateFiles& server, const CertificateFiles& ca) {
    // Written aside and renamed, as a rotation tool would.
    for (const auto& [from, to] : {std::pair{server.cert, live_cert.cert}, std::pair{server.key, live_cert.key},
                                   std::pair{ca.cert, live_ca.cert}}) {
      std::filesystem::copy_file(from, to + ".new", std::filesystem::copy_options::overwrite_existing);
      std::filesystem::rename(to + ".new", to);
    }
  };
  install(old_server, ca_);
  auto jm = StartJobManager(Plus(Tls(live_cert, live_ca), {"-Dsecurity.ssl.internal.reload-interval=1 s"}));
  ASSERT_TRUE(WaitFor([&] { return Cluster(Tls(old_client, ca_)).exit_code == 0; }, absl::Seconds(30))) << jm->Log();
  EXPECT_NE(Cluster(Tls(new_client, other_ca_)).exit_code, 0);

  install(new_server, other_ca_);
  ASSERT_TRUE(WaitFor([&] { return Cluster(Tls(new_client, other_ca_)).exit_code == 0; }, absl::Seconds(30)))
      << jm->Log();
  EXPECT_NE(Cluster(Tls(old_client, ca_)).exit_code, 0);
  EXPECT_TRUE(jm->running());
}

// security.ssl.rest.*: the HTTP endpoint speaks HTTPS with its certificate,
// which a client verifies against the CA; plain HTTP gets no answer. A
// replaced certificate is served from the next handshake on.
TEST_F(TlsTest, HttpEndpointServesHttpsAndTakesRenewedCertificates) {
  const CertificateFiles web = testing::IssueCertificate(ca_, dir_, "web");
  const CertificateFiles renewed = testing::IssueCertificate(other_ca_, dir_, "web-renewed");
  const std::string live = dir_ + "/web-live";
  std::filesystem::create_directories(live);
  const CertificateFiles served{.cert = live + "/web.pem", .key = live + "/web.key"};
  auto install = [&](const CertificateFiles& from) {
    for (const auto& [source, target] : {std::pair{from.cert, served.cert}, std::pair{from.key, served.key}}) {
      std::filesystem::copy_file(source, target + ".new", std::filesystem::copy_options::overwrite_existing);
      std::filesystem::rename(target + ".new", target);
    }
  };
  install(web);
  const int rest_port = testing::FreePort();
  auto jm = StartJobManager({absl::StrCat("-Drest.port=", rest_port), "-Dsecurity.ssl.rest.enabled=true",
                             "-Dsecurity.ssl.rest.cert-file=" + served.cert,
                             "-Dsecurity.ssl.rest.key-file=" + served.key});
  // The status of GET /healthz from a client that trusts `ca` (0: refused).
  auto healthz = [&](const CertificateFiles& ca) {
    httplib::SSLClient client("127.0.0.1", rest_port);
    client.set_ca_cert_path(ca.cert.c_str());
    client.enable_server_certificate_verification(true);
    client.set_connection_timeout(5, 0);
    httplib::Result r = client.Get("/healthz");
    return r ? r->status : 0;
  };
  ASSERT_TRUE(WaitFor([&] { return healthz(ca_) == 200; }, absl::Seconds(30))) << jm->Log();
  httplib::SSLClient client("127.0.0.1", rest_port);
  client.set_ca_cert_path(ca_.cert.c_str());
  client.enable_server_certificate_verification(true);
  httplib::Result overview = client.Get("/overview");
  ASSERT_TRUE(overview);
  EXPECT_EQ(overview->status, 200);
  EXPECT_TRUE(absl::StrContains(overview->body, "taskmanagers")) << overview->body;
  EXPECT_EQ(testing::HttpGet(rest_port, "/healthz").status, 0);
  // A client that trusts another CA refuses the endpoint.
  EXPECT_EQ(healthz(other_ca_), 0);
  EXPECT_TRUE(absl::StrContains(jm->Log(), "listening on https://")) << jm->Log();

  install(renewed);
  ASSERT_TRUE(WaitFor([&] { return healthz(other_ca_) == 200; }, absl::Seconds(30))) << jm->Log();
  EXPECT_EQ(healthz(ca_), 0);
  EXPECT_TRUE(absl::StrContains(jm->Log(), "re-read: it changed")) << jm->Log();
  EXPECT_TRUE(jm->running());
}

}  // namespace
}  // namespace weir
