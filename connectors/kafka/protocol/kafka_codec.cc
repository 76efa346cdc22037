#include "connectors/kafka/protocol/kafka_codec.h"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "connectors/kafka/protocol/kafka_errors.h"

namespace weir::connectors::kafka_protocol {
namespace {

constexpr size_t kMaxStringBytes = std::numeric_limits<int16_t>::max();
// An unsigned varint of 32 bits takes at most five bytes.
constexpr int kMaxVarintBytes = 5;

absl::string_view ApiName(int16_t api_key) {
  switch (api_key) {
    case kApiVersionsKey: return "ApiVersions";
    case kFindCoordinatorKey: return "FindCoordinator";
    case kEndTxnKey: return "EndTxn";
    case kOffsetFetchKey: return "OffsetFetch";
    case kDescribeTransactionsKey: return "DescribeTransactions";
    default: return "unknown API";
  }
}

// Versions 3+ of EndTxn and all of DescribeTransactions are "flexible":
// compact strings and arrays, tagged fields, request header v2 and response
// header v1. OffsetFetch turns flexible at v6, beyond what this codec speaks.
bool IsFlexible(int16_t api_key, int16_t version) {
  return (api_key == kEndTxnKey && version >= 3) || api_key == kDescribeTransactionsKey;
}

absl::Status CheckVersion(int16_t api_key, int16_t version, VersionRange supported,
                          absl::string_view what) {
  if (version >= supported.min && version <= supported.max) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(ApiName(api_key), " ", what, " version ", version,
                                                 " is not supported (this codec speaks v",
                                                 supported.min, "-v", supported.max, ")"));
}

absl::Status CheckStringLength(absl::string_view field, absl::string_view value) {
  if (value.size() <= kMaxStringBytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(field, " is ", value.size(),
                                                 " bytes long; the Kafka protocol allows at most ",
                                                 kMaxStringBytes));
}

absl::Status CheckArrayLength(absl::string_view field, size_t size) {
  if (size < static_cast<size_t>(std::numeric_limits<int32_t>::max())) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(field, " has ", size, " entries; too many"));
}

// Appends big-endian fields to a request; Finish() puts the size in front.
class Writer {
 public:
  void Int8(int8_t v) { out_.push_back(static_cast<char>(v)); }
  void Int16(int16_t v) { Unsigned(static_cast<uint16_t>(v), 2); }
  void Int32(int32_t v) { Unsigned(static_cast<uint32_t>(v), 4); }
  void Int64(int64_t v) { Unsigned(static_cast<uint64_t>(v), 8); }
  void Bool(bool v) { Int8(v ? 1 : 0); }
  // The caller checked the length (CheckStringLength).
  void String(absl::string_view s) {
    Int16(static_cast<int16_t>(s.size()));
    out_.append(s.data(), s.size());
  }
  void CompactString(absl::string_view s) {
    UnsignedVarint(static_cast<uint32_t>(s.size()) + 1);
    out_.append(s.data(), s.size());
  }
  void UnsignedVarint(uint32_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<char>(v));
  }
  // The caller checked the count fits (CheckArrayLength).
  void ArrayCount(size_t n) { Int32(static_cast<int32_t>(n)); }
  void CompactArrayCount(size_t n) { UnsignedVarint(static_cast<uint32_t>(n) + 1); }
  void EmptyTaggedFields() { UnsignedVarint(0); }

  std::string Finish() && {
    Writer framed;
    framed.Int32(static_cast<int32_t>(out_.size()));
    framed.out_.append(out_);
    return std::move(framed.out_);
  }

 private:
  void Unsigned(uint64_t v, int bytes) {
    for (int shift = 8 * (bytes - 1); shift >= 0; shift -= 8) {
      out_.push_back(static_cast<char>((v >> shift) & 0xff));
    }
  }

  std::string out_;
};

absl::StatusOr<Writer> StartRequest(int16_t api_key, const RequestHeader& header,
                                    VersionRange supported) {
  RETURN_IF_ERROR(CheckVersion(api_key, header.api_version, supported, "request"));
  RETURN_IF_ERROR(CheckStringLength("client_id", header.client_id));
  Writer w;
  w.Int16(api_key);
  w.Int16(header.api_version);
  w.Int32(header.correlation_id);
  // client_id stays a classic (int16-length) string in request header v2 too.
  w.String(header.client_id);
  if (IsFlexible(api_key, header.api_version)) w.EmptyTaggedFields();
  return w;
}

// Reads big-endian fields of one response, each read checked against the
// bytes left. Errors name the response ("EndTxn v4 response"), the field and
// the offset.
class Reader {
 public:
  Reader(absl::string_view bytes, int16_t api_key, int16_t version)
      : bytes_(bytes), what_(absl::StrCat(ApiName(api_key), " v", version, " response")) {}

  absl::Status Int8(absl::string_view field, int8_t* out) {
    absl::string_view b;
    RETURN_IF_ERROR(Take(field, 1, &b));
    *out = static_cast<int8_t>(b[0]);
    return absl::OkStatus();
  }
  absl::Status Int16(absl::string_view field, int16_t* out) {
    uint64_t v = 0;
    RETURN_IF_ERROR(Unsigned(field, 2, &v));
    *out = static_cast<int16_t>(static_cast<uint16_t>(v));
    return absl::OkStatus();
  }
  absl::Status Int32(absl::string_view field, int32_t* out) {
    uint64_t v = 0;
    RETURN_IF_ERROR(Unsigned(field, 4, &v));
    *out = static_cast<int32_t>(static_cast<uint32_t>(v));
    return absl::OkStatus();
  }
  absl::Status Int64(absl::string_view field, int64_t* out) {
    uint64_t v = 0;
    RETURN_IF_ERROR(Unsigned(field, 8, &v));
    *out = static_cast<int64_t>(v);
    return absl::OkStatus();
  }

  absl::Status NullableString(absl::string_view field, std::optional<std::string>* out) {
    const size_t at = pos_;
    int16_t length = 0;
    RETURN_IF_ERROR(Int16(field, &length));
    if (length == -1) {
      out->reset();
      return absl::OkStatus();
    }
    if (length < 0) return Malformed(field, at, absl::StrCat("has length ", length));
    absl::string_view b;
    RETURN_IF_ERROR(Take(field, static_cast<size_t>(length), &b));
    out->emplace(b);
    return absl::OkStatus();
  }
  absl::Status String(absl::string_view field, std::string* out) {
    const size_t at = pos_;
    std::optional<std::string> s;
    RETURN_IF_ERROR(NullableString(field, &s));
    if (!s.has_value()) return Malformed(field, at, "is null but may not be");
    *out = std::move(*s);
    return absl::OkStatus();
  }

  // The count of a non-nullable array whose elements take at least
  // `min_element_bytes` each: refused before anything is allocated when the
  // bytes left cannot hold that many.
  absl::Status ArrayCount(absl::string_view field, size_t min_element_bytes, int32_t* out) {
    const size_t at = pos_;
    int32_t count = 0;
    RETURN_IF_ERROR(Int32(field, &count));
    if (count < 0) return Malformed(field, at, absl::StrCat("has ", count, " entries"));
    return CheckCount(field, at, static_cast<uint32_t>(count), min_element_bytes, out);
  }

  // A compact string: unsigned varint length + 1 (0: null, refused here),
  // then the bytes.
  absl::Status CompactString(absl::string_view field, std::string* out) {
    const size_t at = pos_;
    uint32_t length_plus_one = 0;
    RETURN_IF_ERROR(UnsignedVarint(field, &length_plus_one));
    if (length_plus_one == 0) return Malformed(field, at, "is null but may not be");
    absl::string_view b;
    RETURN_IF_ERROR(Take(field, length_plus_one - 1, &b));
    out->assign(b.data(), b.size());
    return absl::OkStatus();
  }

  // The count of a non-nullable compact array (unsigned varint count + 1),
  // checked against the bytes left like ArrayCount.
  absl::Status CompactArrayCount(absl::string_view field, size_t min_element_bytes,
                                 int32_t* out) {
    const size_t at = pos_;
    uint32_t count_plus_one = 0;
    RETURN_IF_ERROR(UnsignedVarint(field, &count_plus_one));
    if (count_plus_one == 0) return Malformed(field, at, "is null but may not be");
    return CheckCount(field, at, count_plus_one - 1, min_element_bytes, out);
  }

  absl::Status UnsignedVarint(absl::string_view field, uint32_t* out) {
    const size_t at = pos_;
    uint32_t value = 0;
    for (int i = 0; i < kMaxVarintBytes; ++i) {
      absl::string_view b;
      RETURN_IF_ERROR(Take(field, 1, &b));
      const auto byte = static_cast<uint8_t>(b[0]);
      if (i == kMaxVarintBytes - 1 && (byte & 0xf0) != 0) {
        return Malformed(field, at, "is a varint that overflows 32 bits");
      }
      value |= static_cast<uint32_t>(byte & 0x7f) << (7 * i);
      if ((byte & 0x80) == 0) {
        *out = value;
        return absl::OkStatus();
      }
    }
    return Malformed(field, at, "is a varint longer than 5 bytes");
  }

  // Skips a tagged-field section (none of its tags matter to this client).
  absl::Status SkipTaggedFields(absl::string_view field) {
    uint32_t count = 0;
    RETURN_IF_ERROR(UnsignedVarint(field, &count));
    for (uint32_t i = 0; i < count; ++i) {
      uint32_t tag = 0;
      uint32_t size = 0;
      RETURN_IF_ERROR(UnsignedVarint(field, &tag));
      RETURN_IF_ERROR(UnsignedVarint(field, &size));
      absl::string_view ignored;
      RETURN_IF_ERROR(Take(absl::StrCat(field, " tag ", tag), size, &ignored));
    }
    return absl::OkStatus();
  }

  absl::Status ExpectEnd() {
    if (Remaining() == 0) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("malformed ", what_, ": ", Remaining(),
                                                   " unexpected bytes after the last field at offset ",
                                                   pos_));
  }

 private:
  size_t Remaining() const { return bytes_.size() - pos_; }

  absl::Status CheckCount(absl::string_view field, size_t at, uint32_t count,
                          size_t min_element_bytes, int32_t* out) {
    if (static_cast<uint64_t>(count) * min_element_bytes > Remaining() ||
        count > static_cast<uint32_t>(std::numeric_limits<int32_t>::max())) {
      return absl::DataLossError(absl::StrCat(
          "truncated ", what_, ": ", field, " at offset ", at, " claims ", count, " entries of ",
          min_element_bytes, " bytes but only ", Remaining(), " bytes follow"));
    }
    *out = static_cast<int32_t>(count);
    return absl::OkStatus();
  }

  absl::Status Take(absl::string_view field, size_t n, absl::string_view* out) {
    if (n > Remaining()) {
      return absl::DataLossError(absl::StrCat("truncated ", what_, ": ", field, " at offset ", pos_,
                                              " needs ", n, " bytes but only ", Remaining(),
                                              " remain"));
    }
    *out = bytes_.substr(pos_, n);
    pos_ += n;
    return absl::OkStatus();
  }

  absl::Status Unsigned(absl::string_view field, int n, uint64_t* out) {
    absl::string_view b;
    RETURN_IF_ERROR(Take(field, static_cast<size_t>(n), &b));
    uint64_t v = 0;
    for (char c : b) v = (v << 8) | static_cast<uint8_t>(c);
    *out = v;
    return absl::OkStatus();
  }

  absl::Status Malformed(absl::string_view field, size_t at, absl::string_view problem) const {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed ", what_, ": ", field, " at offset ", at, " ", problem));
  }

  const absl::string_view bytes_;
  size_t pos_ = 0;
  const std::string what_;
};

// Reads the response header: the correlation id, and for flexible versions
// its tagged fields.
absl::Status ReadResponseHeader(Reader& r, int16_t api_key, int16_t version,
                                int32_t* correlation_id) {
  RETURN_IF_ERROR(r.Int32("correlation_id", correlation_id));
  if (IsFlexible(api_key, version)) RETURN_IF_ERROR(r.SkipTaggedFields("header tagged fields"));
  return absl::OkStatus();
}

}  // namespace

std::optional<int16_t> HighestCommonVersion(VersionRange ours, VersionRange theirs) {
  const int16_t low = std::max(ours.min, theirs.min);
  const int16_t high = std::min(ours.max, theirs.max);
  if (low > high) return std::nullopt;
  return high;
}

absl::StatusOr<std::string> EncodeApiVersionsRequest(const RequestHeader& header) {
  // v0-v2 have an empty body.
  ASSIGN_OR_RETURN(Writer w, StartRequest(kApiVersionsKey, header, kApiVersionsVersions));
  return std::move(w).Finish();
}

absl::StatusOr<std::string> EncodeFindCoordinatorRequest(const RequestHeader& header,
                                                         const FindCoordinatorRequest& request) {
  RETURN_IF_ERROR(CheckStringLength("FindCoordinator key", request.key));
  ASSIGN_OR_RETURN(Writer w, StartRequest(kFindCoordinatorKey, header, kFindCoordinatorVersions));
  w.String(request.key);
  w.Int8(request.key_type);
  return std::move(w).Finish();
}

absl::StatusOr<std::string> EncodeEndTxnRequest(const RequestHeader& header,
                                                const EndTxnRequest& request) {
  RETURN_IF_ERROR(CheckStringLength("transactional_id", request.transactional_id));
  ASSIGN_OR_RETURN(Writer w, StartRequest(kEndTxnKey, header, kEndTxnVersions));
  if (IsFlexible(kEndTxnKey, header.api_version)) {
    w.CompactString(request.transactional_id);
  } else {
    w.String(request.transactional_id);
  }
  w.Int64(request.producer_id);
  w.Int16(request.producer_epoch);
  w.Bool(request.committed);
  if (IsFlexible(kEndTxnKey, header.api_version)) w.EmptyTaggedFields();
  return std::move(w).Finish();
}

absl::StatusOr<std::string> EncodeOffsetFetchRequest(const RequestHeader& header,
                                                     const OffsetFetchRequest& request) {
  RETURN_IF_ERROR(CheckStringLength("group_id", request.group_id));
  RETURN_IF_ERROR(CheckArrayLength("topics", request.topics.size()));
  for (const OffsetFetchRequest::Topic& topic : request.topics) {
    RETURN_IF_ERROR(CheckStringLength("topic name", topic.name));
    RETURN_IF_ERROR(CheckArrayLength("partition_indexes", topic.partitions.size()));
  }
  ASSIGN_OR_RETURN(Writer w, StartRequest(kOffsetFetchKey, header, kOffsetFetchVersions));
  w.String(request.group_id);
  w.ArrayCount(request.topics.size());
  for (const OffsetFetchRequest::Topic& topic : request.topics) {
    w.String(topic.name);
    w.ArrayCount(topic.partitions.size());
    for (const int32_t partition : topic.partitions) w.Int32(partition);
  }
  return std::move(w).Finish();
}

absl::StatusOr<std::string> EncodeDescribeTransactionsRequest(
    const RequestHeader& header, const DescribeTransactionsRequest& request) {
  RETURN_IF_ERROR(CheckArrayLength("transactional_ids", request.transactional_ids.size()));
  for (const std::string& id : request.transactional_ids) {
    RETURN_IF_ERROR(CheckStringLength("transactional_id", id));
  }
  ASSIGN_OR_RETURN(Writer w,
                   StartRequest(kDescribeTransactionsKey, header, kDescribeTransactionsVersions));
  w.CompactArrayCount(request.transactional_ids.size());
  for (const std::string& id : request.transactional_ids) w.CompactString(id);
  w.EmptyTaggedFields();
  return std::move(w).Finish();
}

absl::StatusOr<int32_t> DecodeResponseSize(absl::string_view prefix, int32_t max_bytes) {
  if (prefix.size() < 4) {
    return absl::DataLossError(absl::StrCat("truncated response size: ", prefix.size(),
                                            " of its 4 bytes"));
  }
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(prefix[i]);
  const auto size = static_cast<int32_t>(v);
  if (size < 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed response: size ", size, " leaves no room for a correlation id"));
  }
  if (size > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("response of ", size,
                                                   " bytes is larger than the ", max_bytes,
                                                   " bytes this client accepts"));
  }
  return size;
}

std::optional<VersionRange> ApiVersionsResponse::VersionsOf(int16_t api_key) const {
  for (const Api& api : apis) {
    if (api.api_key == api_key) return api.versions;
  }
  return std::nullopt;
}

absl::StatusOr<ApiVersionsResponse> DecodeApiVersionsResponse(int16_t version,
                                                              absl::string_view frame) {
  RETURN_IF_ERROR(CheckVersion(kApiVersionsKey, version, kApiVersionsVersions, "response"));
  Reader r(frame, kApiVersionsKey, version);
  ApiVersionsResponse response;
  // ApiVersions responses always use response header v0.
  RETURN_IF_ERROR(r.Int32("correlation_id", &response.correlation_id));
  RETURN_IF_ERROR(r.Int16("error_code", &response.error_code));
  int32_t count = 0;
  constexpr size_t kApiEntryBytes = 6;
  RETURN_IF_ERROR(r.ArrayCount("api_keys", kApiEntryBytes, &count));
  response.apis.reserve(static_cast<size_t>(count));
  for (int32_t i = 0; i < count; ++i) {
    ApiVersionsResponse::Api api;
    RETURN_IF_ERROR(r.Int16("api_key", &api.api_key));
    RETURN_IF_ERROR(r.Int16("min_version", &api.versions.min));
    RETURN_IF_ERROR(r.Int16("max_version", &api.versions.max));
    response.apis.push_back(api);
  }
  // An UNSUPPORTED_VERSION answer comes in the v0 layout whatever was asked.
  if (response.error_code == kUnsupportedVersion) return response;
  if (version >= 1) RETURN_IF_ERROR(r.Int32("throttle_time_ms", &response.throttle_time_ms));
  RETURN_IF_ERROR(r.ExpectEnd());
  return response;
}

absl::StatusOr<FindCoordinatorResponse> DecodeFindCoordinatorResponse(int16_t version,
                                                                      absl::string_view frame) {
  RETURN_IF_ERROR(
      CheckVersion(kFindCoordinatorKey, version, kFindCoordinatorVersions, "response"));
  Reader r(frame, kFindCoordinatorKey, version);
  FindCoordinatorResponse response;
  RETURN_IF_ERROR(ReadResponseHeader(r, kFindCoordinatorKey, version, &response.correlation_id));
  RETURN_IF_ERROR(r.Int32("throttle_time_ms", &response.throttle_time_ms));
  RETURN_IF_ERROR(r.Int16("error_code", &response.error_code));
  RETURN_IF_ERROR(r.NullableString("error_message", &response.error_message));
  RETURN_IF_ERROR(r.Int32("node_id", &response.node_id));
  RETURN_IF_ERROR(r.String("host", &response.host));
  RETURN_IF_ERROR(r.Int32("port", &response.port));
  RETURN_IF_ERROR(r.ExpectEnd());
  return response;
}

absl::StatusOr<EndTxnResponse> DecodeEndTxnResponse(int16_t version, absl::string_view frame) {
  RETURN_IF_ERROR(CheckVersion(kEndTxnKey, version, kEndTxnVersions, "response"));
  Reader r(frame, kEndTxnKey, version);
  EndTxnResponse response;
  RETURN_IF_ERROR(ReadResponseHeader(r, kEndTxnKey, version, &response.correlation_id));
  RETURN_IF_ERROR(r.Int32("throttle_time_ms", &response.throttle_time_ms));
  RETURN_IF_ERROR(r.Int16("error_code", &response.error_code));
  if (IsFlexible(kEndTxnKey, version)) RETURN_IF_ERROR(r.SkipTaggedFields("tagged fields"));
  RETURN_IF_ERROR(r.ExpectEnd());
  return response;
}

absl::StatusOr<OffsetFetchResponse> DecodeOffsetFetchResponse(int16_t version,
                                                              absl::string_view frame) {
  RETURN_IF_ERROR(CheckVersion(kOffsetFetchKey, version, kOffsetFetchVersions, "response"));
  Reader r(frame, kOffsetFetchKey, version);
  OffsetFetchResponse response;
  RETURN_IF_ERROR(ReadResponseHeader(r, kOffsetFetchKey, version, &response.correlation_id));
  if (version >= 3) RETURN_IF_ERROR(r.Int32("throttle_time_ms", &response.throttle_time_ms));
  // A topic: name (>= 2 bytes) and a partition count (4). A partition:
  // index 4, offset 8, leader epoch 4 (v5+), metadata >= 2, error 2.
  constexpr size_t kTopicBytes = 6;
  const size_t partition_bytes = version >= 5 ? 20 : 16;
  int32_t topics = 0;
  RETURN_IF_ERROR(r.ArrayCount("topics", kTopicBytes, &topics));
  response.topics.reserve(static_cast<size_t>(topics));
  for (int32_t t = 0; t < topics; ++t) {
    OffsetFetchResponse::Topic topic;
    RETURN_IF_ERROR(r.String("topic name", &topic.name));
    int32_t partitions = 0;
    RETURN_IF_ERROR(r.ArrayCount("partitions", partition_bytes, &partitions));
    topic.partitions.reserve(static_cast<size_t>(partitions));
    for (int32_t p = 0; p < partitions; ++p) {
      OffsetFetchResponse::Partition partition;
      RETURN_IF_ERROR(r.Int32("partition_index", &partition.partition_index));
      RETURN_IF_ERROR(r.Int64("committed_offset", &partition.committed_offset));
      if (version >= 5) {
        RETURN_IF_ERROR(r.Int32("committed_leader_epoch", &partition.committed_leader_epoch));
      }
      RETURN_IF_ERROR(r.NullableString("metadata", &partition.metadata));
      RETURN_IF_ERROR(r.Int16("partition error_code", &partition.error_code));
      topic.partitions.push_back(std::move(partition));
    }
    response.topics.push_back(std::move(topic));
  }
  if (version >= 2) RETURN_IF_ERROR(r.Int16("error_code", &response.error_code));
  RETURN_IF_ERROR(r.ExpectEnd());
  return response;
}

absl::StatusOr<DescribeTransactionsResponse> DecodeDescribeTransactionsResponse(
    int16_t version, absl::string_view frame) {
  RETURN_IF_ERROR(CheckVersion(kDescribeTransactionsKey, version, kDescribeTransactionsVersions,
                               "response"));
  Reader r(frame, kDescribeTransactionsKey, version);
  DescribeTransactionsResponse response;
  RETURN_IF_ERROR(
      ReadResponseHeader(r, kDescribeTransactionsKey, version, &response.correlation_id));
  RETURN_IF_ERROR(r.Int32("throttle_time_ms", &response.throttle_time_ms));
  // A state: error 2, id >= 1, state >= 1, timeout 4, start 8, producer id
  // 8, epoch 2, topic count >= 1, tags >= 1. A topic: name >= 1, partition
  // count >= 1, tags >= 1. A partition: 4.
  constexpr size_t kStateBytes = 28;
  constexpr size_t kTopicBytes = 3;
  constexpr size_t kPartitionBytes = 4;
  int32_t states = 0;
  RETURN_IF_ERROR(r.CompactArrayCount("transaction_states", kStateBytes, &states));
  response.transaction_states.reserve(static_cast<size_t>(states));
  for (int32_t s = 0; s < states; ++s) {
    DescribeTransactionsResponse::TransactionState state;
    RETURN_IF_ERROR(r.Int16("error_code", &state.error_code));
    RETURN_IF_ERROR(r.CompactString("transactional_id", &state.transactional_id));
    RETURN_IF_ERROR(r.CompactString("transaction_state", &state.state));
    RETURN_IF_ERROR(r.Int32("transaction_timeout_ms", &state.timeout_ms));
    RETURN_IF_ERROR(r.Int64("transaction_start_time_ms", &state.start_time_ms));
    RETURN_IF_ERROR(r.Int64("producer_id", &state.producer_id));
    RETURN_IF_ERROR(r.Int16("producer_epoch", &state.producer_epoch));
    int32_t topics = 0;
    RETURN_IF_ERROR(r.CompactArrayCount("topic_partitions", kTopicBytes, &topics));
    state.topics.reserve(static_cast<size_t>(topics));
    for (int32_t t = 0; t < topics; ++t) {
      DescribeTransactionsResponse::Topic topic;
      RETURN_IF_ERROR(r.CompactString("topic name", &topic.name));
      int32_t partitions = 0;
      RETURN_IF_ERROR(r.CompactArrayCount("partition_indexes", kPartitionBytes, &partitions));
      topic.partitions.reserve(static_cast<size_t>(partitions));
      for (int32_t p = 0; p < partitions; ++p) {
        int32_t partition = 0;
        RETURN_IF_ERROR(r.Int32("partition_index", &partition));
        topic.partitions.push_back(partition);
      }
      RETURN_IF_ERROR(r.SkipTaggedFields("topic tagged fields"));
      state.topics.push_back(std::move(topic));
    }
    RETURN_IF_ERROR(r.SkipTaggedFields("transaction state tagged fields"));
    response.transaction_states.push_back(std::move(state));
  }
  RETURN_IF_ERROR(r.SkipTaggedFields("tagged fields"));
  RETURN_IF_ERROR(r.ExpectEnd());
  return response;
}

}  // namespace weir::connectors::kafka_protocol
