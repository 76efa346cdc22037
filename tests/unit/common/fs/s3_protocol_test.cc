// The S3 client's parts that need no S3 server: SigV4 against AWS's published
// examples (the S3 "Signature Calculations for the Authorization Header"
// examples: bucket examplebucket, key AKIAIOSFODNN7EXAMPLE, 2013-05-24), the
// bounded XML reader on hostile input, and the retry rules against a tiny
// HTTP server in the test that answers what the test tells it to.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/crypto/sha256.h"
#include "common/fs/s3/s3_file_system.h"
#include "common/fs/s3/sigv4.h"
#include "common/fs/s3/xml.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weir::fs {
namespace {

using ::testing::HasSubstr;

// ---------------------------------------------------------------- SigV4

const s3::SigningCredentials kExampleCredentials{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""};
const char kEmptyHash[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

absl::Time ExampleTime() { return absl::FromCivil(absl::CivilSecond(2013, 5, 24, 0, 0, 0), absl::UTCTimeZone()); }

TEST(SigV4Test, GetObjectWithRange) {
  s3::SigningRequest request{.method = "GET",
                             .encoded_path = s3::UriEncodePath("test.txt"),
                             .headers = {{"Range", "bytes=0-9"}},
                             .host = "examplebucket.s3.amazonaws.com",
                             .payload_hash = kEmptyHash};
  s3::SignedHeaders signed_headers = s3::Sign(request, kExampleCredentials, "us-east-1", ExampleTime());
  EXPECT_EQ(signed_headers.signature, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  EXPECT_EQ(signed_headers.canonical_request,
            "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
            "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
            "x-amz-date:20130524T000000Z\n\nhost;range;x-amz-content-sha256;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_THAT(signed_headers.headers,
              testing::Contains(testing::Pair(
                  "Authorization",
                  "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
                  "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
                  "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")));
}

TEST(SigV4Test, PutObjectWithAnEncodedKey) {
  const std::string body = "Welcome to Amazon S3.";
  s3::SigningRequest request{.method = "PUT",
                             .encoded_path = s3::UriEncodePath("test$file.text"),
                             .headers = {{"Date", "Fri, 24 May 2013 00:00:00 GMT"},
                                         {"x-amz-storage-class", "REDUCED_REDUNDANCY"}},
                             .host = "examplebucket.s3.amazonaws.com",
                             .payload_hash = crypto::Sha256Hex(body)};
  EXPECT_EQ(request.encoded_path, "/test%24file.text");
  EXPECT_EQ(request.payload_hash, "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  EXPECT_EQ(s3::Sign(request, kExampleCredentials, "us-east-1", ExampleTime()).signature,
            "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
}

TEST(SigV4Test, GetBucketLifecycleWithAnEmptyQueryValue) {
  s3::SigningRequest request{.method = "GET",
                             .encoded_path = "/",
                             .query = {{"lifecycle", ""}},
                             .host = "examplebucket.s3.amazonaws.com",
                             .payload_hash = kEmptyHash};
  EXPECT_EQ(s3::Sign(request, kExampleCredentials, "us-east-1", ExampleTime()).signature,
            "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
}

TEST(SigV4Test, ListObjectsSortsTheQuery) {
  s3::SigningRequest request{.method = "GET",
                             .encoded_path = "/",
                             .query = {{"prefix", "J"}, {"max-keys", "2"}},
                             .host = "examplebucket.s3.amazonaws.com",
                             .payload_hash = kEmptyHash};
  s3::SignedHeaders signed_headers = s3::Sign(request, kExampleCredentials, "us-east-1", ExampleTime());
  EXPECT_EQ(signed_headers.signature, "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
  EXPECT_THAT(signed_headers.canonical_request, HasSubstr("\nmax-keys=2&prefix=J\n"));
}

TEST(SigV4Test, SessionTokenIsSigned) {
  s3::SigningRequest request{.method = "GET", .encoded_path = "/k", .host = "h", .payload_hash = kEmptyHash};
  s3::SigningCredentials with_token = kExampleCredentials;
  with_token.session_token = "token/with+chars";
  s3::SignedHeaders signed_headers = s3::Sign(request, with_token, "us-east-1", ExampleTime());
  EXPECT_THAT(signed_headers.canonical_request, HasSubstr("x-amz-security-token:token/with+chars\n"));
  EXPECT_THAT(signed_headers.headers, testing::Contains(testing::Pair("x-amz-security-token", "token/with+chars")));
  EXPECT_NE(signed_headers.signature, s3::Sign(request, kExampleCredentials, "us-east-1", ExampleTime()).signature);
}

TEST(SigV4Test, UriEncoding) {
  EXPECT_EQ(s3::UriEncode("a b/c~d_e-f.g*h", false), "a%20b%2Fc~d_e-f.g%2Ah");
  EXPECT_EQ(s3::UriEncodePath("job 1/chk-2/_metadata"), "/job%201/chk-2/_metadata");
  EXPECT_EQ(s3::CanonicalQueryString({{"uploadId", "a/b=c"}, {"partNumber", "3"}}), "partNumber=3&uploadId=a%2Fb%3Dc");
}

// ---------------------------------------------------------------- XML

TEST(XmlTest, ListObjectsAnswer) {
  absl::StatusOr<s3::XmlElement> xml = s3::ParseXml(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>b</Name>"
      "<IsTruncated>true</IsTruncated><NextContinuationToken>t&amp;1</NextContinuationToken>"
      "<Contents><Key>a&lt;b&#x41;&#66;</Key><Size>12</Size></Contents><Contents><Key>c</Key><Size>0</Size></Contents>"
      "<Prefix/></ListBucketResult>");
  ASSERT_TRUE(xml.ok()) << xml.status();
  EXPECT_EQ(xml->name, "ListBucketResult");
  EXPECT_EQ(xml->ChildText("NextContinuationToken"), "t&1");
  ASSERT_EQ(xml->children.size(), 6u);
  EXPECT_EQ(xml->children[3].ChildText("Key"), "a<bAB");
  EXPECT_EQ(xml->ChildText("Missing"), "");
}

TEST(XmlTest, NamespacePrefixesAndAttributesWithAngleBrackets) {
  absl::StatusOr<s3::XmlElement> xml = s3::ParseXml("<s3:Error a='x>y' b=\"1\"><!-- c --><s3:Code>X</s3:Code></s3:Error>");
  ASSERT_TRUE(xml.ok()) << xml.status();
  EXPECT_EQ(xml->name, "Error");
  EXPECT_EQ(xml->ChildText("Code"), "X");
}

TEST(XmlTest, RefusesMalformedInput) {
  for (const char* bad : {"", "<", "<a>", "<a></b>", "<a><b></a></b>", "<a>x", "<a>&bogus;</a>", "<a>&#0;</a>",
                          "<a>&#x110000;</a>", "<a></a><b></b>", "<a ><:/></a>", "<x:>1</x:>", "<a x=1></a>", "<a>&amp</a>", "text",
                          "<!DOCTYPE a [<!ENTITY e \"x\">]><a>&e;</a>", "<a><![CDATA[x]]></a>", "<a><!-- x</a>"}) {
    absl::StatusOr<s3::XmlElement> xml = s3::ParseXml(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(xml.status())) << "'" << bad << "': " << xml.status();
  }
}

TEST(XmlTest, EveryTruncationOfAValidDocumentIsRefused) {
  const std::string doc = "<Error><Code>SlowDown</Code><Message>Please reduce</Message></Error>";
  ASSERT_TRUE(s3::ParseXml(doc).ok());
  for (size_t n = 0; n < doc.size(); ++n) {
    EXPECT_FALSE(s3::ParseXml(doc.substr(0, n)).ok()) << doc.substr(0, n);
  }
}

TEST(XmlTest, DeepNestingIsRefusedWithoutExhaustingTheStack) {
  std::string doc;
  for (int i = 0; i < 100000; ++i) doc += "<a>";
  absl::StatusOr<s3::XmlElement> xml = s3::ParseXml(doc);
  EXPECT_TRUE(absl::IsInvalidArgument(xml.status()));
  EXPECT_THAT(xml.status().message(), HasSubstr("nesting deeper than 16"));
}

TEST(XmlTest, SizeAndElementCountAreBounded) {
  s3::XmlLimits limits{.max_bytes = 1000, .max_depth = 16, .max_elements = 10};
  std::string big = "<a>" + std::string(2000, 'x') + "</a>";
  EXPECT_THAT(s3::ParseXml(big, limits).status().message(), HasSubstr("exceeds the limit of 1000"));
  std::string many = "<a>";
  for (int i = 0; i < 20; ++i) many += "<b/>";
  many += "</a>";
  EXPECT_THAT(s3::ParseXml(many, limits).status().message(), HasSubstr("more than 10 elements"));
}

// ---------------------------------------------------------------- retries

// Answers HTTP requests on 127.0.0.1 from a script: each request takes the
// next scripted answer (the last one repeats). One request per connection.
class ScriptedHttpServer {
 public:
  explicit ScriptedHttpServer(std::vector<std::string> answers) : answers_(std::move(answers)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    socklen_t len = sizeof(addr);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    EXPECT_EQ(::listen(fd_, 16), 0);
    thread_ = std::thread([this] { Serve(); });
  }
  ~ScriptedHttpServer() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }

  std::string endpoint() const { return absl::StrCat("http://127.0.0.1:", port_); }
  int requests() {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(request_lines_.size());
  }
  std::vector<std::string> request_lines() {
    absl::MutexLock lock(&mu_);
    return request_lines_;
  }
  // Each request's line and headers, as received.
  std::vector<std::string> request_heads() {
    absl::MutexLock lock(&mu_);
    return request_heads_;
  }

  static std::string Answer(int status, absl::string_view body, absl::string_view extra_headers = "") {
    return absl::StrCat("HTTP/1.1 ", status, " X\r\nContent-Length: ", body.size(), "\r\n", extra_headers,
                        "Connection: close\r\n\r\n", body);
  }

 private:
  void Serve() {
    while (!stop_) {
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::string in;
      char buf[65536];
      size_t head_end = std::string::npos;
      int64_t content_length = 0;
      while (true) {
        ssize_t n = ::read(c, buf, sizeof(buf));
        if (n <= 0) break;
        in.append(buf, static_cast<size_t>(n));
        if (head_end == std::string::npos && (head_end = in.find("\r\n\r\n")) != std::string::npos) {
          size_t at = in.find("Content-Length: ");
          if (at != std::string::npos && at < head_end) {
            (void)absl::SimpleAtoi(in.substr(at + 16, in.find("\r\n", at) - at - 16), &content_length);
          }
        }
        if (head_end != std::string::npos && static_cast<int64_t>(in.size()) >= static_cast<int64_t>(head_end) + 4 + content_length) break;
      }
      std::string answer;
      {
        absl::MutexLock lock(&mu_);
        request_lines_.push_back(in.substr(0, in.find("\r\n")));
        request_heads_.push_back(in.substr(0, head_end == std::string::npos ? in.size() : head_end));
        answer = answers_[std::min(next_++, answers_.size() - 1)];
      }
      (void)!::write(c, answer.data(), answer.size());
      ::close(c);
    }
  }

  const std::vector<std::string> answers_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  absl::Mutex mu_;
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> request_lines_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> request_heads_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

S3Options FastRetryOptions(const std::string& endpoint) {
  S3Options options;
  options.endpoint = endpoint;
  options.path_style = true;
  options.access_key = "key";
  options.secret_key = "secret";
  options.backoff = {.initial = absl::Milliseconds(5), .max = absl::Milliseconds(20), .jitter = 0.5};
  options.max_attempts = 5;
  return options;
}

const char kSlowDown[] = "<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>";

TEST(S3RetryTest, SlowDownAndServerErrorsAreRetriedUntilTheyPass) {
  ScriptedHttpServer server({ScriptedHttpServer::Answer(503, kSlowDown),
                             ScriptedHttpServer::Answer(500, "<Error><Code>InternalError</Code></Error>"),
                             ScriptedHttpServer::Answer(429, ""),
                             ScriptedHttpServer::Answer(200, "", "ETag: \"x\"\r\n")});
  auto fs = S3FileSystem::Open("s3://bucket/root", FastRetryOptions(server.endpoint()));
  ASSERT_TRUE(fs.ok()) << fs.status();
  EXPECT_TRUE((*fs)->Write("a/b", "data", WriteMode::kOverwrite).ok());
  EXPECT_EQ(server.requests(), 4);
  EXPECT_THAT(server.request_lines(), testing::Each(testing::StartsWith("PUT /bucket/root/a/b HTTP/1.1")));
}

TEST(S3RetryTest, GivesUpAfterMaxAttemptsNamingTheBucketKeyAndCode) {
  ScriptedHttpServer server({ScriptedHttpServer::Answer(503, kSlowDown)});
  auto fs = S3FileSystem::Open("s3://bucket", FastRetryOptions(server.endpoint()));
  ASSERT_TRUE(fs.ok()) << fs.status();
  absl::StatusOr<std::string> read = (*fs)->ReadFile("k", 100);
  EXPECT_TRUE(absl::IsUnavailable(read.status())) << read.status();
  EXPECT_THAT(read.status().message(), HasSubstr("s3://bucket/k"));
  EXPECT_THAT(read.status().message(), HasSubstr("HTTP 503 SlowDown"));
  EXPECT_THAT(read.status().message(), HasSubstr("5 tries"));
  EXPECT_EQ(server.requests(), 5);
}

// MD5 of "data", base64; SHA-256 of "data", hex.
const char kDataMd5[] = "jXd/OF09/siBXSD3SWAm3A==";
const char kDataSha256[] = "3a6eb0790f39ac87c94f3856b2dd2c5d110e6811602261a9a923d3bb23adc8b7";

TEST(S3UploadTest, AnObjectBodyGoesUnsignedWithASignedContentMd5) {
  ScriptedHttpServer server({ScriptedHttpServer::Answer(200, "")});
  auto fs = S3FileSystem::Open("s3://bucket", FastRetryOptions(server.endpoint()));
  ASSERT_TRUE(fs.ok()) << fs.status();
  ASSERT_TRUE((*fs)->Write("k", "data", WriteMode::kOverwrite).ok());
  ASSERT_EQ(server.request_heads().size(), 1u);
  const std::string head = absl::AsciiStrToLower(server.request_heads()[0]);
  EXPECT_THAT(head, HasSubstr("x-amz-content-sha256: unsigned-payload\r\n"));
  EXPECT_THAT(head, HasSubstr(absl::AsciiStrToLower(absl::StrCat("content-md5: ", kDataMd5, "\r\n"))));
  // The digest is covered by the signature, so it cannot be swapped with the body.
  EXPECT_THAT(head, HasSubstr("signedheaders=content-md5;"));
}

TEST(S3UploadTest, SignPayloadSignsTheBodyAndStillSendsItsMd5) {
  ScriptedHttpServer server({ScriptedHttpServer::Answer(200, "")});
  S3Options options = FastRetryOptions(server.endpoint());
  options.sign_payload = true;
  auto fs = S3FileSystem::Open("s3://bucket", options);
  ASSERT_TRUE(fs.ok()) << fs.status();
  ASSERT_TRUE((*fs)->Write("k", "data", WriteMode::kOverwrite).ok());
  ASSERT_EQ(server.request_heads().size(), 1u);
  const std::string head = absl::AsciiStrToLower(server.request_heads()[0]);
  EXPECT_THAT(head, HasSubstr(absl::StrCat("x-amz-content-sha256: ", kDataSha256, "\r\n")));
  EXPECT_THAT(head, HasSubstr(absl::AsciiStrToLower(absl::StrCat("content-md5: ", kDataMd5, "\r\n"))));
}

TEST(S3UploadTest, ABodyTheStoreFoundCorruptIsSentAgain) {
  ScriptedHttpServer server(
      {ScriptedHttpServer::Answer(400, "<Error><Code>BadDigest</Code><Message>Bad Request</Message></Error>"),
       ScriptedHttpServer::Answer(200, "")});
  auto fs = S3FileSystem::Open("s3://bucket", FastRetryOptions(server.endpoint()));
  ASSERT_TRUE(fs.ok()) << fs.status();
  EXPECT_TRUE((*fs)->Write("k", "data", WriteMode::kOverwrite).ok());
  EXPECT_EQ(server.requests(), 2);
}

TEST(S3RetryTest, ClientErrorsAreNotRetried) {
  ScriptedHttpServer server({ScriptedHttpServer::Answer(
      403, "<Error><Code>SignatureDoesNotMatch</Code><Message>The signature does not match</Message></Error>")});
  auto fs = S3FileSystem::Open("s3://bucket", FastRetryOptions(server.endpoint()));
  ASSERT_TRUE(fs.ok()) << fs.status();
  absl::Status status = (*fs)->Write("k", "v", WriteMode::kOverwrite);
  EXPECT_TRUE(absl::IsPermissionDenied(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("HTTP 403 SignatureDoesNotMatch"));
  EXPECT_THAT(status.message(), HasSubstr("check the access key and secret key"));
  EXPECT_EQ(server.requests(), 1);
}

TEST(S3RetryTest, AHugeErrorBodyIsCutOffAndStillReported) {
  ScriptedHttpServer server({ScriptedHttpServer::Answer(400, std::string(1 << 20, 'x'))});
  auto fs = S3FileSystem::Open("s3://bucket", FastRetryOptions(server.endpoint()));
  ASSERT_TRUE(fs.ok()) << fs.status();
  absl::Status status = (*fs)->Delete("k");
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("HTTP 400"));
  EXPECT_LT(status.message().size(), 1000u);
  EXPECT_EQ(server.requests(), 1);
}

TEST(S3RetryTest, AMultipartCompletionThatFailsInsideA200IsAnError) {
  // Initiate, two parts, then a completion whose 200 carries an error: the
  // writer reports it and aborts the upload (the last request, a DELETE).
  S3Options options = FastRetryOptions("");
  options.part_size = 5 << 20;
  options.max_attempts = 1;
  ScriptedHttpServer server({
      ScriptedHttpServer::Answer(200, "<InitiateMultipartUploadResult><UploadId>u1</UploadId></InitiateMultipartUploadResult>"),
      ScriptedHttpServer::Answer(200, "", "ETag: \"p1\"\r\n"),
      ScriptedHttpServer::Answer(200, "", "ETag: \"p2\"\r\n"),
      ScriptedHttpServer::Answer(200, "<Error><Code>InternalError</Code><Message>We encountered an internal error</Message></Error>"),
      ScriptedHttpServer::Answer(204, ""),
  });
  options.endpoint = server.endpoint();
  auto fs = S3FileSystem::Open("s3://bucket", options);
  ASSERT_TRUE(fs.ok()) << fs.status();
  absl::Status status = (*fs)->Write("big", std::string((5 << 20) + 1, 'z'), WriteMode::kOverwrite);
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("InternalError"));
  std::vector<std::string> lines = server.request_lines();
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_THAT(lines[0], testing::StartsWith("POST /bucket/big?uploads= "));
  EXPECT_THAT(lines[1], testing::StartsWith("PUT /bucket/big?partNumber=1&uploadId=u1 "));
  EXPECT_THAT(lines[3], testing::StartsWith("POST /bucket/big?uploadId=u1 "));
  EXPECT_THAT(lines[4], testing::StartsWith("DELETE /bucket/big?uploadId=u1 "));
}

TEST(S3RetryTest, ACompletionRetriedAfterItTookEffectFindsTheObject) {
  // The first completion succeeded but its answer was lost (a 500 here); the
  // retry finds the upload gone, and the object of the written size is ours.
  const int64_t size = (5 << 20) + 1;
  S3Options options = FastRetryOptions("");
  options.part_size = 5 << 20;
  ScriptedHttpServer server({
      ScriptedHttpServer::Answer(200, "<InitiateMultipartUploadResult><UploadId>u1</UploadId></InitiateMultipartUploadResult>"),
      ScriptedHttpServer::Answer(200, "", "ETag: \"p1\"\r\n"),
      ScriptedHttpServer::Answer(200, "", "ETag: \"p2\"\r\n"),
      ScriptedHttpServer::Answer(500, ""),
      ScriptedHttpServer::Answer(404, "<Error><Code>NoSuchUpload</Code></Error>"),
      absl::StrCat("HTTP/1.1 200 OK\r\nContent-Length: ", size, "\r\nConnection: close\r\n\r\n"),
  });
  options.endpoint = server.endpoint();
  auto fs = S3FileSystem::Open("s3://bucket", options);
  ASSERT_TRUE(fs.ok()) << fs.status();
  absl::Status status = (*fs)->Write("big", std::string(size, 'z'), WriteMode::kOverwrite);
  std::vector<std::string> lines = server.request_lines();
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_THAT(lines[5], testing::StartsWith("HEAD /bucket/big "));
  EXPECT_TRUE(status.ok()) << status;
}

TEST(S3RetryTest, AnEndpointNobodyListensOnIsRetriedThenReported) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  // Bound but not listening: connections are refused.
  S3Options options = FastRetryOptions(absl::StrCat("http://127.0.0.1:", ntohs(addr.sin_port)));
  options.max_attempts = 3;
  auto fs = S3FileSystem::Open("s3://bucket", options);
  ASSERT_TRUE(fs.ok()) << fs.status();
  absl::StatusOr<FileInfo> info = (*fs)->Stat("k");
  ::close(fd);
  EXPECT_TRUE(absl::IsUnavailable(info.status())) << info.status();
  EXPECT_THAT(info.status().message(), HasSubstr("cannot reach http://127.0.0.1:"));
  EXPECT_THAT(info.status().message(), HasSubstr("3 tries"));
}

// ---------------------------------------------------------------- options

EnvLookup Env(std::vector<std::pair<std::string, std::string>> vars) {
  return [vars = std::move(vars)](absl::string_view name) -> std::optional<std::string> {
    for (const auto& [k, v] : vars) {
      if (k == name) return v;
    }
    return std::nullopt;
  };
}

TEST(S3OptionsTest, EnvironmentVariables) {
  absl::StatusOr<S3Options> options =
      ResolveS3Options(nullptr, Env({{"AWS_ACCESS_KEY_ID", "ak"}, {"AWS_SECRET_ACCESS_KEY", "sk"},
                                     {"AWS_SESSION_TOKEN", "st"}, {"AWS_DEFAULT_REGION", "eu-west-1"},
                                     {"AWS_ENDPOINT_URL", "http://127.0.0.1:9000/"}, {"HOME", "/nonexistent"}}));
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->access_key, "ak");
  EXPECT_EQ(options->secret_key, "sk");
  EXPECT_EQ(options->session_token, "st");
  EXPECT_EQ(options->region, "eu-west-1");
  EXPECT_EQ(options->endpoint, "http://127.0.0.1:9000");
}

TEST(S3OptionsTest, SharedCredentialsFileAndProfile) {
  std::string file = absl::StrCat(::testing::TempDir(), "/credentials");
  FILE* f = std::fopen(file.c_str(), "w");
  std::fputs("[default]\naws_access_key_id=d1\naws_secret_access_key=d2\n\n# other\n[ci]\n"
             "aws_access_key_id = c1\naws_secret_access_key = c2\naws_session_token = c3\n", f);
  std::fclose(f);
  absl::StatusOr<S3Options> options =
      ResolveS3Options(nullptr, Env({{"AWS_SHARED_CREDENTIALS_FILE", file}, {"AWS_PROFILE", "ci"}}));
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->access_key, "c1");
  EXPECT_EQ(options->secret_key, "c2");
  EXPECT_EQ(options->session_token, "c3");
  options = ResolveS3Options(nullptr, Env({{"AWS_SHARED_CREDENTIALS_FILE", file}}));
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->access_key, "d1");
  absl::StatusOr<S3Options> missing =
      ResolveS3Options(nullptr, Env({{"AWS_SHARED_CREDENTIALS_FILE", file}, {"AWS_PROFILE", "nope"}}));
  EXPECT_THAT(missing.status().message(), HasSubstr("no profile [nope]"));
}

TEST(S3OptionsTest, HalfAKeyPairIsRefused) {
  absl::StatusOr<S3Options> options = ResolveS3Options(nullptr, Env({{"AWS_ACCESS_KEY_ID", "ak"}}));
  EXPECT_TRUE(absl::IsInvalidArgument(options.status()));
  EXPECT_THAT(options.status().message(), HasSubstr("AWS_SECRET_ACCESS_KEY"));
}

TEST(S3OptionsTest, OpenRefusesBadUrisAndSettings) {
  S3Options options = FastRetryOptions("http://127.0.0.1:1");
  EXPECT_THAT(S3FileSystem::Open("s3://B_ad", options).status().message(), HasSubstr("is not a bucket name"));
  EXPECT_THAT(S3FileSystem::Open("s3://bucket/a//b", options).status().message(), HasSubstr("empty"));
  options.part_size = 1 << 20;
  EXPECT_THAT(S3FileSystem::Open("s3://bucket", options).status().message(), HasSubstr("s3.upload.part-size"));
  options = FastRetryOptions("ftp://x");
  EXPECT_THAT(S3FileSystem::Open("s3://bucket", options).status().message(), HasSubstr("http:// or https://"));
  options = FastRetryOptions("http://x");
  options.access_key.clear();
  options.secret_key.clear();
  EXPECT_THAT(S3FileSystem::Open("s3://bucket", options).status().message(), HasSubstr("no S3 credentials"));
}

}  // namespace
}  // namespace weir::fs
