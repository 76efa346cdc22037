// The bytes of the Kafka requests the transaction client sends —
// ApiVersions, FindCoordinator, EndTxn, OffsetFetch and DescribeTransactions
// — and of their responses, as the Kafka protocol guide defines them
// (https://kafka.apache.org/protocol). Integers are big-endian.
//
// An encoded request is a whole frame: int32 size, request header (v1:
// api_key, api_version, correlation_id, client_id; v2 for flexible versions
// adds an empty tagged-field section), body. A response frame is what
// follows its int32 size prefix: response header (correlation_id; flexible
// versions add tagged fields) and body. Flexible versions (EndTxn v3+, every
// DescribeTransactions version) write strings and arrays in their compact
// form (unsigned varint length + 1) and end each structure with tagged
// fields, which the decoders skip.
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
inline constexpr int16_t kOffsetFetchKey = 9;
inline constexpr int16_t kDescribeTransactionsKey = 65;

// FindCoordinator key_type of a consumer group's coordinator and of a
// transaction coordinator.
inline constexpr int8_t kCoordinatorTypeGroup = 0;
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
// transaction and is never sent. OffsetFetch: the non-flexible versions from
// v1 (v0 read ZooKeeper offsets; Kafka 4 dropped it); none has
// require_stable (v7+), so a pending transactional offset commit neither
// blocks the answer nor shows in it. DescribeTransactions: v0, the only one
// (Kafka 3.0+).
inline constexpr VersionRange kApiVersionsVersions{0, 2};
inline constexpr VersionRange kFindCoordinatorVersions{1, 2};
inline constexpr VersionRange kEndTxnVersions{0, 4};
inline constexpr VersionRange kOffsetFetchVersions{1, 5};
inline constexpr VersionRange kDescribeTransactionsVersions{0, 0};

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

// The committed offsets of `group_id` on the listed partitions.
struct OffsetFetchRequest {
  std::string group_id;
  struct Topic {
    std::string name;
    std::vector<int32_t> partitions;
  };
  std::vector<Topic> topics;
};

// The transaction coordinator's state of each listed transactional id.
struct DescribeTransactionsRequest {
  std::vector<std::string> transactional_ids;
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
absl::StatusOr<std::string> EncodeOffsetFetchRequest(const RequestHeader& header,
                                                     const OffsetFetchRequest& request);
absl::StatusOr<std::string> EncodeDescribeTransactionsRequest(
    const RequestHeader& header, const DescribeTransactionsRequest& request);

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

struct OffsetFetchResponse {
  int32_t correlation_id = 0;
  int32_t throttle_time_ms = 0;  // v3+
  struct Partition {
    int32_t partition_index = 0;
    int64_t committed_offset = -1;      // -1: the group has no offset here
    int32_t committed_leader_epoch = -1;  // v5+
    std::optional<std::string> metadata;
    int16_t error_code = 0;
  };
  struct Topic {
    std::string name;
    std::vector<Partition> partitions;
  };
  std::vector<Topic> topics;
  int16_t error_code = 0;  // v2+: group or coordinator errors
};

struct DescribeTransactionsResponse {
  int32_t correlation_id = 0;
  int32_t throttle_time_ms = 0;
  struct Topic {
    std::string name;
    std::vector<int32_t> partitions;
  };
  struct TransactionState {
    int16_t error_code = 0;
    std::string transactional_id;
    std::string state;  // "Empty", "Ongoing", "CompleteCommit", ...
    int32_t timeout_ms = 0;
    int64_t start_time_ms = -1;
    int64_t producer_id = -1;
    int16_t producer_epoch = -1;
    std::vector<Topic> topics;  // partitions still without a marker
  };
  std::vector<TransactionState> transaction_states;
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
absl::StatusOr<OffsetFetchResponse> DecodeOffsetFetchResponse(int16_t version,
                                                              absl::string_view frame);
absl::StatusOr<DescribeTransactionsResponse> DecodeDescribeTransactionsResponse(
    int16_t version, absl::string_view frame);

}  // namespace weir::connectors::kafka_protocol

