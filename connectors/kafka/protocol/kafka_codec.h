// The bytes of the three Kafka requests the transaction client sends —
// ApiVersions, FindCoordinator and EndTxn — and of their responses, as the
// Kafka protocol guide defines them (https://kafka.apache.org/protocol).
// Integers are big-endian.
//
// An encoded request is a whole frame: int32 size, request header (v1:
// api_key, api_version, correlation_id, client_id; v2 for flexible versions
// adds an empty tagged-field section), body. A response frame is what
// follows its int32 size prefix: response header (correlation_id; flexible
// versions add tagged fields) and body.
//
// Decoding never trusts the bytes: every read is bounds-checked, array
// counts are checked against the bytes left before anything is allocated, and
// a response must be consumed exactly. Errors name the API, version and
// field: kDataLoss when the bytes end early, kInvalidArgument when they are
// malformed (a negative length, trailing bytes, a version this codec does not
// speak).
//
// Thread-safety: constants and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace weir::connectors::kafka_protocol {

inline constexpr int16_t kApiVersionsKey = 18;
inline constexpr int16_t kFindCoordinatorKey = 10;
inline constexpr int16_t kEndTxnKey = 26;

// FindCoordinator key_type of a transaction coordinator (0 is a group's).
inline constexpr int8_t kCoordinatorTypeTransaction = 1;

// The largest response frame a client should accept; a broker's ApiVersions
// answer, the largest here, is well under 1 KiB.
inline constexpr int32_t kMaxResponseBytes = 1 << 20;

// An inclusive range of API versions.
struct VersionRange {
  int16_t min = 0;
  int16_t max = -1;

  friend bool operator==(const VersionRange&, const VersionRange&) = default;
};

// The versions this codec speaks. ApiVersions and FindCoordinator: the
// non-flexible ones (FindCoordinator v0 has no key type, so no transaction
// coordinators). EndTxn: up to v4, the newest with the classic transaction
// semantics; v5+ (KIP-890 part 2) makes the broker bump the epoch on every
// transaction and is never sent.
inline constexpr VersionRange kApiVersionsVersions{0, 2};
inline constexpr VersionRange kFindCoordinatorVersions{1, 2};
inline constexpr VersionRange kEndTxnVersions{0, 4};

// The highest version in both ranges; nullopt when they do not overlap.
std::optional<int16_t> HighestCommonVersion(VersionRange ours, VersionRange theirs);

// The fields of a request header other than the API key.
struct RequestHeader {
  int16_t api_version = 0;
  int32_t correlation_id = 0;
  std::string client_id;  // at most 32767 bytes
};

struct FindCoordinatorRequest {
  std::string key;  // the transactional id (or group id)
  int8_t key_type = kCoordinatorTypeTransaction;
};

struct EndTxnRequest {
  std::string transactional_id;
  int64_t producer_id = -1;
  int16_t producer_epoch = -1;
  bool committed = false;  // false: abort
};

// Encoders: the whole request frame. kInvalidArgument for a version outside
// the codec's range or a string longer than the protocol allows.
absl::StatusOr<std::string> EncodeApiVersionsRequest(const RequestHeader& header);
absl::StatusOr<std::string> EncodeFindCoordinatorRequest(const RequestHeader& header,
                                                         const FindCoordinatorRequest& request);
absl::StatusOr<std::string> EncodeEndTxnRequest(const RequestHeader& header,
                                                const EndTxnRequest& request);

// The size in the first four bytes of a response: kDataLoss with fewer than
// four bytes, kInvalidArgument for a size below 4 (no room for the
// correlation id) or above `max_bytes`.
absl::StatusOr<int32_t> DecodeResponseSize(absl::string_view prefix,
                                           int32_t max_bytes = kMaxResponseBytes);

struct ApiVersionsResponse {
  int32_t correlation_id = 0;
  int16_t error_code = 0;
  struct Api {
    int16_t api_key = 0;
    VersionRange versions;
  };
  std::vector<Api> apis;
  int32_t throttle_time_ms = 0;  // v1+

  // The versions the broker supports of `api_key`; nullopt if it lists none.
  std::optional<VersionRange> VersionsOf(int16_t api_key) const;
};

struct FindCoordinatorResponse {
  int32_t correlation_id = 0;
  int32_t throttle_time_ms = 0;
  int16_t error_code = 0;
  std::optional<std::string> error_message;
  int32_t node_id = -1;
  std::string host;
  int32_t port = -1;
};

struct EndTxnResponse {
  int32_t correlation_id = 0;
  int32_t throttle_time_ms = 0;
  int16_t error_code = 0;
};

// Decoders of a response frame (without its size prefix) to a request of
// `version`.
//
// A broker that does not support the requested ApiVersions version answers
// UNSUPPORTED_VERSION in the v0 layout (error code and its API list, no
// throttle time): DecodeApiVersionsResponse accepts that layout whenever the
// error code is UNSUPPORTED_VERSION, so the caller can pick a version from it.
absl::StatusOr<ApiVersionsResponse> DecodeApiVersionsResponse(int16_t version,
                                                              absl::string_view frame);
absl::StatusOr<FindCoordinatorResponse> DecodeFindCoordinatorResponse(int16_t version,
                                                                      absl::string_view frame);
absl::StatusOr<EndTxnResponse> DecodeEndTxnResponse(int16_t version, absl::string_view frame);

}  // namespace weir::connectors::kafka_protocol

