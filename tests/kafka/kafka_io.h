// Test helpers that write records to and read them back from the test
// broker with librdkafka, to check what a job produced.
#pragma once

#include <librdkafka/rdkafkacpp.h>

#include <map>
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

// Counts a producer's delivery reports (set it as "dr_cb").
class DeliveryCounter : public RdKafka::DeliveryReportCb {
 public:
  void dr_cb(RdKafka::Message& message) override {
    if (message.err() == RdKafka::ERR_NO_ERROR) {
      ++delivered;
    } else {
      ++failed;
      last_error = message.errstr();
    }
  }
  int delivered = 0;
  int failed = 0;
  std::string last_error;
};

// Produces `messages` (acks=all) and waits until all are delivered.
absl::Status ProduceMessages(const std::string& bootstrap, const std::string& topic,
                             const std::vector<KafkaMessage>& messages);

// Reads every partition of `topic` from the beginning up to its end offset
// at call time (read_committed).
absl::StatusOr<std::vector<KafkaMessage>> ReadTopic(const std::string& bootstrap, const std::string& topic,
                                                    absl::Duration timeout = absl::Seconds(60));

// Sorts `messages` by partition, then offset: each partition's order, in
// which a key's records (always in one partition) were written.
void SortByPosition(std::vector<KafkaMessage>* messages);

// The end offset of every partition of `topic`: the high watermark, or with
// `read_committed` the last stable offset (which stops at the first
// transaction still open). They differ while a transaction is open.
absl::StatusOr<std::map<int32_t, int64_t>> EndOffsets(const std::string& bootstrap, const std::string& topic,
                                                      bool read_committed);

}  // namespace weir::test
