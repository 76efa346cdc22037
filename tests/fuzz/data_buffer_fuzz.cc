// Fuzz target: a data-exchange frame from another TaskManager (DataBuffer),
// its conversion to a network buffer, the record framing inside it (with or
// without event timestamps), and the
// typed record decoders a task runs on each record (strings, numbers, pairs,
// Kafka records). Corrupt input must give an error (or, from a record
// decoder, an exception the task turns into a failure), never a crash.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "taskmanager/network/buffer.h"
#include "taskmanager/network/data_exchange_service.h"
#include "weir/kafka.h"
#include "weir/serializer.h"
#include "weir/v1/data.pb.h"

namespace {

template <typename T>
void Decode(absl::string_view bytes) {
  try {
    (void)weir::Serializer<T>::Read(std::string_view(bytes.data(), bytes.size()));
  } catch (const std::runtime_error&) {
    // A corrupt record: the task fails with this error.
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  weir::v1::DataBuffer message;
  if (!message.ParseFromArray(data, static_cast<int>(size))) return 0;
  auto buffer = weir::taskmanager::network::FromProto(std::move(message));
  if (!buffer.ok() || !buffer->is_data()) return 0;
  auto decode_all = [](absl::string_view record) {
    Decode<std::string>(record);
    Decode<int64_t>(record);
    Decode<std::pair<std::string, int64_t>>(record);
    Decode<weir::kafka::Record>(record);
  };
  if (buffer->kind == weir::taskmanager::network::Buffer::Kind::kTimestampedData) {
    (void)weir::taskmanager::network::ForEachTimestampedRecord(
        *buffer, [&](int64_t, absl::string_view record) { decode_all(record); });
  } else {
    (void)weir::taskmanager::network::ForEachRecord(*buffer, decode_all);
  }
  return 0;
}
