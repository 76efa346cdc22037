// The exactly-once Kafka sink's outcome markers and the classification of a
// recovery commit (kafka_transactional_sink.h, rule 2), row by row.
#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "connectors/kafka/kafka_transactional_sink.h"
#include "connectors/kafka/protocol/kafka_errors.h"
#include "connectors/kafka/protocol/transaction_client.h"
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

// What a start found on an id before initializing it, and whether its
// initialization owes an init marker (docs/design/kafka-restores.md, 2.6).
IdBeforeStart Before(const char* state, int64_t pid = 1000, int16_t epoch = 4,
                     std::optional<int64_t> newest_marker = std::nullopt) {
  IdBeforeStart before;
  before.description = kp::TransactionDescription{
      .found = true, .state = state, .producer_id = pid, .producer_epoch = epoch, .timeout_ms = 900000};
  before.newest_marker = newest_marker;
  return before;
}

IdBeforeStart NotFound() {
  IdBeforeStart before;
  before.description = kp::TransactionDescription{};
  return before;
}

TEST(InitMarkerTest, AnIdWithSomethingOpenOrUnknownAlwaysGetsOne) {
  // Open, or being ended: this initialization may abort a transaction some checkpoint lists.
  for (const char* state : {"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence", "Dead", "Other"}) {
    EXPECT_FALSE(SettledBeforeStart(Before(state))) << state;
    EXPECT_TRUE(InitNeedsMarker(Before(state), 1000, 5)) << state;
  }
  // Aborted: maybe by an initialization that died before its own marker.
  EXPECT_FALSE(SettledBeforeStart(Before("CompleteAbort")));
  EXPECT_TRUE(InitNeedsMarker(Before("CompleteAbort"), 1000, 5));
  // Unknown: the brokers cannot describe transactions, or a request failed.
  EXPECT_FALSE(SettledBeforeStart(IdBeforeStart{}));
  EXPECT_TRUE(InitNeedsMarker(IdBeforeStart{}, 1000, 5));
}

TEST(InitMarkerTest, AnIdEmptySinceAFenceOrWithoutItsPreviousSessionsMarkerGetsOne) {
  // An initialization that fenced a transaction of session 2 (epoch 3) and
  // then one more (epoch 4) left "Empty" behind: the newest marker is older
  // than session 3.
  EXPECT_FALSE(SettledBeforeStart(Before("Empty", 1000, 4, Marker(1000, 2, MarkerKind::kData))));
  EXPECT_FALSE(SettledBeforeStart(Before("Empty", 1000, 4, Marker(1000, 2, MarkerKind::kInit))));
  EXPECT_FALSE(SettledBeforeStart(Before("Empty", 1000, 4)));  // no marker at all
  EXPECT_FALSE(SettledBeforeStart(Before("Empty", 1000, 4, Marker(999, 3, MarkerKind::kData))));  // other producer id
  EXPECT_TRUE(InitNeedsMarker(Before("Empty", 1000, 4, Marker(1000, 2, MarkerKind::kData)), 1000, 5));
}

TEST(InitMarkerTest, AnInitializationThatMovesASettledIdOneSessionOnOwesNone) {
  // Unknown to the broker: this initialization creates it.
  EXPECT_TRUE(SettledBeforeStart(NotFound()));
  EXPECT_FALSE(InitNeedsMarker(NotFound(), 2000, 0));
  // The last transaction committed; its marker is the newest.
  EXPECT_TRUE(SettledBeforeStart(Before("CompleteCommit")));
  EXPECT_FALSE(InitNeedsMarker(Before("CompleteCommit"), 1000, 5));
  // Released after the commit of session 3 (data or init marker): one initialization since.
  for (MarkerKind kind : {MarkerKind::kData, MarkerKind::kInit}) {
    const IdBeforeStart released = Before("Empty", 1000, 4, Marker(1000, 3, kind));
    EXPECT_TRUE(SettledBeforeStart(released));
    EXPECT_FALSE(InitNeedsMarker(released, 1000, 5));
  }
  // Only ever initialized.
  EXPECT_TRUE(SettledBeforeStart(Before("Empty", 3000, 0)));
  EXPECT_FALSE(InitNeedsMarker(Before("Empty", 3000, 0), 3000, 1));
}

TEST(InitMarkerTest, ASettledIdThatMovedMoreThanOneSessionGetsOne) {
  // Something began on the id between the description and the
  // initialization, and the initialization fenced it (two epochs), or the
  // producer id rotated: it may have aborted a listed transaction.
  EXPECT_TRUE(InitNeedsMarker(NotFound(), 2000, 2));
  EXPECT_TRUE(InitNeedsMarker(Before("CompleteCommit"), 1000, 6));
  EXPECT_TRUE(InitNeedsMarker(Before("CompleteCommit"), 1001, 0));
  EXPECT_TRUE(InitNeedsMarker(Before("Empty", 1000, 4, Marker(1000, 3, MarkerKind::kData)), 1000, 6));
  EXPECT_TRUE(InitNeedsMarker(Before("Empty", 3000, 0), 3000, 2));
}

}  // namespace
}  // namespace weir::connectors
