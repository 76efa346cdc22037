// S3FileSystem: a FileSystem on an S3 bucket (AWS or any S3-compatible
// store), for `s3://bucket/prefix` roots. Requests are signed with SigV4
// (s3/sigv4.h) and sent over libcurl.
//
//   Write / UploadFile / NewWriter  one PUT up to `part_size`; beyond it a
//                                   multipart upload (parts of `part_size`),
//                                   aborted on any failure so that no part of
//                                   a file ever becomes visible; every body
//                                   with its Content-MD5 (see sign_payload)
//   WriteMode::kCreateNew           If-None-Match: * on the PUT or on the
//                                   completion of the multipart upload
//   ReadFile / ReadRange            GET (bounded) / GET with Range
//   Stat / Exists                   HEAD
//   List                            ListObjectsV2, following continuation tokens
//   Delete / DeleteMany             DELETE / DeleteObjects (batches of 1000)
//
// Every request is retried with backoff and jitter (common/retry) on
// connection errors, HTTP 5xx, 429 and SlowDown, and on nothing else. A
// retried request may have taken effect the first time without the answer
// arriving: a conditional create then reports kAlreadyExists for its own
// object (callers that must tell read it back); a multipart completion that
// then finds its upload gone (NoSuchUpload) counts as done when the object
// has the size written.
// Response bodies are bounded: XML and error bodies by `max_xml_bytes`, GETs
// by what the caller asks for.
//
// Thread-safety: thread-safe. Connections are kept in a pool of curl handles
// (at most `max_idle_connections` idle), so concurrent callers each use their
// own connection and successive requests reuse them.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/fs/file_system.h"
#include "common/retry/backoff.h"

namespace weir::config {
class Configuration;
}

namespace weir::fs {

struct S3Options {
  // "http://127.0.0.1:9000", "https://storage.example.com"; empty:
  // https://s3.<region>.amazonaws.com.
  std::string endpoint;
  std::string region = "us-east-1";
  std::string access_key;
  std::string secret_key;
  std::string session_token;  // temporary credentials; empty: none
  // Path-style (endpoint/bucket/key) rather than virtual-host-style
  // (bucket.endpoint/key) addressing; S3-compatible servers usually need it.
  bool path_style = false;
  // Size of a multipart upload's parts, and the largest file sent in one PUT.
  int64_t part_size = int64_t{16} << 20;
  // Object bodies (PUT, UploadPart) go as UNSIGNED-PAYLOAD unless this is
  // set; they always carry a Content-MD5 (a signed header), so the store
  // refuses (BadDigest) a body that arrives other than it was sent either
  // way. Signing also makes the store hash every body with SHA-256 before
  // it writes it. Other requests are always signed with their body's hash.
  bool sign_payload = false;
  retry::BackoffOptions backoff{.initial = absl::Milliseconds(100), .max = absl::Seconds(5), .jitter = 0.5};
  int max_attempts = 8;                       // tries of one request
  absl::Duration retry_deadline = absl::Minutes(2);  // no try starts later than this after the first
  absl::Duration connect_timeout = absl::Seconds(10);
  // A request that moves less than 1 KiB/s for this long is cut off (and retried).
  absl::Duration low_speed_timeout = absl::Seconds(60);
  int max_idle_connections = 16;
  int64_t max_xml_bytes = int64_t{8} << 20;

  // InvalidArgument naming the setting when one is out of range.
  absl::Status Validate() const;
};

// Reads an environment variable; tests pass their own.
using EnvLookup = std::function<std::optional<std::string>(absl::string_view)>;
EnvLookup ProcessEnvironment();

// The S3 settings of a process, each from the first place that has it:
//   endpoint     s3.endpoint, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL
//   region       s3.region, AWS_REGION, AWS_DEFAULT_REGION, "us-east-1"
//   credentials  s3.access-key + s3.secret-key; AWS_ACCESS_KEY_ID +
//                AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN); the profile
//                AWS_PROFILE (default "default") of the shared credentials
//                file (AWS_SHARED_CREDENTIALS_FILE, default ~/.aws/credentials)
//   path style   s3.path.style.access;  part size  s3.upload.part-size;
//   payload signing  s3.upload.sign-payload
// `config` may be null (environment and files only). An access key without
// a secret key (or the other way round) is refused, naming where it came from.
absl::StatusOr<S3Options> ResolveS3Options(const config::Configuration* config, const EnvLookup& env);

class S3FileSystem final : public FileSystem {
 public:
  // `uri` is s3://bucket[/prefix]. Makes no request (a missing bucket or bad
  // credentials show at the first call).
  static absl::StatusOr<std::unique_ptr<S3FileSystem>> Open(absl::string_view uri, S3Options options);
  ~S3FileSystem() override;

  std::string Uri() const override;
  absl::Status Write(absl::string_view path, absl::string_view contents, WriteMode mode) override;
  absl::StatusOr<std::unique_ptr<FileWriter>> NewWriter(absl::string_view path, WriteMode mode) override;
  absl::StatusOr<std::string> ReadFile(absl::string_view path, int64_t max_bytes) override;
  absl::StatusOr<std::string> ReadRange(absl::string_view path, int64_t offset, int64_t length) override;
  absl::StatusOr<FileInfo> Stat(absl::string_view path) override;
  absl::StatusOr<std::vector<FileInfo>> List(absl::string_view prefix) override;
  absl::Status Delete(absl::string_view path) override;
  absl::Status DeleteMany(const std::vector<std::string>& paths) override;

  // Creates the bucket (tests and first-time setup); OK when this account
  // already owns it.
  absl::Status CreateBucket();

  struct Impl;

 private:
  explicit S3FileSystem(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace weir::fs
