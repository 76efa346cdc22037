// The exactly-once Kafka sink's outcome markers and the classification of a
// recovery commit (kafka_transactional_sink.h, rule 2), row by row.
#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "connectors/kafka/kafka_transactional_sink.h"
#include "connectors/kafka/protocol/kafka_errors.h"
#include "gtest/gtest.h"

namespace weir::connectors {
namespace {

namespace kp = kafka_protocol;

absl::Status Answer(int16_t code) {
  return kp::WithKafkaErrorCode(absl::DataLossError(kp::DescribeKafkaError(code)), code);
}

int64_t Marker(int64_t pid, int16_t epoch, MarkerKind kind) {
  absl::StatusOr<int64_t> offset = MarkerOffset(pid, epoch, kind);
  EXPECT_TRUE(offset.ok()) << offset.status();
  return offset.value_or(-1);
}

TEST(MarkerOffsetTest, OrdersSessionsAsTheBrokerHandsThemOut) {
  // Within a producer id by epoch; an init marker before its session's data.
  EXPECT_LT(Marker(7, 0, MarkerKind::kData), Marker(7, 1, MarkerKind::kInit));
  EXPECT_LT(Marker(7, 1, MarkerKind::kInit), Marker(7, 1, MarkerKind::kData));
  // A new producer id (rotation after the last epoch) comes after every epoch of the old one.
  EXPECT_LT(Marker(7, 32767, MarkerKind::kData), Marker(8, 0, MarkerKind::kInit));
  EXPECT_GE(Marker(0, 0, MarkerKind::kInit), 0);  // librdkafka skips negative offsets
  EXPECT_EQ(DescribeMarker(Marker(1234, 56, MarkerKind::kData)), "producer id 1234, epoch 56, data");
  EXPECT_EQ(DescribeMarker(Marker(1234, 56, MarkerKind::kInit)), "producer id 1234, epoch 56, initialization");
}

TEST(MarkerOffsetTest, RefusesWhatDoesNotFit) {
  EXPECT_EQ(MarkerOffset(int64_t{1} << 46, 0, MarkerKind::kData).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(MarkerOffset(-1, 0, MarkerKind::kData).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(MarkerOffset(5, -1, MarkerKind::kData).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(MarkerOffset((int64_t{1} << 46) - 1, 32767, MarkerKind::kData).ok());
}

class ClassifyTest : public ::testing::Test {
 protected:
  Committable t_{.transactional_id = "p-0-1", .producer_id = 1000, .producer_epoch = 4, .checkpoint_id = 9};
  int64_t own_ = Marker(1000, 4, MarkerKind::kData);
};

TEST_F(ClassifyTest, ACommitThatWorkedIsCommittedWhateverTheMarkers) {
  EXPECT_EQ(ClassifyRestoredCommit(absl::OkStatus(), std::nullopt, std::nullopt, t_), RestoredCommit::kCommitted);
}

TEST_F(ClassifyTest, ItsOwnMarkerMeansItWasCommitted) {
  for (int16_t code : {kp::kProducerFenced, kp::kInvalidProducerEpoch, kp::kInvalidTxnState,
                       kp::kInvalidProducerIdMapping, kp::kUnknownProducerId, kp::kTransactionalIdNotFound}) {
    EXPECT_EQ(ClassifyRestoredCommit(Answer(code), own_, std::nullopt, t_), RestoredCommit::kAlreadyCommitted) << code;
  }
}

TEST_F(ClassifyTest, ANewerMarkerMeansALaterRunResolvedIt) {
  for (int64_t newer : {Marker(1000, 5, MarkerKind::kInit), Marker(1000, 5, MarkerKind::kData),
                        Marker(1001, 0, MarkerKind::kInit)}) {
    EXPECT_EQ(ClassifyRestoredCommit(Answer(kp::kProducerFenced), newer, std::nullopt, t_), RestoredCommit::kResolvedLater);
    EXPECT_EQ(ClassifyRestoredCommit(Answer(kp::kInvalidTxnState), newer, std::nullopt, t_), RestoredCommit::kResolvedLater);
    EXPECT_EQ(ClassifyRestoredCommit(Answer(kp::kInvalidProducerIdMapping), newer, std::nullopt, t_),
              RestoredCommit::kResolvedLater);
  }
}

TEST_F(ClassifyTest, ANewerMarkerWhoseChainReachesBackToItMeansCommitted) {
  const int64_t newer = Marker(1000, 9, MarkerKind::kData);
  // Every session since the transaction itself, or since an earlier one, followed a confirmed commit.
  for (int64_t chain : {own_, Marker(1000, 1, MarkerKind::kInit), Marker(999, 3, MarkerKind::kData)}) {
    EXPECT_EQ(ClassifyRestoredCommit(Answer(kp::kProducerFenced), newer, chain, t_), RestoredCommit::kAlreadyCommitted);
  }
  // The chain starts after it: a later session may have aborted it.
  for (int64_t chain : {Marker(1000, 5, MarkerKind::kInit), newer}) {
    EXPECT_EQ(ClassifyRestoredCommit(Answer(kp::kProducerFenced), newer, chain, t_), RestoredCommit::kResolvedLater);
  }
}

TEST(MarkerMetadataTest, CarriesTheChainAndRefusesAnythingElse) {
  EXPECT_EQ(MarkerChainFrom(MarkerMetadata(123456789)), std::optional<int64_t>(123456789));
  EXPECT_EQ(MarkerChainFrom(MarkerMetadata(-1)), std::nullopt);
  for (const char* other : {"", "weir v1", "weir v1 chain=", "weir v1 chain=-5", "weir v1 chain=12x", "other chain=5",
                            "weir v1 chain=99999999999999999999999"}) {
    EXPECT_EQ(MarkerChainFrom(other), std::nullopt) << other;
  }
}

TEST_F(ClassifyTest, AnOlderMarkerOrNoneWithTheIdKnownIsDataLoss) {
  // Nothing of Weir touched the id since: the broker aborted it on timeout.
  for (std::optional<int64_t> older : {std::optional<int64_t>(), std::optional<int64_t>(Marker(1000, 3, MarkerKind::kData)),
                                       std::optional<int64_t>(Marker(1000, 4, MarkerKind::kInit))}) {
    EXPECT_EQ(ClassifyRestoredCommit(Answer(kp::kProducerFenced), older, older, t_), RestoredCommit::kLost);
    EXPECT_EQ(ClassifyRestoredCommit(Answer(kp::kInvalidProducerEpoch), older, older, t_), RestoredCommit::kLost);
    EXPECT_EQ(ClassifyRestoredCommit(Answer(kp::kInvalidTxnState), older, older, t_), RestoredCommit::kLost);
  }
}

TEST_F(ClassifyTest, AnIdTheBrokerForgotWithoutAMarkerIsUnknown) {
  for (int16_t code : {kp::kInvalidProducerIdMapping, kp::kUnknownProducerId, kp::kTransactionalIdNotFound}) {
    EXPECT_EQ(ClassifyRestoredCommit(Answer(code), std::nullopt, std::nullopt, t_), RestoredCommit::kUnknown) << code;
  }
}

TEST_F(ClassifyTest, AbortableAndUnattributedLossStayDataLoss) {
  EXPECT_EQ(ClassifyRestoredCommit(Answer(kp::kTransactionAbortable), own_, std::nullopt, t_), RestoredCommit::kLost);
  EXPECT_EQ(ClassifyRestoredCommit(absl::DataLossError("no code"), own_, std::nullopt, t_), RestoredCommit::kLost);
}

TEST_F(ClassifyTest, NoAnswerIsAFailureToRetry) {
  EXPECT_EQ(ClassifyRestoredCommit(absl::UnavailableError("deadline"), own_, std::nullopt, t_), RestoredCommit::kFailed);
  EXPECT_EQ(ClassifyRestoredCommit(absl::PermissionDeniedError("acl"), std::nullopt, std::nullopt, t_), RestoredCommit::kFailed);
}

}  // namespace
}  // namespace weir::connectors
