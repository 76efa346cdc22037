#include "connectors/kafka/protocol/kafka_errors.h"

#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace weir::connectors::kafka_protocol {
namespace {

// The payload type under which a status carries its Kafka error code, in
// decimal.
constexpr absl::string_view kKafkaErrorCodePayload = "type.weir.dev/weir.kafka.ErrorCode";

}  // namespace

absl::string_view KafkaErrorName(int16_t code) {
  switch (code) {
    case kUnknownServerError: return "UNKNOWN_SERVER_ERROR";
    case kNone: return "NONE";
    case kRequestTimedOut: return "REQUEST_TIMED_OUT";
    case kNetworkException: return "NETWORK_EXCEPTION";
    case kCoordinatorLoadInProgress: return "COORDINATOR_LOAD_IN_PROGRESS";
    case kCoordinatorNotAvailable: return "COORDINATOR_NOT_AVAILABLE";
    case kNotCoordinator: return "NOT_COORDINATOR";
    case kTopicAuthorizationFailed: return "TOPIC_AUTHORIZATION_FAILED";
    case kGroupAuthorizationFailed: return "GROUP_AUTHORIZATION_FAILED";
    case kClusterAuthorizationFailed: return "CLUSTER_AUTHORIZATION_FAILED";
    case kUnsupportedVersion: return "UNSUPPORTED_VERSION";
    case kInvalidRequest: return "INVALID_REQUEST";
    case kInvalidProducerEpoch: return "INVALID_PRODUCER_EPOCH";
    case kInvalidTxnState: return "INVALID_TXN_STATE";
    case kInvalidProducerIdMapping: return "INVALID_PRODUCER_ID_MAPPING";
    case kConcurrentTransactions: return "CONCURRENT_TRANSACTIONS";
    case kTransactionalIdAuthorizationFailed: return "TRANSACTIONAL_ID_AUTHORIZATION_FAILED";
    case kUnknownProducerId: return "UNKNOWN_PRODUCER_ID";
    case kGroupIdNotFound: return "GROUP_ID_NOT_FOUND";
    case kUnstableOffsetCommit: return "UNSTABLE_OFFSET_COMMIT";
    case kProducerFenced: return "PRODUCER_FENCED";
    case kTransactionalIdNotFound: return "TRANSACTIONAL_ID_NOT_FOUND";
    case kTransactionAbortable: return "TRANSACTION_ABORTABLE";
    default: return "UNKNOWN_ERROR_CODE";
  }
}

std::string DescribeKafkaError(int16_t code) {
  return absl::StrCat(KafkaErrorName(code), " (", code, ")");
}

absl::Status WithKafkaErrorCode(absl::Status status, int16_t code) {
  if (!status.ok()) status.SetPayload(kKafkaErrorCodePayload, absl::Cord(absl::StrCat(code)));
  return status;
}

std::optional<int16_t> KafkaErrorCodeOf(const absl::Status& status) {
  const auto payload = status.GetPayload(kKafkaErrorCodePayload);
  if (!payload.has_value()) return std::nullopt;
  int code = 0;
  if (!absl::SimpleAtoi(std::string(*payload), &code) || code < INT16_MIN || code > INT16_MAX) {
    return std::nullopt;
  }
  return static_cast<int16_t>(code);
}

}  // namespace weir::connectors::kafka_protocol
