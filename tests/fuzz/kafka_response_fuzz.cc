// Fuzz target: the responses Weir's own Kafka protocol client decodes
// (ApiVersions, FindCoordinator, EndTxn, OffsetFetch, DescribeTransactions,
// and the size prefix of a frame), at every version it can ask for. The
// first input byte picks the version.
#include <cstddef>
#include <cstdint>

#include "connectors/kafka/protocol/kafka_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  namespace kp = weir::connectors::kafka_protocol;
  const int16_t version = static_cast<int16_t>(data[0] % 8);
  const absl::string_view frame(reinterpret_cast<const char*>(data) + 1, size - 1);
  (void)kp::DecodeApiVersionsResponse(version, frame);
  (void)kp::DecodeFindCoordinatorResponse(version, frame);
  (void)kp::DecodeEndTxnResponse(version, frame);
  (void)kp::DecodeOffsetFetchResponse(version, frame);
  (void)kp::DecodeDescribeTransactionsResponse(version, frame);
  (void)kp::DecodeResponseSize(frame, 1 << 20);
  return 0;
}
