// Test helpers that write records to and read them back from the test
// broker with librdkafka, to check what a job produced.
#pragma once

#include <librdkafka/rdkafkacpp.h>

#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
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
  // Producing: the record's timestamp (Unix ms); 0: the producer's clock.
  int64_t timestamp_ms = 0;
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

// The same, up to the last stable offset at call time instead: what a
// read_committed reader can read now, also while a transaction is open.
absl::StatusOr<std::vector<KafkaMessage>> ReadTopicCommittedNow(const std::string& bootstrap,
                                                                const std::string& topic,
                                                                absl::Duration timeout = absl::Seconds(60));

// Sorts `messages` by partition, then offset: each partition's order, in
// which a key's records (always in one partition) were written.
void SortByPosition(std::vector<KafkaMessage>* messages);

// The end offset of every partition of `topic`: the high watermark, or with
// `read_committed` the last stable offset (which stops at the first
// transaction still open). They differ while a transaction is open.
absl::StatusOr<std::map<int32_t, int64_t>> EndOffsets(const std::string& bootstrap, const std::string& topic,
                                                      bool read_committed);

// A read_committed consumer of `topic` from its beginning, on its own
// thread, as a downstream reader would be while a job runs and fails: what
// it sees in the meantime is what users would see.
class LiveReader {
 public:
  LiveReader(std::string bootstrap, std::string topic);
  ~LiveReader();
  LiveReader(const LiveReader&) = delete;
  LiveReader& operator=(const LiveReader&) = delete;

  // Stops reading; returns every message read, in arrival order.
  std::vector<KafkaMessage> Stop();
  // The first error the consumer met, or "".
  std::string error() const;

 private:
  void Run();

  const std::string bootstrap_, topic_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::vector<KafkaMessage> read_;  // guarded by mu_
  std::string error_;               // guarded by mu_
  std::thread thread_;
};

}  // namespace weir::test
