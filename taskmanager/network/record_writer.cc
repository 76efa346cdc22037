#include "taskmanager/network/record_writer.h"

#include <algorithm>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace weir::taskmanager::network {

RecordWriter::RecordWriter(std::shared_ptr<ResultPartition> partition, const weir::TypeOps* type,
                           weir::Partitioning partitioning, weir::KeyFunction key, int num_consumers,
                           int subtask_index, RecordWriterOptions options)
    : partition_(std::move(partition)),
      type_(type),
      key_(std::move(key)),
      num_consumers_(num_consumers),
      subtask_index_(subtask_index),
      options_(options),
      effective_partitioning_(partitioning),
      pending_(num_consumers > 0 ? num_consumers : 0, EmptyBuffer()),
      next_round_robin_(num_consumers > 0 ? subtask_index % num_consumers : 0) {
  WEIR_CHECK(partition_ != nullptr, "RecordWriter needs a partition");
  WEIR_CHECK(type_ != nullptr && type_->serialize != nullptr,
             absl::StrCat("RecordWriter for ", partition_->id(), " needs the record type's serializer"));
  WEIR_CHECK(num_consumers_ == partition_->num_subpartitions(),
             absl::StrCat("partition ", partition_->id(), " has ", partition_->num_subpartitions(),
                          " subpartitions for ", num_consumers_, " consumers"));
  WEIR_CHECK(subtask_index_ >= 0, absl::StrCat("negative subtask index ", subtask_index_));
  WEIR_CHECK(options_.max_buffer_bytes >= 1, "max_buffer_bytes must be >= 1");
  if (partitioning == weir::Partitioning::kHash) {
    WEIR_CHECK(key_ != nullptr, absl::StrCat("hash partitioning of ", partition_->id(), " needs a key function"));
    WEIR_CHECK(num_consumers_ <= options_.max_parallelism,
               absl::StrCat("hash partitioning of ", partition_->id(), ": ", num_consumers_,
                            " consumers exceed the max parallelism ", options_.max_parallelism));
  }
  if (partitioning == weir::Partitioning::kForward) {
    const int producers = options_.producer_parallelism > 0 ? options_.producer_parallelism : num_consumers_;
    if (producers != num_consumers_ || subtask_index_ >= num_consumers_) {
      effective_partitioning_ = weir::Partitioning::kRebalance;
    }
  }
}

void RecordWriter::Emit(void* record) { Route(record, weir::kNoTimestamp); }

void RecordWriter::EmitAt(void* record, int64_t timestamp) { Route(record, timestamp); }

Buffer RecordWriter::EmptyBuffer() const {
  return Buffer{options_.timestamps ? Buffer::Kind::kTimestampedData : Buffer::Kind::kData};
}

void RecordWriter::Route(void* record, int64_t timestamp) {
  WEIR_CHECK(!data_ended_, absl::StrCat("Emit after the end of data on ", partition_->id()));
  ActivateIfIdle();
  record_bytes_.clear();
  type_->serialize(record, record_bytes_);
  const absl::string_view bytes(record_bytes_.data(), record_bytes_.size());
  switch (effective_partitioning_) {
    case weir::Partitioning::kForward:
      Append(subtask_index_, bytes, timestamp);
      break;
    case weir::Partitioning::kRebalance:
      Append(NextRoundRobin(), bytes, timestamp);
      break;
    case weir::Partitioning::kHash: {
      key_bytes_.clear();
      key_(record, key_bytes_);
      int key_group = state::KeyGroupForKey(absl::string_view(key_bytes_.data(), key_bytes_.size()),
                                     options_.max_parallelism);
      Append(state::SubtaskForKeyGroup(key_group, options_.max_parallelism, num_consumers_), bytes, timestamp);
      break;
    }
    case weir::Partitioning::kBroadcast:
      for (int i = 0; i < num_consumers_; ++i) Append(i, bytes, timestamp);
      break;
  }
  records_out_.fetch_add(1, std::memory_order_relaxed);
}

int RecordWriter::NextRoundRobin() {
  int target = next_round_robin_;
  if (++next_round_robin_ == num_consumers_) next_round_robin_ = 0;
  return target;
}

void RecordWriter::Append(int subpartition, absl::string_view record, int64_t timestamp) {
  Buffer& buffer = pending_[subpartition];
  if (buffer.record_count == 0) {
    buffer.data.reserve(std::max<size_t>(options_.max_buffer_bytes, FramedRecordSize(record.size())));
  }
  if (options_.timestamps) {
    AppendTimestampedRecord(record, timestamp, &buffer);
  } else {
    AppendRecord(record, &buffer);
  }
  if (buffer.data.size() >= static_cast<size_t>(options_.max_buffer_bytes)) Flush(subpartition);
}

void RecordWriter::Flush(int subpartition) {
  Buffer& pending = pending_[subpartition];
  if (pending.record_count == 0) return;
  Buffer full = std::move(pending);
  pending = EmptyBuffer();
  Hand(subpartition, std::move(full));
}

void RecordWriter::Hand(int subpartition, Buffer buffer) {
  if (!partition_->Add(subpartition, std::move(buffer), over_capacity_)) throw TaskCancelled();
}

void RecordWriter::FlushIfDue(absl::Time now) {
  if (now < next_flush_) return;
  FlushAll();
  next_flush_ = now + options_.flush_interval;
}

void RecordWriter::FlushAll() {
  for (int i = 0; i < num_consumers_; ++i) Flush(i);
}

void RecordWriter::HandEvent(const Buffer& event) {
  // A true forward edge has one consumer: subpartition `subtask_index_`. The
  // other subpartitions are never read, so an event there would never be
  // taken (and, one per checkpoint, would fill them up and block the task).
  if (effective_partitioning_ == weir::Partitioning::kForward) {
    Hand(subtask_index_, event);
    return;
  }
  for (int i = 0; i < num_consumers_; ++i) Hand(i, event);
}

void RecordWriter::EmitEndOfData(bool final_checkpoint) {
  WEIR_CHECK(!data_ended_, absl::StrCat("EmitEndOfData twice on ", partition_->id()));
  FlushAll();
  HandEvent(Buffer::EndOfData(final_checkpoint));
  data_ended_ = true;
}

void RecordWriter::EmitEndOfInput() {
  WEIR_CHECK(!ended_, absl::StrCat("EmitEndOfInput twice on ", partition_->id()));
  if (!data_ended_) EmitEndOfData(/*final_checkpoint=*/false);
  HandEvent(Buffer::EndOfInput());
  ended_ = true;
}

void RecordWriter::BroadcastBarrier(int64_t checkpoint_id, int64_t timestamp_ms) {
  WEIR_CHECK(!ended_, absl::StrCat("barrier after EmitEndOfInput on ", partition_->id()));
  over_capacity_ = true;
  absl::Cleanup done = [this] { over_capacity_ = false; };  // also when Hand throws (cancelled)
  FlushAll();
  HandEvent(Buffer::Barrier(checkpoint_id, timestamp_ms));
}

void RecordWriter::ActivateIfIdle() {
  if (!idle_) return;
  idle_ = false;
  FlushAll();
  HandEvent(Buffer::WatermarkStatus(/*idle=*/false));
}

void RecordWriter::BroadcastWatermark(int64_t watermark) {
  WEIR_CHECK(!ended_, absl::StrCat("watermark after EmitEndOfInput on ", partition_->id()));
  if (watermark <= last_watermark_) return;
  ActivateIfIdle();
  last_watermark_ = watermark;
  FlushAll();
  HandEvent(Buffer::Watermark(watermark));
}

void RecordWriter::BroadcastWatermarkStatus(bool idle) {
  WEIR_CHECK(!ended_, absl::StrCat("watermark status after EmitEndOfInput on ", partition_->id()));
  if (idle == idle_) return;
  if (!idle) {
    ActivateIfIdle();
    return;
  }
  idle_ = true;
  FlushAll();
  HandEvent(Buffer::WatermarkStatus(/*idle=*/true));
}

}  // namespace weir::taskmanager::network
