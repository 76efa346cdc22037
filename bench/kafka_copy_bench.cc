// kafka_copy_bench: Weir's kafka_copy job (at-least-once) beside a plain
// librdkafka consume-and-produce copier, on the same broker, the same input
// topic and the same partition count, in one run.
//
//   bench/run.sh [--records N] [--value-bytes B] [--partitions P] [--parallelism K]
//                [--checkpoint-ms M] [--cluster-config -Dk=v,...]
//
// Prints records/s for both and their ratio (weir / baseline). With
// --checkpoint-ms, Weir also runs with checkpoints every M ms, at-least-once
// and exactly-once (transactions committed per checkpoint), and the ratio
// exactly-once / at-least-once is printed. The baseline
// is one process with one consumer and one producer, configured as the Weir
// sink is for at-least-once (acks=all, idempotence); Weir's time runs from
// submission until the job is FINISHED, so it includes scheduling.
#include <librdkafka/rdkafkacpp.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/bench_flags.h"
#include "tests/kafka/kafka_io.h"
#include "tests/kafka/test_kafka.h"
#include "tests/testing/local_cluster.h"

namespace {

struct Flags {
  int64_t records = 500000;
  int value_bytes = 100;
  int partitions = 4;
  int parallelism = 1;
  int64_t checkpoint_ms = 0;  // 0: only the run without checkpoints
  std::vector<std::string> cluster_config;  // -Dkey=value for every daemon
};

std::unique_ptr<RdKafka::Conf> Conf(const std::map<std::string, std::string>& props) {
  std::unique_ptr<RdKafka::Conf> conf(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  std::string err;
  for (const auto& [k, v] : props) {
    if (conf->set(k, v, err) != RdKafka::Conf::CONF_OK) std::fprintf(stderr, "bench: %s\n", err.c_str());
  }
  return conf;
}

// Copies `records` records from `in` to `out`; returns the seconds taken.
double BaselineCopy(const std::string& bootstrap, const std::string& in, const std::string& out, int partitions,
                    int64_t records) {
  std::string err;
  auto cconf = Conf({{"bootstrap.servers", bootstrap},
                     {"group.id", "weir-bench-baseline"},
                     {"enable.auto.commit", "false"},
                     {"isolation.level", "read_committed"}});
  std::unique_ptr<RdKafka::KafkaConsumer> consumer(RdKafka::KafkaConsumer::create(cconf.get(), err));
  auto pconf = Conf({{"bootstrap.servers", bootstrap},
                     {"acks", "all"},
                     {"enable.idempotence", "true"},
                     {"partitioner", "murmur2_random"}});
  std::unique_ptr<RdKafka::Producer> producer(RdKafka::Producer::create(pconf.get(), err));
  std::vector<RdKafka::TopicPartition*> assignment;
  for (int p = 0; p < partitions; ++p) {
    assignment.push_back(RdKafka::TopicPartition::create(in, p, RdKafka::Topic::OFFSET_BEGINNING));
  }
  absl::Time start = absl::Now();
  consumer->assign(assignment);
  RdKafka::TopicPartition::destroy(assignment);
  int64_t copied = 0;
  while (copied < records) {
    std::unique_ptr<RdKafka::Message> msg(consumer->consume(100));
    if (msg->err() == RdKafka::ERR__TIMED_OUT) continue;
    if (msg->err() != RdKafka::ERR_NO_ERROR) {
      std::fprintf(stderr, "bench: baseline consume: %s\n", msg->errstr().c_str());
      continue;
    }
    while (producer->produce(out, RdKafka::Topic::PARTITION_UA, RdKafka::Producer::RK_MSG_COPY, msg->payload(),
                             msg->len(), msg->key_pointer(), msg->key_len(), msg->timestamp().timestamp,
                             nullptr) == RdKafka::ERR__QUEUE_FULL) {
      producer->poll(10);
    }
    producer->poll(0);
    ++copied;
  }
  while (producer->outq_len() > 0) producer->flush(1000);
  double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  consumer->close();
  return seconds;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  weir::bench::BenchFlags parser("bench");
  parser.Int("--records", &flags.records);
  parser.Int("--value-bytes", &flags.value_bytes);
  parser.Int("--partitions", &flags.partitions);
  parser.Int("--parallelism", &flags.parallelism);
  parser.Int("--checkpoint-ms", &flags.checkpoint_ms);
  parser.List("--cluster-config", &flags.cluster_config);
  if (!parser.Parse(argc, argv)) return 2;
  std::string bootstrap = weir::test::TestKafkaBootstrap();
  if (bootstrap.empty()) return 1;
  std::string in = weir::test::UniqueTopicName("bench-in");
  std::string out_base = weir::test::UniqueTopicName("bench-out-baseline");
  for (const std::string& t : {in, out_base}) {
    if (auto s = weir::test::CreateTopic(bootstrap, t, flags.partitions); !s.ok()) {
      std::fprintf(stderr, "bench: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  std::fprintf(stderr, "bench: producing %lld records of %d bytes into %d partitions\n",
               static_cast<long long>(flags.records), flags.value_bytes, flags.partitions);
  std::vector<weir::test::KafkaMessage> input;
  input.reserve(flags.records);
  std::string payload(flags.value_bytes, 'x');
  for (int64_t i = 0; i < flags.records; ++i) input.push_back({absl::StrCat("key-", i), payload});
  if (auto s = weir::test::ProduceMessages(bootstrap, in, input); !s.ok()) {
    std::fprintf(stderr, "bench: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  input.clear();

  double baseline_s = BaselineCopy(bootstrap, in, out_base, flags.partitions, flags.records);

  weir::testing::LocalCluster cluster(
      {.taskmanagers = 1, .slots_per_taskmanager = flags.parallelism, .config = flags.cluster_config});
  cluster.Start();
  // Runs kafka_copy over the input into a new topic; the seconds from
  // submission to FINISHED, or a negative number on failure.
  auto run_weir = [&](const std::string& guarantee, int64_t checkpoint_ms) -> double {
    std::string out = weir::test::UniqueTopicName("bench-out-weir");
    if (auto s = weir::test::CreateTopic(bootstrap, out, flags.partitions); !s.ok()) {
      std::fprintf(stderr, "bench: %s\n", std::string(s.message()).c_str());
      return -1;
    }
    std::vector<std::string> options = {"-p", std::to_string(flags.parallelism)};
    if (checkpoint_ms > 0) options.push_back(absl::StrCat("-Dexecution.checkpointing.interval=", checkpoint_ms, "ms"));
    std::string error;
    absl::Time start = absl::Now();
    std::string job = cluster.Submit(std::string(WEIR_JOBS_DIR) + "/kafka_copy.so", options,
                                     {"--brokers", bootstrap, "--input-topic", in, "--output-topic", out,
                                      "--guarantee", guarantee, "--bounded"},
                                     &error);
    if (job.empty()) {
      std::fprintf(stderr, "bench: submission failed: %s\n", error.c_str());
      return -1;
    }
    nlohmann::json status = cluster.WaitForJobEnd(job, absl::Minutes(30));
    double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    if (status.is_null() || status["state"] != "FINISHED") {
      std::fprintf(stderr, "bench: the job did not finish: %s\n", status.dump(2).c_str());
      return -1;
    }
    return seconds;
  };
  double weir_s = run_weir("at-least-once", 0);
  if (weir_s < 0) return 1;
  double baseline_rate = flags.records / baseline_s;
  double weir_rate = flags.records / weir_s;
  std::printf("kafka_copy benchmark: %lld records x %d bytes, %d partitions, weir parallelism %d\n",
              static_cast<long long>(flags.records), flags.value_bytes, flags.partitions, flags.parallelism);
  std::printf("  baseline (librdkafka copier): %10.0f records/s (%.2f s)\n", baseline_rate, baseline_s);
  std::printf("  weir kafka_copy at-least-once: %10.0f records/s (%.2f s, submission to FINISHED)\n", weir_rate,
              weir_s);
  std::printf("  ratio weir/baseline: %.2f\n", weir_rate / baseline_rate);
  if (flags.checkpoint_ms > 0) {
    double alo_s = run_weir("at-least-once", flags.checkpoint_ms);
    double eo_s = run_weir("exactly-once", flags.checkpoint_ms);
    if (alo_s < 0 || eo_s < 0) return 1;
    std::printf("  with checkpoints every %lld ms:\n", static_cast<long long>(flags.checkpoint_ms));
    std::printf("    at-least-once:  %10.0f records/s (%.2f s)\n", flags.records / alo_s, alo_s);
    std::printf("    exactly-once:   %10.0f records/s (%.2f s)\n", flags.records / eo_s, eo_s);
    std::printf("    ratio exactly-once/at-least-once: %.2f; exactly-once/baseline: %.2f\n", alo_s / eo_s,
                (flags.records / eo_s) / baseline_rate);
  }
  return 0;
}
