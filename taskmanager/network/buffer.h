// Buffer: the unit the network stack moves between tasks, in-process and
// between TaskManagers, and the framing of records inside a data buffer.
//
// A data buffer holds whole records, each framed as
//   [varint32 length][length bytes of TypeOps-serialized record]
// and counts them in `record_count`; a timestamped data buffer (event time,
// docs/design/event-time.md) frames each as
//   [varint32 length][int64 little-endian timestamp][length bytes]
// Events (end of input, checkpoint barriers, watermarks and watermark
// statuses) are buffers of their own kind, so they keep their place among the
// records of a channel. Events take a credit like data buffers: a barrier
// must stay behind the records before it, and a consumer returns the credit
// as soon as it takes the barrier, so this cannot stall alignment.
//
// Thread-safety: Buffer is a plain value; the free functions are thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "weir/serializer.h"

namespace weir::taskmanager::network {

// Thrown from RecordWriter (and so from inside an operator's Emit) when the
// task's result partition was released because the task is being cancelled
// or has failed. The task thread catches it at the top of its loop; operators
// must let it pass.
class TaskCancelled : public std::exception {
 public:
  const char* what() const noexcept override { return "task cancelled: its result partition was released"; }
};

struct Buffer {
  enum class Kind { kData, kEndOfInput, kBarrier, kTimestampedData, kWatermark, kWatermarkStatus, kEndOfData };

  Kind kind = Kind::kData;
  // kData, kTimestampedData: the framed records. Empty for events.
  std::string data;
  int32_t record_count = 0;
  // kBarrier: the checkpoint and when it was triggered (Unix ms).
  int64_t checkpoint_id = 0;
  int64_t checkpoint_timestamp_ms = 0;
  // kWatermark: no later record on the channel has a timestamp <= it.
  int64_t watermark = 0;
  // kWatermarkStatus: whether the channel is idle from here on.
  bool idle = false;
  // kEndOfData: whether the producer waits for a final checkpoint (its
  // barrier follows) before its END_OF_INPUT.
  bool final_checkpoint = false;

  static Buffer EndOfInput() { return Buffer{Kind::kEndOfInput, std::string(), 0}; }
  static Buffer EndOfData(bool final_checkpoint) {
    Buffer buffer{Kind::kEndOfData};
    buffer.final_checkpoint = final_checkpoint;
    return buffer;
  }
  static Buffer Barrier(int64_t checkpoint_id, int64_t timestamp_ms) {
    return Buffer{Kind::kBarrier, std::string(), 0, checkpoint_id, timestamp_ms};
  }
  static Buffer Watermark(int64_t watermark) {
    Buffer buffer{Kind::kWatermark};
    buffer.watermark = watermark;
    return buffer;
  }
  static Buffer WatermarkStatus(bool idle) {
    Buffer buffer{Kind::kWatermarkStatus};
    buffer.idle = idle;
    return buffer;
  }
  // Holds records (with or without timestamps).
  bool is_data() const { return kind == Kind::kData || kind == Kind::kTimestampedData; }
};

inline const char* BufferKindName(Buffer::Kind kind) {
  switch (kind) {
    case Buffer::Kind::kData: return "data";
    case Buffer::Kind::kEndOfInput: return "end-of-input";
    case Buffer::Kind::kBarrier: return "checkpoint barrier";
    case Buffer::Kind::kTimestampedData: return "timestamped data";
    case Buffer::Kind::kWatermark: return "watermark";
    case Buffer::Kind::kWatermarkStatus: return "watermark status";
    case Buffer::Kind::kEndOfData: return "end-of-data";
  }
  return "?";
}

// Bytes a record of `record_bytes` bytes takes in a data buffer.
inline size_t FramedRecordSize(size_t record_bytes) {
  size_t size = 1;
  for (uint64_t v = record_bytes; v >= 0x80; v >>= 7) ++size;
  return size + record_bytes;
}

// Appends one record (its serialized bytes) to a data buffer. Records must be
// shorter than 4 GiB (and than the transport's message limit, 64 MiB, to
// cross TaskManagers).
inline void AppendRecord(absl::string_view record, Buffer* buffer) {
  weir::internal::WriteVarint(record.size(), buffer->data);  // the length, a varint32 in front
  buffer->data.append(record.data(), record.size());
  ++buffer->record_count;
}

// Bytes of the timestamp in front of a record of a timestamped data buffer.
inline constexpr size_t kRecordTimestampBytes = 8;

// Appends one record with its event time (Unix ms) to a timestamped data
// buffer (Kind::kTimestampedData).
inline void AppendTimestampedRecord(absl::string_view record, int64_t timestamp, Buffer* buffer) {
  weir::internal::WriteVarint(record.size(), buffer->data);  // the length, a varint32 in front
  const uint64_t bits = static_cast<uint64_t>(timestamp);
  for (size_t i = 0; i < kRecordTimestampBytes; ++i) buffer->data.push_back(static_cast<char>(bits >> (8 * i)));
  buffer->data.append(record.data(), record.size());
  ++buffer->record_count;
}

namespace internal {

// The framing parser behind ForEachRecord and ForEachTimestampedRecord;
// `timestamped`: each record's length is followed by its timestamp.
inline absl::Status ParseRecords(const Buffer& buffer, bool timestamped,
                                 absl::FunctionRef<void(int64_t, absl::string_view)> fn) {
  const std::string& data = buffer.data;
  size_t pos = 0;
  int32_t index = 0;
  while (pos < data.size()) {
    const size_t record_start = pos;
    uint64_t length = 0;
    int shift = 0;
    bool complete = false;
    while (pos < data.size() && shift < 35) {
      uint8_t byte = static_cast<uint8_t>(data[pos++]);
      length |= static_cast<uint64_t>(byte & 0x7f) << shift;
      shift += 7;
      if ((byte & 0x80) == 0) {
        complete = true;
        break;
      }
    }
    if (!complete || length > UINT32_MAX) {
      return absl::DataLossError(absl::StrCat("corrupt record framing: malformed length of record ", index,
                                              " at offset ", record_start, " of a ", data.size(), "-byte buffer"));
    }
    int64_t timestamp = 0;
    if (timestamped) {
      if (data.size() - pos < kRecordTimestampBytes) {
        return absl::DataLossError(absl::StrCat("corrupt record framing: record ", index, " at offset ",
                                                record_start, " is cut off inside its timestamp"));
      }
      uint64_t bits = 0;
      for (size_t i = 0; i < kRecordTimestampBytes; ++i) {
        bits |= static_cast<uint64_t>(static_cast<uint8_t>(data[pos + i])) << (8 * i);
      }
      timestamp = static_cast<int64_t>(bits);
      pos += kRecordTimestampBytes;
    }
    if (length > data.size() - pos) {
      return absl::DataLossError(absl::StrCat("corrupt record framing: record ", index, " at offset ", record_start,
                                              " claims ", length, " bytes but only ", data.size() - pos,
                                              " remain in the buffer"));
    }
    if (index >= buffer.record_count) {
      return absl::DataLossError(absl::StrCat("corrupt record framing: the buffer says it holds ",
                                              buffer.record_count, " records but holds more"));
    }
    fn(timestamp, absl::string_view(data.data() + pos, static_cast<size_t>(length)));
    pos += static_cast<size_t>(length);
    ++index;
  }
  if (index != buffer.record_count) {
    return absl::DataLossError(absl::StrCat("corrupt record framing: the buffer says it holds ", buffer.record_count,
                                            " records but holds ", index));
  }
  return absl::OkStatus();
}

}  // namespace internal

// Calls `fn` with the bytes of every record of a data buffer, in order. Fails
// with kDataLoss, without calling `fn` for the rest, when the framing is
// corrupt: a length that runs past the end, a malformed varint, or a record
// count that does not match. The views point into `buffer`.
inline absl::Status ForEachRecord(const Buffer& buffer, absl::FunctionRef<void(absl::string_view)> fn) {
  return internal::ParseRecords(buffer, /*timestamped=*/false,
                                [&](int64_t, absl::string_view record) { fn(record); });
}

// The same for a timestamped data buffer: `fn` gets each record's event time
// (Unix ms) and bytes; kDataLoss also for a record cut off inside its
// timestamp.
inline absl::Status ForEachTimestampedRecord(const Buffer& buffer,
                                             absl::FunctionRef<void(int64_t, absl::string_view)> fn) {
  return internal::ParseRecords(buffer, /*timestamped=*/true, fn);
}

}  // namespace weir::taskmanager::network
