// Test helpers that write records to and read them back from the test
// broker with librdkafka, to check what a job produced.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace weir::test {

struct KafkaMessage {
  std::optional<std::string> key;
  std::string value;
  int32_t partition = -1;
  int64_t offset = -1;
};

// Produces `messages` (acks=all) and waits until all are delivered.
absl::Status ProduceMessages(const std::string& bootstrap, const std::string& topic,
                             const std::vector<KafkaMessage>& messages);

// Reads every partition of `topic` from the beginning up to its end offset
// at call time (read_committed).
absl::StatusOr<std::vector<KafkaMessage>> ReadTopic(const std::string& bootstrap, const std::string& topic,
                                                    absl::Duration timeout = absl::Seconds(60));

}  // namespace weir::test
