// The Kafka protocol codec of connectors/kafka/protocol: requests checked
// byte for byte against the protocol guide's layouts, responses decoded from
// bytes a real broker sent, and broken bytes refused with a status. Also the
// error mapping the TransactionClient builds on, and bootstrap parsing.
#include "connectors/kafka/protocol/kafka_codec.h"

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "connectors/kafka/protocol/broker_connection.h"
#include "connectors/kafka/protocol/kafka_errors.h"
#include "connectors/kafka/protocol/transaction_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weir::connectors::kafka_protocol {
namespace {

using ::testing::AnyOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Optional;

// Hex with optional spaces between fields, as bytes.
std::string Bytes(absl::string_view hex) {
  return absl::HexStringToBytes(absl::StrReplaceAll(hex, {{" ", ""}}));
}

std::string Hex(absl::string_view bytes) { return absl::BytesToHexString(bytes); }

// ---------------------------------------------------------------------------
// Response frames (without their size prefix) captured from the real test
// broker — Apache Kafka 4.1.0, single node, started by scripts/kafka.sh — with
// a temporary hex dump in BrokerConnection::RoundTrip while
// tests/kafka/connectors/transaction_client_test.cc ran, and (for versions
// and errors the client does not produce itself) with a throwaway Python
// script that sent the same requests over a socket.

// ApiVersions v2, correlation id 1: 73 APIs, then throttle_time_ms 0.
// FindCoordinator (10) v0-6, EndTxn (26) v0-5, ApiVersions (18) v0-4.
constexpr absl::string_view kApiVersionsV2Response =
    "0000000100000000004900000000000d00010004001200020001000a00030000000d000800020009"
    "000900010009000a00000006000b00000009000c00000004000d00000005000e00000005000f0000"
    "00060010000000050011000000010012000000040013000200070014000100060015000000020016"
    "00000005001700020004001800000005001900000004001a00000005001b00010001001c00000005"
    "001d00010003001e00010003001f0001000300200001000400210000000200220001000200230001"
    "0004002400000002002500000003002600010003002700010002002800010002002900010003002a"
    "00000002002b00000002002c00000001002d00000001002e00000000002f00000000003000000001"
    "003100000001003200000000003300000000003700000002003900000002003c00000002003d0000"
    "0000004000000000004100000000004200000002004400000001004500000001004a00000001004b"
    "00000000004c00010001004d00010001004e00010001004f00010001005000000000005100000000"
    "005300000000005400000000005500000000005600000000005700000000005a00000000005b0000"
    "0000005c0000000000000000";
// ApiVersions v0, correlation id 11: the same list, no throttle time.
constexpr absl::string_view kApiVersionsV0Response =
    "0000000b00000000004900000000000d00010004001200020001000a00030000000d000800020009"
    "000900010009000a00000006000b00000009000c00000004000d00000005000e00000005000f0000"
    "00060010000000050011000000010012000000040013000200070014000100060015000000020016"
    "00000005001700020004001800000005001900000004001a00000005001b00010001001c00000005"
    "001d00010003001e00010003001f0001000300200001000400210000000200220001000200230001"
    "0004002400000002002500000003002600010003002700010002002800010002002900010003002a"
    "00000002002b00000002002c00000001002d00000001002e00000000002f00000000003000000001"
    "003100000001003200000000003300000000003700000002003900000002003c00000002003d0000"
    "0000004000000000004100000000004200000002004400000001004500000001004a00000001004b"
    "00000000004c00010001004d00010001004e00010001004f00010001005000000000005100000000"
    "005300000000005400000000005500000000005600000000005700000000005a00000000005b0000"
    "0000005c00000000";
// The answer to an ApiVersions v9 request (correlation id 13): v0 layout,
// UNSUPPORTED_VERSION (35), and only ApiVersions' own range, v0-4.
constexpr absl::string_view kApiVersionsUnsupportedResponse = "0000000d 0023 00000001 0012 0000 0004";
// FindCoordinator v2 (correlation id 2) and v1 (14) for a transactional id:
// throttle 0, error NONE, error_message "NONE" (not null), node 1,
// 127.0.0.1:34245.
constexpr absl::string_view kFindCoordinatorV2Response =
    "00000002 00000000 0000 0004 4e4f4e45 00000001 0009 3132372e302e302e31 000085c5";
constexpr absl::string_view kFindCoordinatorV1Response =
    "0000000e 00000000 0000 0004 4e4f4e45 00000001 0009 3132372e302e302e31 000085c5";
// EndTxn v4 (flexible): correlation id 3, header tags, throttle, error, tags.
constexpr absl::string_view kEndTxnV4None = "00000003 00 00000000 0000 00";
// Abort of a committed / commit of an aborted transaction.
constexpr absl::string_view kEndTxnV4InvalidTxnState = "00000003 00 00000000 0030 00";
// Commit after the broker timed the transaction out and bumped the epoch.
constexpr absl::string_view kEndTxnV4ProducerFenced = "00000003 00 00000000 005a 00";
// Commit with a producer id the transactional id does not have (26).
constexpr absl::string_view kEndTxnV4InvalidProducerIdMapping = "0000001a 00 00000000 0031 00";
// EndTxn v1 (classic layout): NONE (commit of a committed transaction, 21),
// INVALID_TXN_STATE (abort of it, 22), INVALID_PRODUCER_EPOCH (commit after
// the timeout, 23: v1 gets 47 where v2+ gets PRODUCER_FENCED), and
// INVALID_PRODUCER_ID_MAPPING (a transactional id never used, 27).
constexpr absl::string_view kEndTxnV1None = "00000015 00000000 0000";
constexpr absl::string_view kEndTxnV1InvalidTxnState = "00000016 00000000 0030";
constexpr absl::string_view kEndTxnV1InvalidProducerEpoch = "00000017 00000000 002f";
constexpr absl::string_view kEndTxnV1InvalidProducerIdMapping = "0000001b 00000000 0031";
// EndTxn v2, commit after the timeout (24): PRODUCER_FENCED.
constexpr absl::string_view kEndTxnV2ProducerFenced = "00000018 00000000 005a";
// OffsetFetch of group "weir-cap-group" on weir-cap-topic-0, which it never
// committed (correlation ids 104, 105, 106, 107): offset -1, metadata "" (not
// null), error NONE; v2+ add the top-level error, v3+ the throttle time, v5
// the leader epoch (-1).
constexpr absl::string_view kOffsetFetchV1NoOffset =
    "00000068 00000001 000e 776569722d6361702d746f706963 00000001 00000000 ffffffffffffffff "
    "0000 0000";
constexpr absl::string_view kOffsetFetchV2NoOffset =
    "00000069 00000001 000e 776569722d6361702d746f706963 00000001 00000000 ffffffffffffffff "
    "0000 0000 0000";
constexpr absl::string_view kOffsetFetchV3NoOffset =
    "0000006a 00000000 00000001 000e 776569722d6361702d746f706963 00000001 00000000 "
    "ffffffffffffffff 0000 0000 0000";
constexpr absl::string_view kOffsetFetchV5NoOffset =
    "0000006b 00000000 00000001 000e 776569722d6361702d746f706963 00000001 00000000 "
    "ffffffffffffffff ffffffff 0000 0000 0000";
// OffsetFetch v2 (correlation id 105) right after the broker started, before
// it had loaded the group coordinator: no topics, top-level NOT_COORDINATOR
// (16).
constexpr absl::string_view kOffsetFetchV2NotCoordinator = "00000069 00000000 0010";
// DescribeTransactions v0 (flexible; correlation id 103) of an id the broker
// does not know: header tags, throttle 0, one state (compact count 2) with
// TRANSACTIONAL_ID_NOT_FOUND (105), id "weir-cap-unknown-id", state "",
// timeout 0, start 0, producer id 0, epoch 0 (an int16 on the wire), no
// topics (compact count 1), tags; tags.
constexpr absl::string_view kDescribeTransactionsNotFound =
    "00000067 00 00000000 02 0069 14 776569722d6361702d756e6b6e6f776e2d6964 01 00000000 "
    "0000000000000000 0000000000000000 0000 01 00 00";

// Built by hand from the protocol guide's layouts (the broker sends these
// only for states the capture did not reach).
// OffsetFetch v5, correlation id 7: throttle 0, topic "out" partition 0 at
// offset 0x123456789 with leader epoch 4 and metadata "weir v1 data", error
// NONE; top-level NONE.
constexpr absl::string_view kOffsetFetchV5Committed =
    "00000007 00000000 00000001 0003 6f7574 00000001 00000000 0000000123456789 00000004 "
    "000c 776569722076312064617461 0000 0000";
// DescribeTransactions v0, correlation id 8: an Ongoing transaction of
// "txn-1" (producer id 0x1000, epoch 3, timeout 60000 ms) on out-0 and out-2,
// with a tag in the header, the topic and the body.
constexpr absl::string_view kDescribeTransactionsOngoing =
    "00000008 01 05 01 aa 00000000 02 0000 06 74786e2d31 08 4f6e676f696e67 0000ea60 "
    "0000018c00000000 0000000000001000 0003 02 04 6f7574 03 00000000 00000002 01 00 02 bbbb "
    "00 00";

// ---------------------------------------------------------------------------
// Encoding.

TEST(KafkaCodecTest, EncodesApiVersionsRequests) {
  for (int16_t version : {0, 1, 2}) {
    absl::StatusOr<std::string> request = EncodeApiVersionsRequest({version, 1, "weir"});
    ASSERT_TRUE(request.ok()) << request.status();
    // size 14 | api_key 18 | version | correlation_id 1 | client_id "weir" | empty body
    EXPECT_EQ(Hex(*request),
              Hex(Bytes(absl::StrCat("0000000e 0012 000", version, " 00000001 0004 77656972"))));
  }
}

TEST(KafkaCodecTest, EncodesFindCoordinatorRequestsForATransaction) {
  for (int16_t version : {1, 2}) {
    absl::StatusOr<std::string> request =
        EncodeFindCoordinatorRequest({version, 2, "weir"}, {"txn-1", kCoordinatorTypeTransaction});
    ASSERT_TRUE(request.ok()) << request.status();
    // size 22 | api_key 10 | version | correlation_id 2 | client_id "weir" |
    // key "txn-1" | key_type 1
    EXPECT_EQ(Hex(*request),
              Hex(Bytes(absl::StrCat("00000016 000a 000", version,
                                     " 00000002 0004 77656972 0005 74786e2d31 01"))));
  }
}

TEST(KafkaCodecTest, EncodesFindCoordinatorRequestsForAGroup) {
  absl::StatusOr<std::string> request =
      EncodeFindCoordinatorRequest({2, 2, "weir"}, {"g", kCoordinatorTypeGroup});
  ASSERT_TRUE(request.ok()) << request.status();
  // size 18 | api_key 10 | v2 | correlation_id 2 | client_id | key "g" | key_type 0
  EXPECT_EQ(Hex(*request), Hex(Bytes("00000012 000a 0002 00000002 0004 77656972 0001 67 00")));
}

TEST(KafkaCodecTest, EncodesOffsetFetchRequests) {
  for (int16_t version : {1, 2, 3, 4, 5}) {
    absl::StatusOr<std::string> request =
        EncodeOffsetFetchRequest({version, 5, "weir"}, {"txn-1", {{"out", {0, 7}}}});
    ASSERT_TRUE(request.ok()) << request.status();
    // size 42 | api_key 9 | version | correlation_id 5 | client_id "weir" |
    // group_id "txn-1" | one topic | "out" | two partitions | 0 | 7; no
    // require_stable (v7+), no tags (flexible from v6).
    EXPECT_EQ(Hex(*request),
              Hex(Bytes(absl::StrCat("0000002a 0009 000", version,
                                     " 00000005 0004 77656972 0005 74786e2d31 00000001 0003 6f7574 "
                                     "00000002 00000000 00000007"))));
  }
}

TEST(KafkaCodecTest, EncodesDescribeTransactionsRequests) {
  absl::StatusOr<std::string> request =
      EncodeDescribeTransactionsRequest({0, 6, "weir"}, {{"txn-1", "t2"}});
  ASSERT_TRUE(request.ok()) << request.status();
  // size 26 | api_key 65 | v0 | correlation_id 6 | client_id "weir" (int16
  // length) | header tags | compact array of 2 (3) | compact "txn-1" (6) |
  // compact "t2" (3) | body tags
  EXPECT_EQ(Hex(*request), Hex(Bytes("0000001a 0041 0000 00000006 0004 77656972 00 03 06 "
                                     "74786e2d31 03 7432 00")));
  // An empty list is a valid (if useless) request: compact count 1.
  request = EncodeDescribeTransactionsRequest({0, 6, ""}, {});
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(Hex(*request), Hex(Bytes("0000000d 0041 0000 00000006 0000 00 01 00")));
}

TEST(KafkaCodecTest, EncodesClassicEndTxnRequests) {
  for (int16_t version : {0, 1, 2}) {
    absl::StatusOr<std::string> request = EncodeEndTxnRequest(
        {version, 3, "weir"}, {"txn-1", 0x0102030405060708, 9, /*committed=*/true});
    ASSERT_TRUE(request.ok()) << request.status();
    // size 32 | api_key 26 | version | correlation_id 3 | client_id "weir" |
    // transactional_id "txn-1" | producer_id | producer_epoch 9 | committed
    EXPECT_EQ(Hex(*request),
              Hex(Bytes(absl::StrCat("00000020 001a 000", version,
                                     " 00000003 0004 77656972 0005 74786e2d31 0102030405060708 "
                                     "0009 01"))));
  }
}

TEST(KafkaCodecTest, EncodesFlexibleEndTxnRequests) {
  for (int16_t version : {3, 4}) {
    absl::StatusOr<std::string> request = EncodeEndTxnRequest(
        {version, 4, "weir"}, {"txn-1", 0x0102030405060708, 9, /*committed=*/false});
    ASSERT_TRUE(request.ok()) << request.status();
    // size 33 | api_key 26 | version | correlation_id 4 | client_id "weir"
    // (still int16-length) | header tags 0 | transactional_id as compact string
    // (length + 1 = 6) | producer_id | epoch 9 | committed 0 | body tags 0
    EXPECT_EQ(Hex(*request),
              Hex(Bytes(absl::StrCat("00000021 001a 000", version,
                                     " 00000004 0004 77656972 00 06 74786e2d31 0102030405060708 "
                                     "0009 00 00"))));
  }
}

TEST(KafkaCodecTest, EncodesALongCompactStringLengthAsAMultiByteVarint) {
  const std::string id(200, 'x');
  absl::StatusOr<std::string> request = EncodeEndTxnRequest({4, 5, ""}, {id, 1, 0, true});
  ASSERT_TRUE(request.ok()) << request.status();
  // header: size, api_key, version, correlation_id, client_id "" (0000), tags.
  const std::string header = Bytes("000000e1 001a 0004 00000005 0000 00");
  ASSERT_EQ(Hex(request->substr(0, header.size())), Hex(header));
  // 201 = 0b1'1001001: low seven bits with the continuation bit, then 1.
  EXPECT_EQ(Hex(request->substr(header.size(), 2)), "c901");
  EXPECT_EQ(request->substr(header.size() + 2, id.size()), id);
  // header 11 + varint 2 + id 200 + producer_id 8 + epoch 2 + committed 1 + tags 1
  EXPECT_EQ(request->size(), 4 + static_cast<size_t>(0xe1));
}

TEST(KafkaCodecTest, RefusesVersionsItDoesNotSpeak) {
  // EndTxn v5 (KIP-890 part 2) would change the transaction semantics.
  const absl::Status end_txn_v5 = EncodeEndTxnRequest({5, 1, "weir"}, {"t", 1, 0, true}).status();
  EXPECT_EQ(end_txn_v5.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(end_txn_v5.message(), HasSubstr("EndTxn request version 5 is not supported"));
  // FindCoordinator v0 has no key type; v3+ is flexible.
  EXPECT_EQ(EncodeFindCoordinatorRequest({0, 1, "weir"}, {"t"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeFindCoordinatorRequest({3, 1, "weir"}, {"t"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeApiVersionsRequest({3, 1, "weir"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeEndTxnRequest({-1, 1, "weir"}, {"t", 1, 0, true}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // OffsetFetch v0 read ZooKeeper offsets; v6+ is flexible.
  EXPECT_EQ(EncodeOffsetFetchRequest({0, 1, "weir"}, {"g", {}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeOffsetFetchRequest({6, 1, "weir"}, {"g", {}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeDescribeTransactionsRequest({1, 1, "weir"}, {{"t"}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(KafkaCodecTest, RefusesStringsLongerThanTheProtocolAllows) {
  const std::string too_long(32768, 'x');
  const absl::Status id = EncodeEndTxnRequest({1, 1, "weir"}, {too_long, 1, 0, true}).status();
  EXPECT_EQ(id.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(id.message(), HasSubstr("transactional_id is 32768 bytes long"));
  EXPECT_EQ(EncodeApiVersionsRequest({0, 1, too_long}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(EncodeEndTxnRequest({1, 1, "weir"}, {too_long.substr(1), 1, 0, true}).ok());
  EXPECT_EQ(EncodeOffsetFetchRequest({5, 1, "weir"}, {too_long, {}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeOffsetFetchRequest({5, 1, "weir"}, {"g", {{too_long, {0}}}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeDescribeTransactionsRequest({0, 1, "weir"}, {{"t", too_long}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(KafkaCodecTest, PicksTheHighestCommonVersion) {
  // The real broker's ranges (kApiVersionsV2Response).
  EXPECT_THAT(HighestCommonVersion(kEndTxnVersions, {0, 5}), Optional(int16_t{4}));
  EXPECT_THAT(HighestCommonVersion(kFindCoordinatorVersions, {0, 6}), Optional(int16_t{2}));
  EXPECT_THAT(HighestCommonVersion(kApiVersionsVersions, {0, 4}), Optional(int16_t{2}));
  // A broker that dropped old versions (KIP-896) or an old broker.
  EXPECT_THAT(HighestCommonVersion(kEndTxnVersions, {1, 5}), Optional(int16_t{4}));
  EXPECT_THAT(HighestCommonVersion(kEndTxnVersions, {0, 1}), Optional(int16_t{1}));
  EXPECT_EQ(HighestCommonVersion(kEndTxnVersions, {5, 6}), std::nullopt);
  EXPECT_EQ(HighestCommonVersion(kFindCoordinatorVersions, {3, 6}), std::nullopt);
  EXPECT_THAT(HighestCommonVersion(kOffsetFetchVersions, {1, 9}), Optional(int16_t{5}));
  EXPECT_THAT(HighestCommonVersion(kOffsetFetchVersions, {0, 3}), Optional(int16_t{3}));
  EXPECT_EQ(HighestCommonVersion(kOffsetFetchVersions, {6, 10}), std::nullopt);
  EXPECT_THAT(HighestCommonVersion(kDescribeTransactionsVersions, {0, 0}), Optional(int16_t{0}));
}

// ---------------------------------------------------------------------------
// Decoding what the real broker sent.

TEST(KafkaCodecTest, DecodesTheBrokersApiVersionsResponses) {
  absl::StatusOr<ApiVersionsResponse> v2 =
      DecodeApiVersionsResponse(2, Bytes(kApiVersionsV2Response));
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ(v2->correlation_id, 1);
  EXPECT_EQ(v2->error_code, kNone);
  EXPECT_EQ(v2->apis.size(), 73u);
  EXPECT_EQ(v2->throttle_time_ms, 0);
  EXPECT_EQ(v2->VersionsOf(kEndTxnKey), (VersionRange{0, 5}));
  EXPECT_EQ(v2->VersionsOf(kFindCoordinatorKey), (VersionRange{0, 6}));
  EXPECT_EQ(v2->VersionsOf(kApiVersionsKey), (VersionRange{0, 4}));
  EXPECT_EQ(v2->VersionsOf(/*Produce=*/0), (VersionRange{0, 13}));
  // Kafka 4 dropped OffsetFetch v0 (KIP-896); DescribeTransactions has v0 only.
  EXPECT_EQ(v2->VersionsOf(kOffsetFetchKey), (VersionRange{1, 9}));
  EXPECT_EQ(v2->VersionsOf(kDescribeTransactionsKey), (VersionRange{0, 0}));
  EXPECT_EQ(v2->VersionsOf(/*no such API=*/999), std::nullopt);

  absl::StatusOr<ApiVersionsResponse> v0 =
      DecodeApiVersionsResponse(0, Bytes(kApiVersionsV0Response));
  ASSERT_TRUE(v0.ok()) << v0.status();
  EXPECT_EQ(v0->correlation_id, 11);
  EXPECT_EQ(v0->apis.size(), 73u);
  EXPECT_EQ(v0->VersionsOf(kEndTxnKey), (VersionRange{0, 5}));
}

TEST(KafkaCodecTest, DecodesAnUnsupportedVersionAnswerInTheV0Layout) {
  absl::StatusOr<ApiVersionsResponse> response =
      DecodeApiVersionsResponse(2, Bytes(kApiVersionsUnsupportedResponse));
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->correlation_id, 13);
  EXPECT_EQ(response->error_code, kUnsupportedVersion);
  EXPECT_EQ(response->VersionsOf(kApiVersionsKey), (VersionRange{0, 4}));
}

TEST(KafkaCodecTest, DecodesTheBrokersFindCoordinatorResponses) {
  for (const auto& [version, bytes, correlation_id] :
       {std::tuple{int16_t{2}, kFindCoordinatorV2Response, 2},
        std::tuple{int16_t{1}, kFindCoordinatorV1Response, 14}}) {
    absl::StatusOr<FindCoordinatorResponse> response =
        DecodeFindCoordinatorResponse(version, Bytes(bytes));
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_EQ(response->correlation_id, correlation_id);
    EXPECT_EQ(response->throttle_time_ms, 0);
    EXPECT_EQ(response->error_code, kNone);
    EXPECT_EQ(response->error_message, "NONE");
    EXPECT_EQ(response->node_id, 1);
    EXPECT_EQ(response->host, "127.0.0.1");
    EXPECT_EQ(response->port, 34245);
  }
}

TEST(KafkaCodecTest, DecodesTheBrokersEndTxnResponses) {
  struct Case {
    int16_t version;
    absl::string_view bytes;
    int32_t correlation_id;
    int16_t error_code;
  };
  for (const Case& c : {Case{4, kEndTxnV4None, 3, kNone},
                        Case{4, kEndTxnV4InvalidTxnState, 3, kInvalidTxnState},
                        Case{4, kEndTxnV4ProducerFenced, 3, kProducerFenced},
                        Case{4, kEndTxnV4InvalidProducerIdMapping, 26, kInvalidProducerIdMapping},
                        Case{1, kEndTxnV1None, 21, kNone},
                        Case{1, kEndTxnV1InvalidTxnState, 22, kInvalidTxnState},
                        Case{1, kEndTxnV1InvalidProducerEpoch, 23, kInvalidProducerEpoch},
                        Case{1, kEndTxnV1InvalidProducerIdMapping, 27, kInvalidProducerIdMapping},
                        Case{2, kEndTxnV2ProducerFenced, 24, kProducerFenced}}) {
    absl::StatusOr<EndTxnResponse> response = DecodeEndTxnResponse(c.version, Bytes(c.bytes));
    ASSERT_TRUE(response.ok()) << c.bytes << ": " << response.status();
    EXPECT_EQ(response->correlation_id, c.correlation_id) << c.bytes;
    EXPECT_EQ(response->throttle_time_ms, 0) << c.bytes;
    EXPECT_EQ(response->error_code, c.error_code) << c.bytes;
  }
}

TEST(KafkaCodecTest, DecodesTheBrokersOffsetFetchResponses) {
  struct Case {
    int16_t version;
    absl::string_view bytes;
    int32_t correlation_id;
  };
  for (const Case& c : {Case{1, kOffsetFetchV1NoOffset, 104}, Case{2, kOffsetFetchV2NoOffset, 105},
                        Case{3, kOffsetFetchV3NoOffset, 106}, Case{5, kOffsetFetchV5NoOffset, 107}}) {
    absl::StatusOr<OffsetFetchResponse> response =
        DecodeOffsetFetchResponse(c.version, Bytes(c.bytes));
    ASSERT_TRUE(response.ok()) << c.bytes << ": " << response.status();
    EXPECT_EQ(response->correlation_id, c.correlation_id);
    EXPECT_EQ(response->error_code, kNone);
    ASSERT_EQ(response->topics.size(), 1u);
    EXPECT_EQ(response->topics[0].name, "weir-cap-topic");
    ASSERT_EQ(response->topics[0].partitions.size(), 1u);
    const OffsetFetchResponse::Partition& p = response->topics[0].partitions[0];
    EXPECT_EQ(p.partition_index, 0);
    EXPECT_EQ(p.committed_offset, -1);
    EXPECT_EQ(p.committed_leader_epoch, -1);
    EXPECT_EQ(p.metadata, "");
    EXPECT_EQ(p.error_code, kNone);
  }

  absl::StatusOr<OffsetFetchResponse> loading =
      DecodeOffsetFetchResponse(2, Bytes(kOffsetFetchV2NotCoordinator));
  ASSERT_TRUE(loading.ok()) << loading.status();
  EXPECT_TRUE(loading->topics.empty());
  EXPECT_EQ(loading->error_code, kNotCoordinator);
}

TEST(KafkaCodecTest, DecodesACommittedOffsetWithItsMetadata) {
  absl::StatusOr<OffsetFetchResponse> response =
      DecodeOffsetFetchResponse(5, Bytes(kOffsetFetchV5Committed));
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->correlation_id, 7);
  ASSERT_EQ(response->topics.size(), 1u);
  ASSERT_EQ(response->topics[0].partitions.size(), 1u);
  const OffsetFetchResponse::Partition& p = response->topics[0].partitions[0];
  EXPECT_EQ(p.committed_offset, 0x123456789);
  EXPECT_EQ(p.committed_leader_epoch, 4);
  EXPECT_EQ(p.metadata, "weir v1 data");

  // Null metadata (length -1 at offset 37 instead of 2 + 12 bytes) is allowed.
  std::string frame = Bytes(kOffsetFetchV5Committed);
  frame.replace(37, 14, Bytes("ffff"));
  response = DecodeOffsetFetchResponse(5, frame);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->topics[0].partitions[0].metadata, std::nullopt);
}

TEST(KafkaCodecTest, DecodesTheBrokersDescribeTransactionsResponses) {
  absl::StatusOr<DescribeTransactionsResponse> unknown =
      DecodeDescribeTransactionsResponse(0, Bytes(kDescribeTransactionsNotFound));
  ASSERT_TRUE(unknown.ok()) << unknown.status();
  EXPECT_EQ(unknown->correlation_id, 103);
  ASSERT_EQ(unknown->transaction_states.size(), 1u);
  EXPECT_EQ(unknown->transaction_states[0].error_code, kTransactionalIdNotFound);
  EXPECT_EQ(unknown->transaction_states[0].transactional_id, "weir-cap-unknown-id");
  EXPECT_EQ(unknown->transaction_states[0].state, "");
  EXPECT_TRUE(unknown->transaction_states[0].topics.empty());

  absl::StatusOr<DescribeTransactionsResponse> ongoing =
      DecodeDescribeTransactionsResponse(0, Bytes(kDescribeTransactionsOngoing));
  ASSERT_TRUE(ongoing.ok()) << ongoing.status();
  EXPECT_EQ(ongoing->correlation_id, 8);
  ASSERT_EQ(ongoing->transaction_states.size(), 1u);
  const DescribeTransactionsResponse::TransactionState& state = ongoing->transaction_states[0];
  EXPECT_EQ(state.error_code, kNone);
  EXPECT_EQ(state.transactional_id, "txn-1");
  EXPECT_EQ(state.state, "Ongoing");
  EXPECT_EQ(state.timeout_ms, 60000);
  EXPECT_EQ(state.start_time_ms, 0x18c00000000);
  EXPECT_EQ(state.producer_id, 0x1000);
  EXPECT_EQ(state.producer_epoch, 3);
  ASSERT_EQ(state.topics.size(), 1u);
  EXPECT_EQ(state.topics[0].name, "out");
  EXPECT_THAT(state.topics[0].partitions, ElementsAre(0, 2));
}

TEST(KafkaCodecTest, SkipsTaggedFieldsOfFlexibleResponses) {
  // A header tag (tag 7, 3 bytes) and a body tag (tag 0, 2 bytes): ignored.
  absl::StatusOr<EndTxnResponse> response =
      DecodeEndTxnResponse(4, Bytes("00000009 01 07 03 aabbcc 00000064 0000 01 00 02 dddd"));
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->correlation_id, 9);
  EXPECT_EQ(response->throttle_time_ms, 100);
  EXPECT_EQ(response->error_code, kNone);
}

// ---------------------------------------------------------------------------
// Broken bytes.

// Every decoder of `version` on every proper prefix of `frame`.
void ExpectEveryPrefixRefused(absl::string_view api, int16_t version, const std::string& frame) {
  for (size_t n = 0; n < frame.size(); ++n) {
    const std::string prefix = frame.substr(0, n);
    absl::Status status;
    if (api == "ApiVersions") status = DecodeApiVersionsResponse(version, prefix).status();
    if (api == "FindCoordinator") status = DecodeFindCoordinatorResponse(version, prefix).status();
    if (api == "EndTxn") status = DecodeEndTxnResponse(version, prefix).status();
    if (api == "OffsetFetch") status = DecodeOffsetFetchResponse(version, prefix).status();
    if (api == "DescribeTransactions") {
      status = DecodeDescribeTransactionsResponse(version, prefix).status();
    }
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss)
        << api << " v" << version << " cut to " << n << " of " << frame.size()
        << " bytes: " << status;
    EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("truncated ", api, " v", version)));
  }
}

TEST(KafkaCodecTest, RefusesEveryTruncationOfTheBrokersResponses) {
  ExpectEveryPrefixRefused("ApiVersions", 2, Bytes(kApiVersionsV2Response));
  ExpectEveryPrefixRefused("ApiVersions", 0, Bytes(kApiVersionsV0Response));
  ExpectEveryPrefixRefused("FindCoordinator", 2, Bytes(kFindCoordinatorV2Response));
  ExpectEveryPrefixRefused("FindCoordinator", 1, Bytes(kFindCoordinatorV1Response));
  ExpectEveryPrefixRefused("EndTxn", 4, Bytes(kEndTxnV4ProducerFenced));
  ExpectEveryPrefixRefused("EndTxn", 1, Bytes(kEndTxnV1InvalidProducerEpoch));
  ExpectEveryPrefixRefused("OffsetFetch", 1, Bytes(kOffsetFetchV1NoOffset));
  ExpectEveryPrefixRefused("OffsetFetch", 2, Bytes(kOffsetFetchV2NoOffset));
  ExpectEveryPrefixRefused("OffsetFetch", 3, Bytes(kOffsetFetchV3NoOffset));
  ExpectEveryPrefixRefused("OffsetFetch", 5, Bytes(kOffsetFetchV5NoOffset));
  ExpectEveryPrefixRefused("OffsetFetch", 5, Bytes(kOffsetFetchV5Committed));
  ExpectEveryPrefixRefused("DescribeTransactions", 0, Bytes(kDescribeTransactionsNotFound));
  ExpectEveryPrefixRefused("DescribeTransactions", 0, Bytes(kDescribeTransactionsOngoing));
}

TEST(KafkaCodecTest, NamesTheFieldAndOffsetOfATruncation) {
  const absl::Status status =
      DecodeEndTxnResponse(4, Bytes("00000003 00 00000000 00")).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(status.message(),
            "truncated EndTxn v4 response: error_code at offset 9 needs 2 bytes but only 1 "
            "remain");
}

TEST(KafkaCodecTest, RefusesTrailingBytes) {
  const absl::Status end_txn =
      DecodeEndTxnResponse(1, Bytes(absl::StrCat(kEndTxnV1None, "00"))).status();
  EXPECT_EQ(end_txn.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(end_txn.message(), HasSubstr("1 unexpected bytes"));
  // A v2 answer read as v0 leaves the throttle time over.
  EXPECT_EQ(DecodeApiVersionsResponse(0, Bytes(kApiVersionsV2Response)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      DecodeFindCoordinatorResponse(2, Bytes(absl::StrCat(kFindCoordinatorV2Response, "ff")))
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(KafkaCodecTest, RefusesMalformedLengthsAndCounts) {
  // The captured FindCoordinator v2 answer with the host's length (offset 20)
  // replaced.
  std::string frame = Bytes(kFindCoordinatorV2Response);
  frame.replace(20, 2, Bytes("fffe"));
  absl::Status status = DecodeFindCoordinatorResponse(2, frame).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("host at offset 20 has length -2"));
  frame.replace(20, 2, Bytes("ffff"));
  status = DecodeFindCoordinatorResponse(2, frame).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("host at offset 20 is null"));
  frame.replace(20, 2, Bytes("7fff"));
  EXPECT_EQ(DecodeFindCoordinatorResponse(2, frame).status().code(), absl::StatusCode::kDataLoss);

  // ApiVersions' api_keys count (offset 6): negative, and far beyond the bytes.
  std::string versions = Bytes(kApiVersionsV2Response);
  versions.replace(6, 4, Bytes("ffffffff"));
  status = DecodeApiVersionsResponse(2, versions).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("api_keys at offset 6 has -1 entries"));
  versions.replace(6, 4, Bytes("7fffffff"));
  status = DecodeApiVersionsResponse(2, versions).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr("claims 2147483647 entries"));
}

TEST(KafkaCodecTest, RefusesMalformedOffsetFetchAndDescribeTransactionsAnswers) {
  // A v5 answer read as v3 (no leader epoch) and the other way round.
  EXPECT_EQ(DecodeOffsetFetchResponse(3, Bytes(kOffsetFetchV5NoOffset)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_NE(DecodeOffsetFetchResponse(5, Bytes(kOffsetFetchV3NoOffset)).status().code(),
            absl::StatusCode::kOk);
  // The partition count (offset 24 of the v1 answer): negative, and huge.
  std::string frame = Bytes(kOffsetFetchV1NoOffset);
  frame.replace(24, 4, Bytes("ffffffff"));
  absl::Status status = DecodeOffsetFetchResponse(1, frame).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("partitions at offset 24 has -1 entries"));
  frame.replace(24, 4, Bytes("01000000"));
  status = DecodeOffsetFetchResponse(1, frame).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr("claims 16777216 entries"));
  // Metadata with a negative length other than -1.
  frame = Bytes(kOffsetFetchV1NoOffset);
  frame.replace(40, 2, Bytes("fffe"));
  status = DecodeOffsetFetchResponse(1, frame).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("metadata at offset 40 has length -2"));

  // DescribeTransactions: a null transaction_states array (compact 0), a
  // null id, a count far beyond the bytes, trailing bytes.
  status = DecodeDescribeTransactionsResponse(0, Bytes("00000067 00 00000000 00 00")).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("transaction_states at offset 9 is null"));
  frame = Bytes(kDescribeTransactionsNotFound);
  frame[12] = 0;
  status = DecodeDescribeTransactionsResponse(0, frame).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("transactional_id at offset 12 is null"));
  status = DecodeDescribeTransactionsResponse(0, Bytes("00000067 00 00000000 ffffffff0f")).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr("claims 4294967294 entries"));
  EXPECT_EQ(DecodeDescribeTransactionsResponse(
                0, Bytes(absl::StrCat(kDescribeTransactionsNotFound, "00")))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(KafkaCodecTest, RefusesMalformedTaggedFields) {
  // A varint whose fifth byte spills over 32 bits, and one longer than that.
  absl::Status status = DecodeEndTxnResponse(4, Bytes("00000003 ffffffff7f")).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("overflows 32 bits"));
  EXPECT_EQ(DecodeEndTxnResponse(4, Bytes("00000003 ffffffff8f01")).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A tag whose size runs past the end.
  status = DecodeEndTxnResponse(4, Bytes("00000003 01 00 09 aabb")).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  // A huge tag count with nothing behind it.
  EXPECT_EQ(DecodeEndTxnResponse(4, Bytes("00000003 ffffffff0f")).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(KafkaCodecTest, RefusesToDecodeVersionsItDoesNotSpeak) {
  EXPECT_EQ(DecodeEndTxnResponse(5, Bytes(kEndTxnV4None)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeFindCoordinatorResponse(0, Bytes(kFindCoordinatorV1Response)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeApiVersionsResponse(3, Bytes(kApiVersionsV2Response)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeOffsetFetchResponse(0, Bytes(kOffsetFetchV1NoOffset)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeOffsetFetchResponse(6, Bytes(kOffsetFetchV5NoOffset)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeDescribeTransactionsResponse(1, Bytes(kDescribeTransactionsNotFound))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(KafkaCodecTest, ChecksTheResponseSize) {
  const absl::StatusOr<int32_t> size = DecodeResponseSize(Bytes("000001c4"));
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(*size, 452);
  EXPECT_EQ(DecodeResponseSize(Bytes("0000")).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeResponseSize(Bytes("ffffffff")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeResponseSize(Bytes("00000003")).status().code(),
            absl::StatusCode::kInvalidArgument);
  // 1 MiB is the most accepted; an HTTP server's "HTTP/1.1 ..." is 1.2 GB.
  EXPECT_TRUE(DecodeResponseSize(Bytes("00100000")).ok());
  const absl::Status http = DecodeResponseSize("HTTP/1.1 400").status();
  EXPECT_EQ(http.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(http.message(), HasSubstr("larger than the 1048576 bytes"));
}

TEST(KafkaCodecTest, SurvivesRandomAndMutatedBytes) {
  std::mt19937 random(20240611);
  const std::vector<std::string> seeds = {
      Bytes(kApiVersionsV2Response), Bytes(kFindCoordinatorV2Response), Bytes(kEndTxnV4None),
      Bytes(kEndTxnV1None), Bytes(kApiVersionsUnsupportedResponse),
      Bytes(kOffsetFetchV5Committed), Bytes(kOffsetFetchV2NoOffset),
      Bytes(kDescribeTransactionsOngoing), Bytes(kDescribeTransactionsNotFound)};
  auto expect_ok_or_refused = [](const absl::Status& status) {
    EXPECT_THAT(status.code(), AnyOf(absl::StatusCode::kOk, absl::StatusCode::kDataLoss,
                                     absl::StatusCode::kInvalidArgument))
        << status;
  };
  for (int i = 0; i < 20000; ++i) {
    std::string bytes;
    if (i % 2 == 0) {
      bytes.resize(random() % 64);
      for (char& c : bytes) c = static_cast<char>(random());
    } else {
      bytes = seeds[random() % seeds.size()];
      for (int flips = 1 + static_cast<int>(random() % 4); flips > 0; --flips) {
        bytes[random() % bytes.size()] = static_cast<char>(random());
      }
      bytes.resize(random() % (bytes.size() + 1));
    }
    for (int16_t v = kApiVersionsVersions.min; v <= kApiVersionsVersions.max; ++v) {
      expect_ok_or_refused(DecodeApiVersionsResponse(v, bytes).status());
    }
    for (int16_t v = kFindCoordinatorVersions.min; v <= kFindCoordinatorVersions.max; ++v) {
      expect_ok_or_refused(DecodeFindCoordinatorResponse(v, bytes).status());
    }
    for (int16_t v = kEndTxnVersions.min; v <= kEndTxnVersions.max; ++v) {
      expect_ok_or_refused(DecodeEndTxnResponse(v, bytes).status());
    }
    for (int16_t v = kOffsetFetchVersions.min; v <= kOffsetFetchVersions.max; ++v) {
      expect_ok_or_refused(DecodeOffsetFetchResponse(v, bytes).status());
    }
    expect_ok_or_refused(DecodeDescribeTransactionsResponse(0, bytes).status());
    expect_ok_or_refused(DecodeResponseSize(bytes).status());
  }
}

// ---------------------------------------------------------------------------
// Errors as statuses.

TEST(KafkaErrorsTest, NamesCodesAndCarriesThemInStatuses) {
  EXPECT_EQ(KafkaErrorName(kInvalidTxnState), "INVALID_TXN_STATE");
  EXPECT_EQ(KafkaErrorName(kProducerFenced), "PRODUCER_FENCED");
  EXPECT_EQ(DescribeKafkaError(kInvalidProducerEpoch), "INVALID_PRODUCER_EPOCH (47)");
  EXPECT_EQ(DescribeKafkaError(999), "UNKNOWN_ERROR_CODE (999)");

  const absl::Status status = WithKafkaErrorCode(absl::DataLossError("lost"), kInvalidTxnState);
  EXPECT_THAT(KafkaErrorCodeOf(status), Optional(kInvalidTxnState));
  EXPECT_EQ(status.message(), "lost");
  EXPECT_THAT(KafkaErrorCodeOf(WithKafkaErrorCode(absl::UnknownError("x"), -1)),
              Optional(int16_t{-1}));
  EXPECT_EQ(KafkaErrorCodeOf(absl::UnavailableError("connection refused")), std::nullopt);
  EXPECT_EQ(KafkaErrorCodeOf(absl::OkStatus()), std::nullopt);
  EXPECT_TRUE(WithKafkaErrorCode(absl::OkStatus(), kInvalidTxnState).ok());
}

TEST(KafkaErrorsTest, MapsEndTxnAnswersToStatuses) {
  struct Case {
    int16_t error_code;
    bool committed;
    absl::StatusCode expected;
  };
  const std::vector<Case> cases = {
      {kInvalidTxnState, true, absl::StatusCode::kDataLoss},
      {kInvalidProducerEpoch, true, absl::StatusCode::kDataLoss},
      {kProducerFenced, true, absl::StatusCode::kDataLoss},
      {kInvalidProducerIdMapping, true, absl::StatusCode::kDataLoss},
      {kUnknownProducerId, true, absl::StatusCode::kDataLoss},
      {kTransactionalIdNotFound, true, absl::StatusCode::kDataLoss},
      {kTransactionAbortable, true, absl::StatusCode::kDataLoss},
      {kInvalidTxnState, false, absl::StatusCode::kFailedPrecondition},
      {kInvalidProducerEpoch, false, absl::StatusCode::kFailedPrecondition},
      {kProducerFenced, false, absl::StatusCode::kFailedPrecondition},
      {kInvalidProducerIdMapping, false, absl::StatusCode::kFailedPrecondition},
      {kTransactionalIdNotFound, false, absl::StatusCode::kFailedPrecondition},
      {kTransactionalIdAuthorizationFailed, true, absl::StatusCode::kPermissionDenied},
      {kClusterAuthorizationFailed, false, absl::StatusCode::kPermissionDenied},
      {kUnsupportedVersion, true, absl::StatusCode::kUnimplemented},
      {kInvalidRequest, true, absl::StatusCode::kUnknown},
      {kUnknownServerError, false, absl::StatusCode::kUnknown},
  };
  for (const Case& c : cases) {
    const absl::Status status = EndTxnResultToStatus(c.error_code, c.committed, "committing 't'");
    EXPECT_EQ(status.code(), c.expected) << status;
    EXPECT_THAT(KafkaErrorCodeOf(status), Optional(c.error_code)) << status;
    EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("committing 't': ",
                                                         DescribeKafkaError(c.error_code))));
  }
  EXPECT_TRUE(EndTxnResultToStatus(kNone, true, "x").ok());
  EXPECT_THAT(EndTxnResultToStatus(kInvalidTxnState, true, "x").message(),
              HasSubstr("most likely the broker aborted it"));
  EXPECT_THAT(EndTxnResultToStatus(kInvalidTxnState, false, "x").message(),
              HasSubstr("most likely it was already committed"));
}

// ---------------------------------------------------------------------------
// Bootstrap servers.

TEST(BootstrapServersTest, ParsesLists) {
  absl::StatusOr<std::vector<BrokerAddress>> servers =
      ParseBootstrapServers(" 127.0.0.1:9092, kafka-2.example:19092 ,[::1]:9093,PLAINTEXT://h:1,");
  ASSERT_TRUE(servers.ok()) << servers.status();
  EXPECT_THAT(*servers, ElementsAre(BrokerAddress{"127.0.0.1", 9092},
                                    BrokerAddress{"kafka-2.example", 19092},
                                    BrokerAddress{"::1", 9093}, BrokerAddress{"h", 1}));
  EXPECT_EQ((*servers)[2].ToString(), "[::1]:9093");
}

TEST(BootstrapServersTest, RefusesMalformedEntriesNamingThem) {
  for (const char* bad : {"", " , ", "host", "host:", "host:0", "host:65536", "host:x", ":9092",
                          "::1:9092", "[::1]9092", "[::1", "ssl://host:9093",
                          "SASL_SSL://host:9093"}) {
    const absl::Status status = ParseBootstrapServers(bad).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << "'" << bad << "'";
  }
  EXPECT_THAT(ParseBootstrapServers("a:1,b:99999").status().message(),
              HasSubstr("bootstrap server 'b:99999' has port '99999'"));
  EXPECT_THAT(ParseBootstrapServers("ssl://a:1").status().message(),
              HasSubstr("only plaintext connections are supported"));
}

TEST(TransactionClientArgumentsTest, RefusesBadOptionsAndArgumentsWithoutContactingABroker) {
  TransactionClientOptions options;
  options.deadline = absl::ZeroDuration();
  EXPECT_EQ(TransactionClient::Create("127.0.0.1:9", options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options = {};
  options.client_id = "";
  EXPECT_EQ(TransactionClient::Create("127.0.0.1:9", options).status().code(),
            absl::StatusCode::kInvalidArgument);

  absl::StatusOr<TransactionClient> client = TransactionClient::Create("127.0.0.1:9");
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ(client->CommitTransaction("", 1, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->CommitTransaction("t", -1, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->AbortTransaction("t", 1, -1).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::connectors::kafka_protocol
