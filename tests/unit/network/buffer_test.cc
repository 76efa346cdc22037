#include "taskmanager/network/buffer.h"

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "taskmanager/network/data_exchange_service.h"

namespace weir::taskmanager::network {
namespace {

std::vector<std::string> ReadAll(const Buffer& buffer, absl::Status* status) {
  std::vector<std::string> records;
  *status = ForEachRecord(buffer, [&records](absl::string_view bytes) { records.emplace_back(bytes); });
  return records;
}

TEST(RecordFramingTest, RoundTripsRecordsOfEverySize) {
  std::vector<std::string> records = {
      "",                             // empty record: a one-byte frame
      "a",
      std::string(127, 'x'),          // the largest one-byte length
      std::string(128, 'y'),          // the smallest two-byte length
      std::string("\0\x80\xff\n", 4), // arbitrary bytes, including NUL
      std::string(70000, 'z'),        // a three-byte length
  };
  Buffer buffer;
  size_t expected_size = 0;
  for (const std::string& r : records) {
    AppendRecord(r, &buffer);
    expected_size += FramedRecordSize(r.size());
  }
  EXPECT_EQ(buffer.kind, Buffer::Kind::kData);
  EXPECT_EQ(buffer.record_count, static_cast<int32_t>(records.size()));
  EXPECT_EQ(buffer.data.size(), expected_size);
  EXPECT_EQ(FramedRecordSize(127), 128u);
  EXPECT_EQ(FramedRecordSize(128), 130u);

  absl::Status status;
  EXPECT_EQ(ReadAll(buffer, &status), records);
  EXPECT_TRUE(status.ok()) << status;
}

TEST(RecordFramingTest, EmptyBuffersHoldNoRecords) {
  absl::Status status;
  EXPECT_TRUE(ReadAll(Buffer(), &status).empty());
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_TRUE(ReadAll(Buffer::EndOfInput(), &status).empty());
  EXPECT_TRUE(status.ok()) << status;
}

// Asserts that reading `buffer` fails with kDataLoss mentioning `needle`.
void ExpectCorrupt(const Buffer& buffer, const std::string& needle) {
  absl::Status status;
  ReadAll(buffer, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), needle)) << status;
}

TEST(RecordFramingTest, ReportsCorruptFraming) {
  Buffer good;
  AppendRecord("hello", &good);
  AppendRecord("world", &good);

  Buffer truncated = good;
  truncated.data.pop_back();
  ExpectCorrupt(truncated, "claims 5 bytes but only 4 remain");

  Buffer length_past_end;
  length_past_end.data = std::string("\x7f", 1) + "short";
  length_past_end.record_count = 1;
  ExpectCorrupt(length_past_end, "claims 127 bytes");

  Buffer unterminated_varint;
  unterminated_varint.data = std::string("\x80\x80", 2);
  unterminated_varint.record_count = 1;
  ExpectCorrupt(unterminated_varint, "malformed length");

  Buffer overlong_varint;
  overlong_varint.data = std::string("\xff\xff\xff\xff\xff\x01", 6);
  overlong_varint.record_count = 1;
  ExpectCorrupt(overlong_varint, "malformed length");

  Buffer too_few = good;
  too_few.record_count = 3;
  ExpectCorrupt(too_few, "holds 3 records but holds 2");

  Buffer too_many = good;
  too_many.record_count = 1;
  absl::Status status;
  std::vector<std::string> seen = ReadAll(too_many, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_EQ(seen, std::vector<std::string>{"hello"}) << "no record past the declared count may be delivered";
}

TEST(WireFormatTest, RoundTripsDataEndOfInputAndBarriers) {
  Buffer data;
  AppendRecord("one", &data);
  AppendRecord(std::string(300, 'p'), &data);
  const std::string framed = data.data;

  absl::StatusOr<Buffer> back = FromProto(ToProto(data));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->kind, Buffer::Kind::kData);
  EXPECT_EQ(back->data, framed);
  EXPECT_EQ(back->record_count, 2);

  absl::StatusOr<Buffer> end = FromProto(ToProto(Buffer::EndOfInput()));
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->kind, Buffer::Kind::kEndOfInput);

  for (bool final_checkpoint : {false, true}) {
    absl::StatusOr<Buffer> end_of_data = FromProto(ToProto(Buffer::EndOfData(final_checkpoint)));
    ASSERT_TRUE(end_of_data.ok()) << end_of_data.status();
    EXPECT_EQ(end_of_data->kind, Buffer::Kind::kEndOfData);
    EXPECT_EQ(end_of_data->final_checkpoint, final_checkpoint);
  }

  absl::StatusOr<Buffer> barrier = FromProto(ToProto(Buffer::Barrier(7, 1700000000123)));
  ASSERT_TRUE(barrier.ok()) << barrier.status();
  EXPECT_EQ(barrier->kind, Buffer::Kind::kBarrier);
  EXPECT_EQ(barrier->checkpoint_id, 7);
  EXPECT_EQ(barrier->checkpoint_timestamp_ms, 1700000000123);
}

TEST(WireFormatTest, RejectsWhatItCannotHandle) {
  v1::DataBuffer barrier;
  barrier.set_kind(v1::BUFFER_KIND_CHECKPOINT_BARRIER);
  barrier.set_checkpoint_id(0);  // ids start at 1
  EXPECT_EQ(FromProto(barrier).status().code(), absl::StatusCode::kInvalidArgument);

  v1::DataBuffer unspecified;
  EXPECT_EQ(FromProto(unspecified).status().code(), absl::StatusCode::kInvalidArgument);

  v1::DataBuffer negative;
  negative.set_kind(v1::BUFFER_KIND_DATA);
  negative.set_record_count(-1);
  EXPECT_EQ(FromProto(negative).status().code(), absl::StatusCode::kInvalidArgument);
}

// Event time: each record's timestamp travels in front of its bytes, at every
// value an int64 holds (before 1970, the extremes the watermark uses).
TEST(RecordFramingTest, TimestampedRecordsRoundTripWithTheirEventTime) {
  const std::vector<std::pair<int64_t, std::string>> records = {
      {1700000000123, "one"},
      {-1, std::string(300, 'p')},
      {std::numeric_limits<int64_t>::min(), ""},
      {std::numeric_limits<int64_t>::max(), std::string(70000, 'x')},
      {0, "zero"}};
  Buffer buffer{Buffer::Kind::kTimestampedData};
  for (const auto& [timestamp, bytes] : records) AppendTimestampedRecord(bytes, timestamp, &buffer);
  EXPECT_EQ(buffer.record_count, static_cast<int32_t>(records.size()));

  absl::StatusOr<Buffer> back = FromProto(ToProto(buffer));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->kind, Buffer::Kind::kTimestampedData);
  EXPECT_TRUE(back->is_data());
  std::vector<std::pair<int64_t, std::string>> seen;
  ASSERT_TRUE(ForEachTimestampedRecord(*back, [&](int64_t timestamp, absl::string_view bytes) {
                seen.emplace_back(timestamp, std::string(bytes));
              }).ok());
  EXPECT_EQ(seen, records);
}

TEST(RecordFramingTest, ReportsATimestampCutOff) {
  Buffer buffer{Buffer::Kind::kTimestampedData};
  AppendTimestampedRecord("abc", 42, &buffer);
  Buffer cut = buffer;
  cut.data.resize(1 + 5);  // the length and 5 of the timestamp's 8 bytes
  absl::Status status = ForEachTimestampedRecord(cut, [](int64_t, absl::string_view) {});
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(status.message(), "inside its timestamp")) << status;
  // Read without timestamps, the same bytes are not the records they were.
  std::vector<std::string> misread;
  (void)ForEachRecord(buffer, [&](absl::string_view bytes) { misread.emplace_back(bytes); });
  EXPECT_NE(misread, std::vector<std::string>{"abc"});
}

TEST(WireFormatTest, RoundTripsWatermarksAndTheirStatus) {
  for (const int64_t watermark : {std::numeric_limits<int64_t>::min(), int64_t{-5}, int64_t{0},
                                  int64_t{1700000000999}, std::numeric_limits<int64_t>::max()}) {
    absl::StatusOr<Buffer> back = FromProto(ToProto(Buffer::Watermark(watermark)));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->kind, Buffer::Kind::kWatermark);
    EXPECT_FALSE(back->is_data());
    EXPECT_EQ(back->watermark, watermark);
  }
  for (const bool idle : {true, false}) {
    absl::StatusOr<Buffer> back = FromProto(ToProto(Buffer::WatermarkStatus(idle)));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->kind, Buffer::Kind::kWatermarkStatus);
    EXPECT_EQ(back->idle, idle);
  }
  v1::DataBuffer negative;
  negative.set_kind(v1::BUFFER_KIND_TIMESTAMPED_DATA);
  negative.set_record_count(-1);
  EXPECT_EQ(FromProto(negative).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::taskmanager::network
