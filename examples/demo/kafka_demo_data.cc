// kafka_demo_data: the data side of scripts/run-main-job.sh.
//
//   kafka_demo_data produce BOOTSTRAP TOPIC N        create TOPIC (4 partitions) and write words 0..N-1
//   kafka_demo_data append BOOTSTRAP TOPIC FIRST N   write words FIRST..FIRST+N-1 to an existing TOPIC
//   kafka_demo_data topic BOOTSTRAP TOPIC            create TOPIC (4 partitions)
//   kafka_demo_data check BOOTSTRAP TOPIC N          read keyed_count's exactly-once output
//                                                    (read_committed): each word's counts must be
//                                                    1, 2, ..., its number among words 0..N-1 —
//                                                    none missing, none twice, in order
#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "tests/kafka/kafka_io.h"
#include "tests/kafka/test_kafka.h"

namespace {

const std::vector<std::string> kWords = {"weir", "kafka", "stream", "barrier", "checkpoint",
                                         "slot", "task", "record", "partition", "offset"};

std::string WordAt(int64_t i) { return kWords[(i * 7 + i / 3) % kWords.size()]; }

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: kafka_demo_data produce|append|topic|check BOOTSTRAP TOPIC [FIRST] [N]\n");
    return 2;
  }
  std::string command = argv[1], bootstrap = argv[2], topic = argv[3];
  int64_t n = 0, first = 0;
  if (command == "append") {
    if (argc != 6 || !absl::SimpleAtoi(argv[4], &first) || !absl::SimpleAtoi(argv[5], &n)) return 2;
  } else if (argc > 4 && !absl::SimpleAtoi(argv[4], &n)) {
    return 2;
  }
  if (command == "topic" || command == "produce" || command == "append") {
    if (command != "append") {
      if (auto s = weir::test::CreateTopic(bootstrap, topic, 4); !s.ok()) {
        std::fprintf(stderr, "creating topic %s: %s\n", topic.c_str(), std::string(s.message()).c_str());
        return 1;
      }
    }
    if (command == "topic") return 0;
    std::vector<weir::test::KafkaMessage> messages;
    for (int64_t i = first; i < first + n; ++i) messages.push_back({std::to_string(i), WordAt(i)});
    if (auto s = weir::test::ProduceMessages(bootstrap, topic, messages); !s.ok()) {
      std::fprintf(stderr, "producing: %s\n", std::string(s.message()).c_str());
      return 1;
    }
    std::printf("wrote %lld words to %s\n", static_cast<long long>(n), topic.c_str());
    return 0;
  }
  if (command == "check") {
    auto out = weir::test::ReadTopic(bootstrap, topic);
    if (!out.ok()) {
      std::fprintf(stderr, "reading %s: %s\n", topic.c_str(), std::string(out.status().message()).c_str());
      return 1;
    }
    std::map<std::string, int64_t> expected, latest, wrong;
    for (int64_t i = 0; i < n; ++i) ++expected[WordAt(i)];
    // A word's counts all go to one partition, in the order written.
    std::vector<weir::test::KafkaMessage> messages = *std::move(out);
    std::sort(messages.begin(), messages.end(), [](const auto& a, const auto& b) {
      return std::tie(a.partition, a.offset) < std::tie(b.partition, b.offset);
    });
    for (const auto& m : messages) {
      int64_t c = 0;
      if (!m.key || !absl::SimpleAtoi(m.value, &c)) continue;
      // Exactly once: each count follows the previous one.
      if (c != latest[*m.key] + 1) ++wrong[*m.key];
      latest[*m.key] = c;
    }
    std::printf("%-12s %8s %8s %s\n", "word", "counted", "expected", "counts out of sequence");
    bool ok = true;
    for (const auto& [word, count] : expected) {
      std::printf("%-12s %8lld %8lld %lld\n", word.c_str(), static_cast<long long>(latest[word]),
                  static_cast<long long>(count), static_cast<long long>(wrong[word]));
      ok = ok && latest[word] == count && wrong[word] == 0;
    }
    std::printf("%zu committed output records for %lld input records: %s\n", messages.size(),
                static_cast<long long>(n),
                ok ? "every word counted exactly once (1, 2, ..., n)" : "MISMATCH");
    return ok ? 0 : 1;
  }
  std::fprintf(stderr, "unknown command %s\n", command.c_str());
  return 2;
}
