// AWS Signature Version 4 for S3 requests: the canonical request, the string
// to sign, the signing key and the Authorization header, as AWS documents
// them ("Signature Calculations for the Authorization Header").
//
// Thread-safety: thread-safe (pure functions).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace weir::fs::s3 {

struct SigningCredentials {
  std::string access_key;
  std::string secret_key;
  std::string session_token;  // empty: none (sent as x-amz-security-token otherwise)
};

struct SigningRequest {
  std::string method;  // "GET", "PUT", ...
  // The path as sent (already percent-encoded by UriEncodePath), "/" at least.
  std::string encoded_path;
  // Query parameters, unencoded; "uploads" with an empty value is "uploads=".
  std::vector<std::pair<std::string, std::string>> query;
  // Headers to sign besides those Sign adds (host, x-amz-date,
  // x-amz-content-sha256, x-amz-security-token); names in any case.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string host;          // "bucket.s3.amazonaws.com" or "127.0.0.1:9000"
  std::string payload_hash;  // hex SHA-256 of the body, or "UNSIGNED-PAYLOAD"
};

struct SignedHeaders {
  // Every header to send for the signature to hold (host excluded: libcurl
  // sends it from the URL), Authorization among them.
  std::vector<std::pair<std::string, std::string>> headers;
  // For tests and debugging.
  std::string canonical_request;
  std::string string_to_sign;
  std::string signature;
};

// Percent-encodes per RFC 3986 as SigV4 wants it: unreserved characters
// (A-Z a-z 0-9 - _ . ~) stay, everything else becomes %XX (upper case);
// '/' stays when `keep_slash`.
std::string UriEncode(absl::string_view text, bool keep_slash);

// "/" + each segment of `key` encoded (S3 encodes the path once).
std::string UriEncodePath(absl::string_view path);

// The sorted, encoded query string (also what is sent, so both agree).
std::string CanonicalQueryString(const std::vector<std::pair<std::string, std::string>>& query);

// Signs `request` for S3 in `region` at `now`.
SignedHeaders Sign(const SigningRequest& request, const SigningCredentials& credentials,
                   absl::string_view region, absl::Time now);

}  // namespace weir::fs::s3
