// kafka_demo_data: the data side of scripts/run-main-job.sh.
//
//   kafka_demo_data produce BOOTSTRAP TOPIC N     create TOPIC (4 partitions) and write N words
//   kafka_demo_data topic BOOTSTRAP TOPIC         create TOPIC (4 partitions)
//   kafka_demo_data check BOOTSTRAP TOPIC N       read keyed_count's output and check the counts
#include <cstdio>
#include <map>
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
    std::fprintf(stderr, "usage: kafka_demo_data produce|topic|check BOOTSTRAP TOPIC [N]\n");
    return 2;
  }
  std::string command = argv[1], bootstrap = argv[2], topic = argv[3];
  int64_t n = 0;
  if (argc > 4 && !absl::SimpleAtoi(argv[4], &n)) return 2;
  if (command == "topic" || command == "produce") {
    if (auto s = weir::test::CreateTopic(bootstrap, topic, 4); !s.ok()) {
      std::fprintf(stderr, "creating topic %s: %s\n", topic.c_str(), std::string(s.message()).c_str());
      return 1;
    }
    if (command == "topic") return 0;
    std::vector<weir::test::KafkaMessage> messages;
    for (int64_t i = 0; i < n; ++i) messages.push_back({std::to_string(i), WordAt(i)});
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
    std::map<std::string, int64_t> expected, latest;
    for (int64_t i = 0; i < n; ++i) ++expected[WordAt(i)];
    for (const auto& m : *out) {
      int64_t c = 0;
      if (m.key && absl::SimpleAtoi(m.value, &c) && c > latest[*m.key]) latest[*m.key] = c;
    }
    std::printf("%-12s %8s %8s\n", "word", "counted", "expected");
    bool ok = out->size() == static_cast<size_t>(n);
    for (const auto& [word, count] : expected) {
      std::printf("%-12s %8lld %8lld\n", word.c_str(), static_cast<long long>(latest[word]),
                  static_cast<long long>(count));
      ok = ok && latest[word] == count;
    }
    std::printf("%zu output records for %lld input records: %s\n", out->size(), static_cast<long long>(n),
                ok ? "every count is right" : "MISMATCH");
    return ok ? 0 : 1;
  }
  std::fprintf(stderr, "unknown command %s\n", command.c_str());
  return 2;
}
