#include "common/fs/s3/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/crypto/sha256.h"

namespace weir::fs::s3 {
namespace {

std::string HmacSha256(absl::string_view key, absl::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int out_len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
       data.size(), out, &out_len);
  return std::string(reinterpret_cast<const char*>(out), out_len);
}

// Header values lose leading and trailing spaces, and inner runs of spaces
// become one.
std::string TrimHeaderValue(absl::string_view value) {
  std::string out;
  bool space = false;
  for (char c : absl::StripAsciiWhitespace(value)) {
    if (c == ' ' || c == '\t') {
      space = true;
      continue;
    }
    if (space) out.push_back(' ');
    space = false;
    out.push_back(c);
  }
  return out;
}

}  // namespace

std::string UriEncode(absl::string_view text, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::string UriEncodePath(absl::string_view path) {
  if (!path.empty() && path.front() == '/') path.remove_prefix(1);
  return absl::StrCat("/", UriEncode(path, /*keep_slash=*/true));
}

std::string CanonicalQueryString(const std::vector<std::pair<std::string, std::string>>& query) {
  std::vector<std::pair<std::string, std::string>> encoded;
  encoded.reserve(query.size());
  for (const auto& [k, v] : query) encoded.emplace_back(UriEncode(k, false), UriEncode(v, false));
  std::sort(encoded.begin(), encoded.end());
  return absl::StrJoin(encoded, "&", [](std::string* out, const auto& kv) { absl::StrAppend(out, kv.first, "=", kv.second); });
}

SignedHeaders Sign(const SigningRequest& request, const SigningCredentials& credentials, absl::string_view region,
                   absl::Time now) {
  const std::string amz_date = absl::FormatTime("%Y%m%dT%H%M%SZ", now, absl::UTCTimeZone());
  const std::string date = amz_date.substr(0, 8);

  // Lower-case names, sorted; the headers Sign adds join the caller's.
  std::vector<std::pair<std::string, std::string>> headers;
  headers.emplace_back("host", request.host);
  headers.emplace_back("x-amz-content-sha256", request.payload_hash);
  headers.emplace_back("x-amz-date", amz_date);
  if (!credentials.session_token.empty()) headers.emplace_back("x-amz-security-token", credentials.session_token);
  for (const auto& [name, value] : request.headers) {
    headers.emplace_back(absl::AsciiStrToLower(name), TrimHeaderValue(value));
  }
  std::sort(headers.begin(), headers.end());

  std::string canonical_headers;
  std::vector<absl::string_view> names;
  for (const auto& [name, value] : headers) {
    absl::StrAppend(&canonical_headers, name, ":", value, "\n");
    names.push_back(name);
  }
  const std::string signed_headers = absl::StrJoin(names, ";");

  SignedHeaders out;
  out.canonical_request = absl::StrCat(request.method, "\n", request.encoded_path, "\n",
                                       CanonicalQueryString(request.query), "\n", canonical_headers, "\n",
                                       signed_headers, "\n", request.payload_hash);
  const std::string scope = absl::StrCat(date, "/", region, "/s3/aws4_request");
  out.string_to_sign =
      absl::StrCat("AWS4-HMAC-SHA256\n", amz_date, "\n", scope, "\n", crypto::Sha256Hex(out.canonical_request));

  std::string key = HmacSha256(absl::StrCat("AWS4", credentials.secret_key), date);
  key = HmacSha256(key, region);
  key = HmacSha256(key, "s3");
  key = HmacSha256(key, "aws4_request");
  out.signature = absl::BytesToHexString(HmacSha256(key, out.string_to_sign));

  for (const auto& [name, value] : headers) {
    if (name != "host") out.headers.emplace_back(name, value);
  }
  out.headers.emplace_back("Authorization",
                           absl::StrCat("AWS4-HMAC-SHA256 Credential=", credentials.access_key, "/", scope,
                                        ",SignedHeaders=", signed_headers, ",Signature=", out.signature));
  return out;
}

}  // namespace weir::fs::s3
