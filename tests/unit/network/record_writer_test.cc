#include "taskmanager/network/record_writer.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/process.h"
#include "tests/unit/network/test_records.h"

namespace weir::taskmanager::network {
namespace {

using testing::DecodeBuffer;
using testing::TestRecord;
using testing::TestRecordKey;
using testing::TestRecordType;

constexpr absl::Duration kGuard = absl::Seconds(30);

// Everything waiting in one subpartition, in order.
std::vector<Buffer> Drain(ResultPartition& partition, int subpartition) {
  std::vector<Buffer> buffers;
  while (std::optional<Buffer> buffer = partition.Poll(subpartition)) buffers.push_back(std::move(*buffer));
  return buffers;
}

// The sequence numbers of the records waiting in one subpartition, in order.
std::vector<int64_t> DrainSeqs(ResultPartition& partition, int subpartition) {
  std::vector<int64_t> seqs;
  for (const Buffer& buffer : Drain(partition, subpartition)) {
    EXPECT_EQ(buffer.kind, Buffer::Kind::kData);
    std::vector<TestRecord> records;
    EXPECT_TRUE(DecodeBuffer(buffer, &records).ok());
    for (const TestRecord& r : records) seqs.push_back(r.seq);
  }
  return seqs;
}

void EmitSeqs(RecordWriter& writer, int count) {
  for (int i = 0; i < count; ++i) {
    TestRecord record{0, i, absl::StrCat("k", i), ""};
    writer.Emit(&record);
  }
}

TEST(RecordWriterTest, ForwardSendsToTheSameSubtask) {
  auto partition = std::make_shared<ResultPartition>("p", 3, 100);
  RecordWriter writer(partition, TestRecordType(), Partitioning::kForward, nullptr, 3, /*subtask_index=*/1);
  EmitSeqs(writer, 5);
  writer.FlushAll();
  EXPECT_EQ(DrainSeqs(*partition, 0), std::vector<int64_t>{});
  EXPECT_EQ(DrainSeqs(*partition, 1), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(DrainSeqs(*partition, 2), std::vector<int64_t>{});
  EXPECT_EQ(writer.records_out(), 5);
}

TEST(RecordWriterTest, ForwardBetweenDifferentParallelismsRebalances) {
  auto partition = std::make_shared<ResultPartition>("p", 2, 100);
  RecordWriterOptions options;
  options.producer_parallelism = 1;
  RecordWriter writer(partition, TestRecordType(), Partitioning::kForward, nullptr, 2, 0, options);
  EmitSeqs(writer, 4);
  writer.FlushAll();
  EXPECT_EQ(DrainSeqs(*partition, 0), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(DrainSeqs(*partition, 1), (std::vector<int64_t>{1, 3}));
}

TEST(RecordWriterTest, RebalanceGoesRoundRobinFromTheProducersIndex) {
  auto partition = std::make_shared<ResultPartition>("p", 3, 100);
  RecordWriter writer(partition, TestRecordType(), Partitioning::kRebalance, nullptr, 3, /*subtask_index=*/2);
  EmitSeqs(writer, 7);
  writer.FlushAll();
  EXPECT_EQ(DrainSeqs(*partition, 2), (std::vector<int64_t>{0, 3, 6}));
  EXPECT_EQ(DrainSeqs(*partition, 0), (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(DrainSeqs(*partition, 1), (std::vector<int64_t>{2, 5}));
}

TEST(RecordWriterTest, HashSendsEachKeyToItsKeyGroupsSubtask) {
  constexpr int kConsumers = 4;
  auto partition = std::make_shared<ResultPartition>("p", kConsumers, 1000);
  RecordWriter writer(partition, TestRecordType(), Partitioning::kHash, &TestRecordKey, kConsumers, 0);
  for (int i = 0; i < 400; ++i) {
    TestRecord record{0, i, absl::StrCat("user-", i % 40), ""};
    writer.Emit(&record);
  }
  writer.FlushAll();
  int total = 0;
  for (int sub = 0; sub < kConsumers; ++sub) {
    std::vector<TestRecord> records;
    for (const Buffer& buffer : Drain(*partition, sub)) ASSERT_TRUE(DecodeBuffer(buffer, &records).ok());
    EXPECT_FALSE(records.empty()) << "40 keys should reach every one of 4 subtasks";
    for (const TestRecord& r : records) {
      EXPECT_EQ(state::SubtaskForKeyGroup(state::KeyGroupForKey(r.key), state::kDefaultMaxParallelism, kConsumers), sub) << r.key;
    }
    total += static_cast<int>(records.size());
  }
  EXPECT_EQ(total, 400);
}

TEST(RecordWriterTest, BroadcastSendsEveryRecordEverywhereAndCountsItOnce) {
  auto partition = std::make_shared<ResultPartition>("p", 3, 100);
  RecordWriter writer(partition, TestRecordType(), Partitioning::kBroadcast, nullptr, 3, 1);
  EmitSeqs(writer, 3);
  writer.FlushAll();
  for (int sub = 0; sub < 3; ++sub) EXPECT_EQ(DrainSeqs(*partition, sub), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(writer.records_out(), 3);
}

TEST(RecordWriterTest, HandsOverFullBuffersAndFlushesWhenDue) {
  auto partition = std::make_shared<ResultPartition>("p", 1, 100);
  // Records of 13 + 2 ("k0") + 34 = 49 bytes, framed 50: two fill a buffer.
  RecordWriterOptions options;
  options.max_buffer_bytes = 100;
  options.flush_interval = absl::Milliseconds(100);
  RecordWriter writer(partition, TestRecordType(), Partitioning::kForward, nullptr, 1, 0, options);
  auto emit = [&writer](int seq) {
    TestRecord record{0, seq, absl::StrCat("k", seq % 10), std::string(34, 'x')};
    writer.Emit(&record);
  };
  emit(0);
  EXPECT_EQ(partition->buffered(0), 0);
  emit(1);
  EXPECT_EQ(partition->buffered(0), 1);
  std::vector<Buffer> full = Drain(*partition, 0);
  ASSERT_EQ(full.size(), 1u);
  EXPECT_EQ(full[0].record_count, 2);
  EXPECT_EQ(full[0].data.size(), 100u);

  const absl::Time t0 = absl::FromUnixSeconds(1000);
  emit(2);
  writer.FlushIfDue(t0);  // first call: due
  EXPECT_EQ(partition->buffered(0), 1);
  emit(3);
  writer.FlushIfDue(t0 + absl::Milliseconds(99));
  EXPECT_EQ(partition->buffered(0), 1) << "not due yet";
  writer.FlushIfDue(t0 + absl::Milliseconds(100));
  EXPECT_EQ(partition->buffered(0), 2);
  writer.FlushIfDue(t0 + absl::Milliseconds(300));
  EXPECT_EQ(partition->buffered(0), 2) << "nothing pending, nothing handed over";
  EXPECT_EQ(DrainSeqs(*partition, 0), (std::vector<int64_t>{2, 3}));
}

TEST(RecordWriterTest, EndOfInputFollowsTheLastRecordsOnEverySubpartition) {
  auto partition = std::make_shared<ResultPartition>("p", 2, 100);
  RecordWriter writer(partition, TestRecordType(), Partitioning::kRebalance, nullptr, 2, 0);
  EmitSeqs(writer, 3);
  writer.EmitEndOfInput();
  for (int sub = 0; sub < 2; ++sub) {
    std::vector<Buffer> buffers = Drain(*partition, sub);
    ASSERT_EQ(buffers.size(), 3u);
    EXPECT_EQ(buffers[0].kind, Buffer::Kind::kData);
    EXPECT_EQ(buffers[1].kind, Buffer::Kind::kEndOfData);
    EXPECT_EQ(buffers[2].kind, Buffer::Kind::kEndOfInput);
  }
}

// The final checkpoint's barrier goes out between the end of data and the
// end of input: consumers end their input, snapshot, and only then see the
// channel close.
TEST(RecordWriterTest, BarriersFollowTheEndOfDataUntilTheEndOfInput) {
  auto partition = std::make_shared<ResultPartition>("p", 2, 100);
  RecordWriter writer(partition, TestRecordType(), Partitioning::kRebalance, nullptr, 2, 0);
  EmitSeqs(writer, 2);
  writer.EmitEndOfData(/*final_checkpoint=*/true);
  writer.BroadcastBarrier(7, 0);
  writer.EmitEndOfInput();  // END_OF_DATA is not sent twice
  for (int sub = 0; sub < 2; ++sub) {
    std::vector<Buffer> buffers = Drain(*partition, sub);
    ASSERT_EQ(buffers.size(), 4u);
    EXPECT_EQ(buffers[0].kind, Buffer::Kind::kData);
    EXPECT_EQ(buffers[1].kind, Buffer::Kind::kEndOfData);
    EXPECT_TRUE(buffers[1].final_checkpoint);
    EXPECT_EQ(buffers[2].kind, Buffer::Kind::kBarrier);
    EXPECT_EQ(buffers[2].checkpoint_id, 7);
    EXPECT_EQ(buffers[3].kind, Buffer::Kind::kEndOfInput);
  }
}

// A forward edge's other subpartitions have no consumer: events must not
// land there, or the producer waits forever for them to be taken (a fan-out
// vertex at p >= 2 never finished; with checkpoints, barriers filled them).
TEST(RecordWriterTest, ForwardEventsGoOnlyToTheConsumedSubpartition) {
  auto partition = std::make_shared<ResultPartition>("p", 3, 2);
  RecordWriter writer(partition, TestRecordType(), Partitioning::kForward, nullptr, 3, /*subtask_index=*/1);
  EmitSeqs(writer, 1);
  // More barriers than a subpartition holds: must not block.
  writer.BroadcastBarrier(1, 0);
  EXPECT_EQ(partition->buffered(0), 0);
  EXPECT_EQ(partition->buffered(2), 0);
  std::vector<Buffer> taken = Drain(*partition, 1);
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_EQ(taken[1].kind, Buffer::Kind::kBarrier);
  for (int id = 2; id <= 5; ++id) {
    writer.BroadcastBarrier(id, 0);
    Drain(*partition, 1);
  }
  writer.EmitEndOfInput();
  EXPECT_EQ(partition->buffered(0), 0);
  EXPECT_EQ(partition->buffered(2), 0);
  ASSERT_EQ(partition->buffered(1), 2);
  std::vector<Buffer> ends = Drain(*partition, 1);
  EXPECT_EQ(ends[0].kind, Buffer::Kind::kEndOfData);
  EXPECT_EQ(ends[1].kind, Buffer::Kind::kEndOfInput);
}

// Event time: with timestamps on, every record carries its event time, and
// watermarks and statuses keep their place behind the records before them.
TEST(RecordWriterTest, TimestampedRecordsAndWatermarksKeepTheirOrder) {
  auto partition = std::make_shared<ResultPartition>("p", 2, 100);
  RecordWriterOptions options;
  options.timestamps = true;
  RecordWriter writer(partition, TestRecordType(), Partitioning::kRebalance, nullptr, 2, 0, options);
  TestRecord a{0, 1, "a", ""}, b{0, 2, "b", ""}, c{0, 3, "c", ""};
  writer.EmitAt(&a, 1000);
  writer.EmitAt(&b, 900);
  writer.BroadcastWatermark(950);
  writer.BroadcastWatermark(950);  // not above the last: dropped
  writer.BroadcastWatermark(940);  // nor this
  writer.Emit(&c);                 // without an event time
  writer.EmitEndOfInput();
  EXPECT_EQ(writer.last_watermark(), 950);

  // Subpartition 0: a, then the watermark, then c; subpartition 1: b, the
  // watermark. Each ends with END_OF_DATA and END_OF_INPUT.
  std::vector<Buffer> zero = Drain(*partition, 0);
  ASSERT_EQ(zero.size(), 5u);
  EXPECT_EQ(zero[0].kind, Buffer::Kind::kTimestampedData);
  EXPECT_EQ(zero[1].kind, Buffer::Kind::kWatermark);
  EXPECT_EQ(zero[1].watermark, 950);
  EXPECT_EQ(zero[2].kind, Buffer::Kind::kTimestampedData);
  EXPECT_EQ(zero[3].kind, Buffer::Kind::kEndOfData);
  EXPECT_EQ(zero[4].kind, Buffer::Kind::kEndOfInput);
  std::vector<int64_t> times;
  ASSERT_TRUE(ForEachTimestampedRecord(zero[0], [&](int64_t t, absl::string_view) { times.push_back(t); }).ok());
  ASSERT_TRUE(ForEachTimestampedRecord(zero[2], [&](int64_t t, absl::string_view) { times.push_back(t); }).ok());
  EXPECT_EQ(times, (std::vector<int64_t>{1000, weir::kNoTimestamp}));
  std::vector<Buffer> one = Drain(*partition, 1);
  ASSERT_EQ(one.size(), 4u);
  EXPECT_EQ(one[0].kind, Buffer::Kind::kTimestampedData);
  EXPECT_EQ(one[1].kind, Buffer::Kind::kWatermark);
  EXPECT_EQ(one[2].kind, Buffer::Kind::kEndOfData);
  EXPECT_EQ(one[3].kind, Buffer::Kind::kEndOfInput);
}

// An idle stream says so once; what comes next (a record or a watermark)
// is preceded by an active status, so no consumer counts it while idle.
TEST(RecordWriterTest, AfterAnIdleStatusTheStreamTurnsActiveBeforeAnythingElse) {
  auto partition = std::make_shared<ResultPartition>("p", 1, 100);
  RecordWriterOptions options;
  options.timestamps = true;
  RecordWriter writer(partition, TestRecordType(), Partitioning::kForward, nullptr, 1, 0, options);
  writer.BroadcastWatermark(10);
  writer.BroadcastWatermarkStatus(true);
  writer.BroadcastWatermarkStatus(true);  // no change: nothing sent
  TestRecord a{0, 1, "a", ""};
  writer.EmitAt(&a, 20);
  writer.BroadcastWatermarkStatus(true);
  writer.BroadcastWatermark(30);
  writer.FlushAll();
  std::vector<std::pair<Buffer::Kind, std::string>> seen;
  for (const Buffer& buffer : Drain(*partition, 0)) {
    std::string detail;
    if (buffer.kind == Buffer::Kind::kWatermark) detail = absl::StrCat(buffer.watermark);
    if (buffer.kind == Buffer::Kind::kWatermarkStatus) detail = buffer.idle ? "idle" : "active";
    seen.emplace_back(buffer.kind, detail);
  }
  using K = Buffer::Kind;
  EXPECT_EQ(seen, (std::vector<std::pair<K, std::string>>{{K::kWatermark, "10"},
                                                         {K::kWatermarkStatus, "idle"},
                                                         {K::kWatermarkStatus, "active"},
                                                         {K::kTimestampedData, ""},
                                                         {K::kWatermarkStatus, "idle"},
                                                         {K::kWatermarkStatus, "active"},
                                                         {K::kWatermark, "30"}}));
}

// A barrier goes out at once, behind the data, even where the subpartitions
// are full: neither the flush before it nor the barrier waits for room.
TEST(RecordWriterTest, BarrierGoesOutBehindTheDataWithoutWaitingForRoom) {
  auto partition = std::make_shared<ResultPartition>("p", 2, 1);
  RecordWriter writer(partition, TestRecordType(), Partitioning::kRebalance, nullptr, 2, 0);
  EmitSeqs(writer, 2);
  writer.FlushAll();  // one full buffer in each subpartition: both full
  EmitSeqs(writer, 2);  // pending, flushed by the barrier
  std::atomic<bool> sent{false};
  std::thread task([&] {
    writer.BroadcastBarrier(7, 1000);
    sent = true;
  });
  ASSERT_TRUE(weir::testing::WaitFor([&] { return sent.load(); }, kGuard)) << "the barrier waited for room";
  task.join();
  EXPECT_FALSE(partition->backpressured());
  for (int sub = 0; sub < 2; ++sub) {
    std::vector<Buffer> buffers = Drain(*partition, sub);
    ASSERT_EQ(buffers.size(), 3u);
    EXPECT_EQ(buffers[0].kind, Buffer::Kind::kData);
    EXPECT_EQ(buffers[1].kind, Buffer::Kind::kData);
    EXPECT_EQ(buffers[2].kind, Buffer::Kind::kBarrier);
    EXPECT_EQ(buffers[2].checkpoint_id, 7);
  }
  // Records after the barrier wait for room again.
  EmitSeqs(writer, 2);
  writer.FlushAll();
  EmitSeqs(writer, 2);
  std::atomic<bool> flushed{false};
  std::thread after([&] {
    writer.FlushAll();
    flushed = true;
  });
  ASSERT_TRUE(weir::testing::WaitFor([&] { return partition->backpressured(); }, kGuard));
  EXPECT_FALSE(flushed);
  Drain(*partition, 0);
  Drain(*partition, 1);
  after.join();
  EXPECT_TRUE(flushed);
}

TEST(RecordWriterTest, EmitThrowsTaskCancelledWhenReleasedWhileBlocked) {
  auto partition = std::make_shared<ResultPartition>("p", 1, 1);
  RecordWriterOptions options;
  options.max_buffer_bytes = 1;  // every record is a buffer of its own
  RecordWriter writer(partition, TestRecordType(), Partitioning::kForward, nullptr, 1, 0, options);
  std::atomic<bool> cancelled{false};
  std::thread producer([&] {
    try {
      for (int i = 0;; ++i) {
        TestRecord record{0, i, "k", ""};
        writer.Emit(&record);
      }
    } catch (const TaskCancelled&) {
      cancelled = true;
    }
  });
  ASSERT_TRUE(weir::testing::WaitFor([&] { return partition->backpressured(); }, kGuard));
  EXPECT_EQ(writer.records_out(), 1) << "one buffer fits; the second Emit blocks";
  partition->Release();
  producer.join();
  EXPECT_TRUE(cancelled);
  EXPECT_THROW(writer.EmitEndOfInput(), TaskCancelled);
}

}  // namespace
}  // namespace weir::taskmanager::network
