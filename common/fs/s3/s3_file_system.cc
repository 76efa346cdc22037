#include "common/crypto/sha256.h"
#include "common/fs/s3/s3_file_system.h"

#include <curl/curl.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "common/config/configuration.h"
#include "common/config/options.h"
#include "common/fs/s3/sigv4.h"
#include "common/fs/s3/xml.h"
#include "common/logging/logging.h"
#include "common/status_macros.h"

namespace weir::fs {
namespace {

constexpr int64_t kMinPartSize = int64_t{5} << 20;
constexpr int64_t kMaxPartSize = int64_t{5} << 30;
constexpr int kMaxParts = 10000;
constexpr int64_t kMaxErrorBody = 64 << 10;
constexpr size_t kDeleteBatch = 1000;

std::shared_ptr<spdlog::logger> Log() {
  static auto logger = logging::Get("fs");
  return logger;
}

void InitCurlOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string XmlEscape(absl::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

std::string Base64Md5(absl::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), digest, &len, EVP_md5(), nullptr);
  return absl::Base64Escape(absl::string_view(reinterpret_cast<const char*>(digest), len));
}

// ---------------------------------------------------------------- HTTP over curl

struct HttpResponse {
  long status = 0;
  std::string body;
  bool body_truncated = false;  // more than the bound arrived
  std::vector<std::pair<std::string, std::string>> headers;  // names lower case

  std::string Header(absl::string_view name) const {
    for (const auto& [n, v] : headers) {
      if (n == name) return v;
    }
    return "";
  }
};

struct Transfer {
  absl::string_view upload;
  size_t upload_pos = 0;
  HttpResponse* response;
  int64_t max_body;
};

size_t WriteBody(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t bytes = size * n;
  if (static_cast<int64_t>(t->response->body.size() + bytes) > t->max_body) {
    t->response->body_truncated = true;
    return 0;  // curl stops with CURLE_WRITE_ERROR
  }
  t->response->body.append(data, bytes);
  return bytes;
}

size_t ReadBody(char* buffer, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t bytes = std::min(size * n, t->upload.size() - t->upload_pos);
  std::memcpy(buffer, t->upload.data() + t->upload_pos, bytes);
  t->upload_pos += bytes;
  return bytes;
}

size_t WriteHeader(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  absl::string_view line(data, size * n);
  size_t colon = line.find(':');
  if (colon != absl::string_view::npos && t->response->headers.size() < 200) {
    t->response->headers.emplace_back(absl::AsciiStrToLower(line.substr(0, colon)),
                                      std::string(absl::StripAsciiWhitespace(line.substr(colon + 1))));
  } else if (absl::StartsWith(line, "HTTP/")) {
    t->response->headers.clear();  // a new response (after a 100 Continue)
  }
  return size * n;
}

// Idle curl handles (each keeps its connections alive). Thread-safe.
class CurlPool {
 public:
  explicit CurlPool(int max_idle) : max_idle_(max_idle) {}
  ~CurlPool() {
    for (CURL* h : idle_) curl_easy_cleanup(h);
  }

  CURL* Acquire() ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      if (!idle_.empty()) {
        CURL* h = idle_.back();
        idle_.pop_back();
        return h;
      }
    }
    return curl_easy_init();
  }

  void Release(CURL* h) ABSL_LOCKS_EXCLUDED(mu_) {
    curl_easy_reset(h);
    absl::MutexLock lock(&mu_);
    if (static_cast<int>(idle_.size()) < max_idle_) {
      idle_.push_back(h);
      return;
    }
    curl_easy_cleanup(h);
  }

 private:
  const int max_idle_;
  absl::Mutex mu_;
  std::vector<CURL*> idle_ ABSL_GUARDED_BY(mu_);
};

// ---------------------------------------------------------------- credentials file

// The keys of [profile] in an AWS shared credentials file (INI).
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ReadCredentialsProfile(const std::string& file,
                                                                                         absl::string_view profile) {
  std::ifstream in(file);
  if (!in) return absl::NotFoundError(absl::StrCat("no credentials file ", file));
  std::vector<std::pair<std::string, std::string>> out;
  std::string line;
  bool in_profile = false, found = false;
  while (std::getline(in, line)) {
    absl::string_view l = absl::StripAsciiWhitespace(line);
    if (l.empty() || l[0] == '#' || l[0] == ';') continue;
    if (l.front() == '[' && l.back() == ']') {
      in_profile = absl::StripAsciiWhitespace(l.substr(1, l.size() - 2)) == profile;
      found = found || in_profile;
      continue;
    }
    if (!in_profile) continue;
    size_t eq = l.find('=');
    if (eq == absl::string_view::npos) continue;
    out.emplace_back(std::string(absl::StripAsciiWhitespace(l.substr(0, eq))),
                     std::string(absl::StripAsciiWhitespace(l.substr(eq + 1))));
  }
  if (!found) return absl::NotFoundError(absl::StrCat("no profile [", profile, "] in ", file));
  return out;
}

}  // namespace

// ---------------------------------------------------------------- options

absl::Status S3Options::Validate() const {
  if (part_size < kMinPartSize || part_size > kMaxPartSize) {
    return absl::InvalidArgumentError(absl::StrCat("s3.upload.part-size is ", part_size,
                                                   " bytes; S3 needs parts of 5 MiB to 5 GiB"));
  }
  if (region.empty()) return absl::InvalidArgumentError("the S3 region is empty (s3.region, AWS_REGION)");
  if (!endpoint.empty() && !absl::StartsWith(endpoint, "http://") && !absl::StartsWith(endpoint, "https://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("s3.endpoint '", endpoint, "' must start with http:// or https://"));
  }
  if (access_key.empty() != secret_key.empty()) {
    return absl::InvalidArgumentError("an S3 access key needs its secret key and the other way round");
  }
  if (max_attempts < 1) return absl::InvalidArgumentError("S3 max_attempts must be at least 1");
  return backoff.Validate();
}

EnvLookup ProcessEnvironment() {
  return [](absl::string_view name) -> std::optional<std::string> {
    const char* value = std::getenv(std::string(name).c_str());
    if (value == nullptr || *value == '\0') return std::nullopt;
    return std::string(value);
  };
}

absl::StatusOr<S3Options> ResolveS3Options(const config::Configuration* config, const EnvLookup& env) {
  S3Options options;
  auto from_config = [&](absl::string_view key) -> std::optional<std::string> {
    if (config == nullptr || !config->IsSet(key)) return std::nullopt;
    return config->GetString(key);
  };
  auto first = [](std::initializer_list<std::optional<std::string>> candidates) -> std::optional<std::string> {
    for (const auto& c : candidates) {
      if (c.has_value() && !c->empty()) return c;
    }
    return std::nullopt;
  };

  if (auto v = first({from_config(config::keys::kS3Endpoint), env("AWS_ENDPOINT_URL_S3"), env("AWS_ENDPOINT_URL")})) {
    options.endpoint = *v;
  }
  while (!options.endpoint.empty() && options.endpoint.back() == '/') options.endpoint.pop_back();
  if (auto v = first({from_config(config::keys::kS3Region), env("AWS_REGION"), env("AWS_DEFAULT_REGION")})) {
    options.region = *v;
  }
  if (config != nullptr) {
    options.path_style = config->GetBool(config::keys::kS3PathStyleAccess);
    options.part_size = config->GetMemorySize(config::keys::kS3UploadPartSize);
    options.sign_payload = config->GetBool(config::keys::kS3UploadSignPayload);
  }

  std::optional<std::string> key = from_config(config::keys::kS3AccessKey);
  std::optional<std::string> secret = from_config(config::keys::kS3SecretKey);
  if (key.has_value() || secret.has_value()) {
    if (!key.has_value() || !secret.has_value()) {
      return absl::InvalidArgumentError("s3.access-key and s3.secret-key must be set together");
    }
    options.access_key = *key;
    options.secret_key = *secret;
  } else if (env("AWS_ACCESS_KEY_ID") || env("AWS_SECRET_ACCESS_KEY")) {
    if (!env("AWS_ACCESS_KEY_ID") || !env("AWS_SECRET_ACCESS_KEY")) {
      return absl::InvalidArgumentError("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set together");
    }
    options.access_key = *env("AWS_ACCESS_KEY_ID");
    options.secret_key = *env("AWS_SECRET_ACCESS_KEY");
    options.session_token = env("AWS_SESSION_TOKEN").value_or("");
  } else {
    std::optional<std::string> file = env("AWS_SHARED_CREDENTIALS_FILE");
    if (!file.has_value()) {
      if (auto home = env("HOME")) file = absl::StrCat(*home, "/.aws/credentials");
    }
    const std::string profile = env("AWS_PROFILE").value_or("default");
    if (file.has_value()) {
      absl::StatusOr<std::vector<std::pair<std::string, std::string>>> entries =
          ReadCredentialsProfile(*file, profile);
      if (entries.ok()) {
        for (const auto& [k, v] : *entries) {
          if (k == "aws_access_key_id") options.access_key = v;
          if (k == "aws_secret_access_key") options.secret_key = v;
          if (k == "aws_session_token") options.session_token = v;
        }
        if (options.access_key.empty() || options.secret_key.empty()) {
          return absl::InvalidArgumentError(absl::StrCat("profile [", profile, "] of ", *file,
                                                         " needs aws_access_key_id and aws_secret_access_key"));
        }
      } else if (env("AWS_SHARED_CREDENTIALS_FILE") || env("AWS_PROFILE")) {
        // Asked for explicitly, so its absence is an error.
        return Annotate(entries.status(), "reading S3 credentials");
      }
    }
  }
  RETURN_IF_ERROR(options.Validate());
  return options;
}

// ---------------------------------------------------------------- the client

struct S3FileSystem::Impl {
  S3Options options;
  std::string bucket;
  std::string prefix;  // "" or "a/b" (no trailing '/')
  std::string scheme;  // "http" / "https"
  std::string host;    // of the endpoint, with port
  CurlPool pool;

  Impl(S3Options o, std::string b, std::string p, std::string s, std::string h)
      : options(std::move(o)), bucket(std::move(b)), prefix(std::move(p)), scheme(std::move(s)), host(std::move(h)),
        pool(options.max_idle_connections) {}

  struct Request {
    std::string method;
    std::string key;  // "" for bucket-level requests
    std::vector<std::pair<std::string, std::string>> query;
    std::vector<std::pair<std::string, std::string>> headers;
    absl::string_view body;
    int64_t max_response = kMaxErrorBody;
    bool head = false;
    // An object's contents (PUT, UploadPart): sent with its Content-MD5, and
    // as UNSIGNED-PAYLOAD unless options.sign_payload.
    bool object_body = false;
  };

  std::string KeyOf(absl::string_view path) const {
    return prefix.empty() ? std::string(path) : absl::StrCat(prefix, "/", path);
  }

  std::string Describe(absl::string_view key) const { return absl::StrCat("s3://", bucket, "/", key); }

  // One try: transport errors are kUnavailable; any HTTP status is a response.
  absl::StatusOr<HttpResponse> Perform(const Request& r) {
    std::string request_host = options.path_style ? host : absl::StrCat(bucket, ".", host);
    // Bucket-level requests go to "/bucket" (path style) or "/" (virtual host).
    std::string path = !options.path_style ? r.key : r.key.empty() ? bucket : absl::StrCat(bucket, "/", r.key);
    s3::SigningRequest signing;
    signing.method = r.method;
    signing.encoded_path = s3::UriEncodePath(path);
    signing.query = r.query;
    signing.headers = r.headers;
    signing.host = request_host;
    if (r.object_body) {
      // The digest is a signed header: neither it nor the body can change
      // unnoticed (the store answers BadDigest).
      signing.headers.emplace_back("Content-MD5", Base64Md5(r.body));
      signing.payload_hash = options.sign_payload ? crypto::Sha256Hex(r.body) : "UNSIGNED-PAYLOAD";
    } else {
      signing.payload_hash = crypto::Sha256Hex(r.body);
    }
    s3::SigningCredentials credentials{options.access_key, options.secret_key, options.session_token};
    s3::SignedHeaders signed_headers = s3::Sign(signing, credentials, options.region, absl::Now());

    std::string url = absl::StrCat(scheme, "://", request_host, signing.encoded_path);
    std::string query = s3::CanonicalQueryString(r.query);
    if (!query.empty()) absl::StrAppend(&url, "?", query);

    curl_slist* list = nullptr;
    for (const auto& [name, value] : signed_headers.headers) {
      list = curl_slist_append(list, absl::StrCat(name, ": ", value).c_str());
    }
    list = curl_slist_append(list, "Expect:");  // no 100-continue round trip
    if (!r.body.empty() || r.method == "PUT" || r.method == "POST") {
      list = curl_slist_append(list, "Content-Type: application/octet-stream");
    }

    HttpResponse response;
    Transfer transfer{r.body, 0, &response, r.max_response};
    CURL* h = pool.Acquire();
    if (h == nullptr) {
      curl_slist_free_all(list);
      return absl::ResourceExhaustedError("curl_easy_init failed");
    }
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, list);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(absl::ToInt64Milliseconds(options.connect_timeout)));
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, static_cast<long>(absl::ToInt64Seconds(options.low_speed_timeout)));
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, WriteBody);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &transfer);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, WriteHeader);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &transfer);
    if (r.head) {
      curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (r.method == "PUT") {
      curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(h, CURLOPT_READFUNCTION, ReadBody);
      curl_easy_setopt(h, CURLOPT_READDATA, &transfer);
      curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
    } else if (r.method == "POST") {
      curl_easy_setopt(h, CURLOPT_POST, 1L);
      curl_easy_setopt(h, CURLOPT_POSTFIELDS, r.body.data());
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
    } else if (r.method != "GET") {
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, r.method.c_str());
    }
    CURLcode rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &response.status);
    pool.Release(h);
    curl_slist_free_all(list);
    if (rc == CURLE_WRITE_ERROR && response.body_truncated) return response;
    if (rc != CURLE_OK) {
      return absl::UnavailableError(absl::StrCat("cannot reach ", scheme, "://", request_host, ": ",
                                                 curl_easy_strerror(rc), " (curl ", static_cast<int>(rc), ")"));
    }
    return response;
  }

  // The status for a non-2xx response: the code by meaning, the message
  // naming the request, the HTTP status, S3's code and what to do.
  absl::Status ErrorOf(const Request& r, const HttpResponse& response) const {
    std::string code, message;
    if (!response.body.empty() && !response.body_truncated) {
      absl::StatusOr<s3::XmlElement> xml = s3::ParseXml(response.body);
      if (xml.ok() && xml->name == "Error") {
        code = xml->ChildText("Code");
        message = xml->ChildText("Message");
      }
    }
    const long status = response.status;
    std::string what = absl::StrCat(r.method, " ", r.key.empty() ? absl::StrCat("s3://", bucket) : Describe(r.key),
                                     ": HTTP ", status);
    if (!code.empty()) absl::StrAppend(&what, " ", code);
    if (!message.empty()) absl::StrAppend(&what, " (", message, ")");
    // BadDigest: the body arrived other than its Content-MD5 says (it was
    // computed from the bytes sent), so it was damaged on the way.
    if (status >= 500 || status == 429 || code == "SlowDown" || code == "RequestTimeout" ||
        code == "InternalError" || code == "BadDigest") {
      return absl::UnavailableError(absl::StrCat(what, "; the store is busy or failing"));
    }
    if (status == 403) {
      return absl::PermissionDeniedError(absl::StrCat(
          what, "; check the access key and secret key (s3.access-key, s3.secret-key, AWS_ACCESS_KEY_ID, "
                "AWS_SECRET_ACCESS_KEY or the credentials file), the region (s3.region) and the bucket's policy"));
    }
    if (code == "NoSuchBucket") {
      return absl::FailedPreconditionError(
          absl::StrCat(what, "; bucket '", bucket, "' does not exist: create it or fix the URI"));
    }
    if (status == 404) {
      return absl::NotFoundError(absl::StrCat(what, code.empty() ? "; the object (or its bucket) does not exist" : ""));
    }
    if (status == 412) {
      return absl::AlreadyExistsError(absl::StrCat(what, "; the object already exists and is never overwritten"));
    }
    if (status == 409) return absl::AbortedError(absl::StrCat(what, "; a concurrent request on the same object"));
    return absl::FailedPreconditionError(what);
  }

  // Sends `r` until it succeeds (2xx) or fails for good.
  absl::StatusOr<HttpResponse> Execute(const Request& r) {
    HttpResponse last;
    retry::RetryPolicy policy;
    policy.backoff = options.backoff;
    policy.max_attempts = options.max_attempts;
    policy.deadline = absl::Now() + options.retry_deadline;
    retry::RetryOutcome outcome = retry::Retry(
        policy,
        [&]() -> absl::Status {
          absl::StatusOr<HttpResponse> response = Perform(r);
          if (!response.ok()) return response.status();
          last = *std::move(response);
          if (last.status >= 200 && last.status < 300) return absl::OkStatus();
          return ErrorOf(r, last);
        },
        [](const absl::Status& s) { return absl::IsUnavailable(s); },
        [&](const absl::Status& s, absl::Duration wait) {
          Log()->warn("S3 request failed, retrying in {}: {}", absl::FormatDuration(wait), s.message());
        });
    if (!outcome.status.ok()) {
      if (outcome.attempts > 1) return Annotate(outcome.status, absl::StrCat("after ", outcome.Summary()));
      return outcome.status;
    }
    return last;
  }

  absl::StatusOr<s3::XmlElement> ParseBody(const Request& r, const HttpResponse& response) const {
    if (response.body_truncated) {
      return absl::ResourceExhaustedError(
          absl::StrCat(r.method, " ", Describe(r.key), ": response larger than ", r.max_response, " bytes"));
    }
    s3::XmlLimits limits;
    limits.max_bytes = options.max_xml_bytes;
    absl::StatusOr<s3::XmlElement> xml = s3::ParseXml(response.body, limits);
    if (!xml.ok()) return Annotate(xml.status(), absl::StrCat(r.method, " ", Describe(r.key), ": reading the answer"));
    return xml;
  }

  absl::Status Put(const std::string& key, absl::string_view body, WriteMode mode) {
    Request r{.method = "PUT", .key = key, .body = body, .object_body = true};
    if (mode == WriteMode::kCreateNew) r.headers.emplace_back("If-None-Match", "*");
    return Execute(r).status();
  }

  absl::StatusOr<std::string> InitiateMultipart(const std::string& key) {
    Request r{.method = "POST", .key = key, .query = {{"uploads", ""}}, .max_response = options.max_xml_bytes};
    ASSIGN_OR_RETURN(HttpResponse response, Execute(r));
    ASSIGN_OR_RETURN(s3::XmlElement xml, ParseBody(r, response));
    std::string id = xml.ChildText("UploadId");
    if (id.empty()) return absl::InternalError(absl::StrCat("POST ", Describe(key), "?uploads: no UploadId in the answer"));
    return id;
  }

  absl::StatusOr<std::string> UploadPart(const std::string& key, const std::string& upload_id, int part,
                                         absl::string_view body) {
    Request r{.method = "PUT", .key = key, .query = {{"partNumber", absl::StrCat(part)}, {"uploadId", upload_id}},
              .body = body, .object_body = true};
    ASSIGN_OR_RETURN(HttpResponse response, Execute(r));
    std::string etag = response.Header("etag");
    if (etag.empty()) return absl::InternalError(absl::StrCat("part ", part, " of ", Describe(key), ": no ETag"));
    return etag;
  }

  absl::Status CompleteMultipart(const std::string& key, const std::string& upload_id,
                                 const std::vector<std::string>& etags, WriteMode mode) {
    std::string body = "<CompleteMultipartUpload>";
    for (size_t i = 0; i < etags.size(); ++i) {
      absl::StrAppend(&body, "<Part><PartNumber>", i + 1, "</PartNumber><ETag>", XmlEscape(etags[i]), "</ETag></Part>");
    }
    absl::StrAppend(&body, "</CompleteMultipartUpload>");
    Request r{.method = "POST", .key = key, .query = {{"uploadId", upload_id}}, .body = body,
              .max_response = options.max_xml_bytes};
    if (mode == WriteMode::kCreateNew) r.headers.emplace_back("If-None-Match", "*");
    ASSIGN_OR_RETURN(HttpResponse response, Execute(r));
    // S3 may answer 200 and report the failure in the body.
    ASSIGN_OR_RETURN(s3::XmlElement xml, ParseBody(r, response));
    if (xml.name == "Error") {
      HttpResponse as_error = response;
      as_error.status = xml.ChildText("Code") == "SlowDown" ? 503 : 500;
      return ErrorOf(r, as_error);
    }
    return absl::OkStatus();
  }

  // The object's size (HEAD).
  absl::StatusOr<int64_t> Size(const std::string& key) {
    Request r{.method = "HEAD", .key = key, .head = true};
    ASSIGN_OR_RETURN(HttpResponse response, Execute(r));
    int64_t size = 0;
    if (!absl::SimpleAtoi(response.Header("content-length"), &size)) {
      return absl::InternalError(absl::StrCat("HEAD ", Describe(key), ": no Content-Length"));
    }
    return size;
  }

  void AbortMultipart(const std::string& key, const std::string& upload_id) {
    Request r{.method = "DELETE", .key = key, .query = {{"uploadId", upload_id}}};
    absl::Status status = Execute(r).status();
    if (!status.ok() && !absl::IsNotFound(status)) {
      Log()->warn("could not abort the multipart upload {} of {} (a lifecycle rule on incomplete uploads "
                  "collects it): {}", upload_id, Describe(key), status.message());
    } else {
      Log()->info("aborted the multipart upload {} of {}", upload_id, Describe(key));
    }
  }
};

namespace {

// Buffers up to a part; one PUT when the file fits in one, a multipart upload
// otherwise (aborted on failure).
class S3FileWriter final : public FileWriter {
 public:
  S3FileWriter(S3FileSystem::Impl* impl, std::string key, WriteMode mode)
      : impl_(impl), key_(std::move(key)), mode_(mode) {}
  ~S3FileWriter() override { (void)Abort(); }

  absl::Status Append(absl::string_view data) override {
    if (done_) return absl::FailedPreconditionError(absl::StrCat("writer of ", impl_->Describe(key_), " is closed"));
    const int64_t part_size = impl_->options.part_size;
    while (!data.empty()) {
      size_t take = std::min<size_t>(data.size(), static_cast<size_t>(part_size) - buffer_.size());
      buffer_.append(data.data(), take);
      data.remove_prefix(take);
      written_ += static_cast<int64_t>(take);
      // A full part goes out only once more data follows, so that the last
      // part is never empty and a file of exactly one part is one PUT.
      if (static_cast<int64_t>(buffer_.size()) == part_size && !data.empty()) {
        if (absl::Status s = FlushPart(); !s.ok()) return Fail(s);
      }
    }
    return absl::OkStatus();
  }

  absl::Status Close() override {
    if (done_) return absl::FailedPreconditionError(absl::StrCat("writer of ", impl_->Describe(key_), " is closed"));
    if (upload_id_.empty()) {
      done_ = true;
      absl::Status s = impl_->Put(key_, buffer_, mode_);
      buffer_.clear();
      return s;
    }
    if (!buffer_.empty()) {
      if (absl::Status s = FlushPart(); !s.ok()) return Fail(s);
    }
    absl::Status s = impl_->CompleteMultipart(key_, upload_id_, etags_, mode_);
    if (absl::IsNotFound(s) && absl::StrContains(s.message(), "NoSuchUpload")) {
      // A completion retried after the first one took effect unseen finds
      // the upload gone: the object of the size written is this upload's.
      absl::StatusOr<int64_t> size = impl_->Size(key_);
      if (size.ok() && *size == written_) {
        Log()->info("the multipart upload {} of {} was completed by an earlier try", upload_id_,
                    impl_->Describe(key_));
        s = absl::OkStatus();
      }
    }
    if (!s.ok()) return Fail(s);
    done_ = true;
    return absl::OkStatus();
  }

  absl::Status Abort() override {
    if (done_) return absl::OkStatus();
    done_ = true;
    buffer_.clear();
    if (!upload_id_.empty()) impl_->AbortMultipart(key_, upload_id_);
    return absl::OkStatus();
  }

  int64_t bytes_written() const override { return written_; }

 private:
  absl::Status FlushPart() {
    if (upload_id_.empty()) {
      ASSIGN_OR_RETURN(upload_id_, impl_->InitiateMultipart(key_));
      Log()->debug("started the multipart upload {} of {}", upload_id_, impl_->Describe(key_));
    }
    if (static_cast<int>(etags_.size()) >= kMaxParts) {
      return absl::ResourceExhaustedError(absl::StrCat(impl_->Describe(key_), " needs more than ", kMaxParts,
                                                       " parts; raise s3.upload.part-size"));
    }
    ASSIGN_OR_RETURN(std::string etag,
                     impl_->UploadPart(key_, upload_id_, static_cast<int>(etags_.size()) + 1, buffer_));
    etags_.push_back(std::move(etag));
    buffer_.clear();
    return absl::OkStatus();
  }

  absl::Status Fail(absl::Status status) {
    (void)Abort();
    return status;
  }

  S3FileSystem::Impl* impl_;
  const std::string key_;
  const WriteMode mode_;
  std::string buffer_;
  std::string upload_id_;
  std::vector<std::string> etags_;
  int64_t written_ = 0;
  bool done_ = false;
};

}  // namespace

// ---------------------------------------------------------------- S3FileSystem

S3FileSystem::S3FileSystem(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
S3FileSystem::~S3FileSystem() = default;

absl::StatusOr<std::unique_ptr<S3FileSystem>> S3FileSystem::Open(absl::string_view uri, S3Options options) {
  RETURN_IF_ERROR(options.Validate());
  absl::string_view rest = uri;
  if (!absl::ConsumePrefix(&rest, "s3://")) {
    return absl::InvalidArgumentError(absl::StrCat("'", uri, "' is not an s3://bucket/prefix URI"));
  }
  size_t slash = rest.find('/');
  std::string bucket(rest.substr(0, slash));
  std::string prefix(slash == absl::string_view::npos ? "" : rest.substr(slash + 1));
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  if (bucket.size() < 3 || bucket.size() > 63 ||
      !std::all_of(bucket.begin(), bucket.end(),
                   [](char c) { return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-' || c == '.'; })) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", bucket, "' in '", uri, "' is not a bucket name (3 to 63 characters from a-z 0-9 . -)"));
  }
  if (!prefix.empty()) RETURN_IF_ERROR(Annotate(ValidatePath(prefix), absl::StrCat("the prefix of ", uri)));
  std::string endpoint = options.endpoint.empty() ? absl::StrCat("https://s3.", options.region, ".amazonaws.com")
                                                  : options.endpoint;
  size_t colon = endpoint.find("://");
  std::string scheme = endpoint.substr(0, colon);
  std::string host = endpoint.substr(colon + 3);
  if (host.empty() || absl::StrContains(host, '/')) {
    return absl::InvalidArgumentError(absl::StrCat("s3.endpoint '", endpoint, "' must be scheme://host[:port] alone"));
  }
  if (options.access_key.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no S3 credentials for ", uri, ": set s3.access-key and s3.secret-key, AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY, or a profile in ~/.aws/credentials"));
  }
  InitCurlOnce();
  Log()->info("opened {} (endpoint {}, region {}, {} addressing, parts of {} bytes)", uri, endpoint, options.region,
              options.path_style ? "path-style" : "virtual-host-style", options.part_size);
  return std::unique_ptr<S3FileSystem>(new S3FileSystem(std::make_unique<Impl>(
      std::move(options), std::move(bucket), std::move(prefix), std::move(scheme), std::move(host))));
}

std::string S3FileSystem::Uri() const {
  return impl_->prefix.empty() ? absl::StrCat("s3://", impl_->bucket) : absl::StrCat("s3://", impl_->bucket, "/", impl_->prefix);
}

absl::Status S3FileSystem::Write(absl::string_view path, absl::string_view contents, WriteMode mode) {
  RETURN_IF_ERROR(ValidatePath(path));
  if (static_cast<int64_t>(contents.size()) <= impl_->options.part_size) {
    return impl_->Put(impl_->KeyOf(path), contents, mode);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<FileWriter> writer, NewWriter(path, mode));
  RETURN_IF_ERROR(writer->Append(contents));
  return writer->Close();
}

absl::StatusOr<std::unique_ptr<FileWriter>> S3FileSystem::NewWriter(absl::string_view path, WriteMode mode) {
  RETURN_IF_ERROR(ValidatePath(path));
  return std::unique_ptr<FileWriter>(new S3FileWriter(impl_.get(), impl_->KeyOf(path), mode));
}

absl::StatusOr<std::string> S3FileSystem::ReadFile(absl::string_view path, int64_t max_bytes) {
  RETURN_IF_ERROR(ValidatePath(path));
  Impl::Request r{.method = "GET", .key = impl_->KeyOf(path), .max_response = max_bytes};
  ASSIGN_OR_RETURN(HttpResponse response, impl_->Execute(r));
  if (response.body_truncated) {
    return absl::ResourceExhaustedError(
        absl::StrCat(impl_->Describe(r.key), " holds more than the ", max_bytes, " bytes expected"));
  }
  return std::move(response.body);
}

absl::StatusOr<std::string> S3FileSystem::ReadRange(absl::string_view path, int64_t offset, int64_t length) {
  RETURN_IF_ERROR(ValidatePath(path));
  if (offset < 0 || length < 0) return absl::InvalidArgumentError("a range needs offset >= 0 and length >= 0");
  if (length == 0) return std::string();
  Impl::Request r{.method = "GET", .key = impl_->KeyOf(path), .max_response = length};
  r.headers.emplace_back("Range", absl::StrCat("bytes=", offset, "-", offset + length - 1));
  absl::StatusOr<HttpResponse> response = impl_->Execute(r);
  if (!response.ok()) {
    // 416: the range starts at or past the end.
    if (absl::StrContains(response.status().message(), "HTTP 416")) return std::string();
    return response.status();
  }
  if (response->body_truncated) {
    return absl::DataLossError(absl::StrCat(impl_->Describe(r.key), ": the server sent more than the range asked"));
  }
  if (response->status == 200 && offset > 0) {
    return absl::DataLossError(absl::StrCat(impl_->Describe(r.key), ": the server ignored the Range header"));
  }
  return std::move(response->body);
}

absl::StatusOr<FileInfo> S3FileSystem::Stat(absl::string_view path) {
  RETURN_IF_ERROR(ValidatePath(path));
  ASSIGN_OR_RETURN(int64_t size, impl_->Size(impl_->KeyOf(path)));
  return FileInfo{std::string(path), size};
}

absl::StatusOr<std::vector<FileInfo>> S3FileSystem::List(absl::string_view prefix) {
  std::string key_prefix = impl_->prefix.empty() ? std::string(prefix) : absl::StrCat(impl_->prefix, "/", prefix);
  const size_t strip = impl_->prefix.empty() ? 0 : impl_->prefix.size() + 1;
  std::vector<FileInfo> out;
  std::string token;
  while (true) {
    Impl::Request r{.method = "GET", .query = {{"list-type", "2"}, {"prefix", key_prefix}},
                    .max_response = impl_->options.max_xml_bytes};
    if (!token.empty()) r.query.emplace_back("continuation-token", token);
    ASSIGN_OR_RETURN(HttpResponse response, impl_->Execute(r));
    ASSIGN_OR_RETURN(s3::XmlElement xml, impl_->ParseBody(r, response));
    for (const s3::XmlElement& child : xml.children) {
      if (child.name != "Contents") continue;
      std::string key = child.ChildText("Key");
      int64_t size = 0;
      if (!absl::StartsWith(key, key_prefix) || !absl::SimpleAtoi(child.ChildText("Size"), &size)) {
        return absl::InternalError(absl::StrCat("listing s3://", impl_->bucket, "/", key_prefix,
                                                ": an entry that does not fit the prefix or has no size: ", key));
      }
      out.push_back(FileInfo{key.substr(strip), size});
    }
    if (xml.ChildText("IsTruncated") != "true") break;
    std::string next = xml.ChildText("NextContinuationToken");
    if (next.empty() || next == token) {
      return absl::InternalError(absl::StrCat("listing s3://", impl_->bucket, "/", key_prefix,
                                              ": truncated answer without a new continuation token"));
    }
    token = std::move(next);
  }
  std::sort(out.begin(), out.end(), [](const FileInfo& a, const FileInfo& b) { return a.path < b.path; });
  return out;
}

absl::Status S3FileSystem::Delete(absl::string_view path) {
  RETURN_IF_ERROR(ValidatePath(path));
  Impl::Request r{.method = "DELETE", .key = impl_->KeyOf(path)};
  absl::Status status = impl_->Execute(r).status();
  if (absl::IsNotFound(status)) return absl::OkStatus();
  return status;
}

absl::Status S3FileSystem::DeleteMany(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) RETURN_IF_ERROR(ValidatePath(path));
  for (size_t begin = 0; begin < paths.size(); begin += kDeleteBatch) {
    size_t end = std::min(paths.size(), begin + kDeleteBatch);
    std::string body = "<Delete><Quiet>true</Quiet>";
    for (size_t i = begin; i < end; ++i) {
      absl::StrAppend(&body, "<Object><Key>", XmlEscape(impl_->KeyOf(paths[i])), "</Key></Object>");
    }
    absl::StrAppend(&body, "</Delete>");
    Impl::Request r{.method = "POST", .query = {{"delete", ""}}, .body = body,
                    .max_response = impl_->options.max_xml_bytes};
    r.headers.emplace_back("Content-MD5", Base64Md5(body));
    ASSIGN_OR_RETURN(HttpResponse response, impl_->Execute(r));
    ASSIGN_OR_RETURN(s3::XmlElement xml, impl_->ParseBody(r, response));
    int failed = 0;
    std::string first;
    for (const s3::XmlElement& child : xml.children) {
      if (child.name != "Error") continue;
      if (child.ChildText("Code") == "NoSuchKey") continue;
      if (failed++ == 0) first = absl::StrCat(child.ChildText("Key"), ": ", child.ChildText("Code"), " ", child.ChildText("Message"));
    }
    if (failed > 0) {
      return absl::UnavailableError(absl::StrCat("deleting from s3://", impl_->bucket, ": ", failed, " of ",
                                                 end - begin, " keys not deleted; the first: ", first));
    }
  }
  return absl::OkStatus();
}

absl::Status S3FileSystem::CreateBucket() {
  std::string body;
  if (impl_->options.region != "us-east-1") {
    body = absl::StrCat("<CreateBucketConfiguration><LocationConstraint>", XmlEscape(impl_->options.region),
                        "</LocationConstraint></CreateBucketConfiguration>");
  }
  Impl::Request r{.method = "PUT", .body = body};
  absl::Status status = impl_->Execute(r).status();
  if (!status.ok() && absl::StrContains(status.message(), "BucketAlreadyOwnedByYou")) return absl::OkStatus();
  return status;
}

}  // namespace weir::fs
