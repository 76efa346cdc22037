// Kafka protocol error codes (org.apache.kafka.common.protocol.Errors) that
// the transaction client acts on, their names, and the one place where a
// Kafka error code is attached to an absl::Status and read back from it.
//
// Thread-safety: constants and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace weir::connectors::kafka_protocol {

// The codes by the names Kafka gives them; the wire carries them as int16.
inline constexpr int16_t kUnknownServerError = -1;
inline constexpr int16_t kNone = 0;
inline constexpr int16_t kRequestTimedOut = 7;
inline constexpr int16_t kNetworkException = 13;
inline constexpr int16_t kCoordinatorLoadInProgress = 14;
inline constexpr int16_t kCoordinatorNotAvailable = 15;
inline constexpr int16_t kNotCoordinator = 16;
inline constexpr int16_t kTopicAuthorizationFailed = 29;
inline constexpr int16_t kGroupAuthorizationFailed = 30;
inline constexpr int16_t kClusterAuthorizationFailed = 31;
inline constexpr int16_t kUnsupportedVersion = 35;
inline constexpr int16_t kInvalidRequest = 42;
inline constexpr int16_t kInvalidProducerEpoch = 47;
inline constexpr int16_t kInvalidTxnState = 48;
inline constexpr int16_t kInvalidProducerIdMapping = 49;
inline constexpr int16_t kConcurrentTransactions = 51;
inline constexpr int16_t kTransactionalIdAuthorizationFailed = 53;
inline constexpr int16_t kUnknownProducerId = 59;
inline constexpr int16_t kGroupIdNotFound = 69;
inline constexpr int16_t kUnstableOffsetCommit = 88;
inline constexpr int16_t kProducerFenced = 90;
inline constexpr int16_t kTransactionalIdNotFound = 105;
inline constexpr int16_t kTransactionAbortable = 120;

// "INVALID_TXN_STATE" for 48; "UNKNOWN_ERROR_CODE" for a code not listed
// above.
absl::string_view KafkaErrorName(int16_t code);

// "INVALID_TXN_STATE (48)": how statuses quote a Kafka error.
std::string DescribeKafkaError(int16_t code);

// `status` with `code` attached as a payload that KafkaErrorCodeOf reads
// back. An OK status stays OK (and carries nothing).
absl::Status WithKafkaErrorCode(absl::Status status, int16_t code);

// The Kafka error code attached to `status` by WithKafkaErrorCode: the
// broker's answer that decided the result. nullopt when the status does not
// come from a broker's error code (OK, a connection problem, bad arguments).
std::optional<int16_t> KafkaErrorCodeOf(const absl::Status& status);

}  // namespace weir::connectors::kafka_protocol

