// Records for the network tests: which producer emitted them, their sequence
// number there, a key and padding. Serialized as
// [int32 producer][int64 seq][uint8 key length][key][payload], so a record's
// size is 13 + key + payload bytes.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/string_view.h"
#include "taskmanager/network/buffer.h"
#include "weir/operator.h"

namespace weir::taskmanager::network::testing {

struct TestRecord {
  int32_t producer = 0;
  int64_t seq = 0;
  std::string key;
  std::string payload;
};

inline void SerializeTestRecord(const void* record, std::string& out) {
  const auto& r = *static_cast<const TestRecord*>(record);
  out.append(reinterpret_cast<const char*>(&r.producer), sizeof(r.producer));
  out.append(reinterpret_cast<const char*>(&r.seq), sizeof(r.seq));
  out.push_back(static_cast<char>(r.key.size()));
  out.append(r.key);
  out.append(r.payload);
}

inline TestRecord ParseTestRecord(std::string_view bytes) {
  TestRecord r;
  std::memcpy(&r.producer, bytes.data(), sizeof(r.producer));
  std::memcpy(&r.seq, bytes.data() + 4, sizeof(r.seq));
  size_t key_size = static_cast<uint8_t>(bytes[12]);
  r.key = std::string(bytes.substr(13, key_size));
  r.payload = std::string(bytes.substr(13 + key_size));
  return r;
}

inline const weir::TypeOps* TestRecordType() {
  static const weir::TypeOps ops{
      "TestRecord", &SerializeTestRecord, [](std::string_view bytes, weir::RecordOutput& output) {
        TestRecord r = ParseTestRecord(bytes);
        output.Emit(&r);
      }};
  return &ops;
}

inline void TestRecordKey(const void* record, std::string& key_out) {
  key_out.append(static_cast<const TestRecord*>(record)->key);
}

// Collects the records a TypeOps emits.
class CollectingOutput : public weir::RecordOutput {
 public:
  void Emit(void* record) override { records.push_back(std::move(*static_cast<TestRecord*>(record))); }
  std::vector<TestRecord> records;
};

// Deserializes every record of a data buffer through the record type's
// TypeOps, as a consumer task does.
inline absl::Status DecodeBuffer(const Buffer& buffer, std::vector<TestRecord>* out) {
  CollectingOutput output;
  absl::Status status = ForEachRecord(buffer, [&output](absl::string_view bytes) {
    TestRecordType()->deserialize_to(std::string_view(bytes.data(), bytes.size()), output);
  });
  for (TestRecord& r : output.records) out->push_back(std::move(r));
  return status;
}

}  // namespace weir::taskmanager::network::testing
