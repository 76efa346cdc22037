// latency_bench: end-to-end latency of kafka_copy, from producing a record
// to its copy being visible to a read_committed consumer, at-least-once
// beside exactly-once with the same checkpoint interval, in one run.
//
//   bench/run.sh latency [--rate R] [--seconds S] [--checkpoint-ms M] [--parallelism P]
//                        [--source-properties k=v,..] [--sink-properties k=v,..]
//                        [--keep-logs DIR] [--cluster-config -Dk=v,...]
//
// A writer produces R records/s (each value carries its send time in µs);
// a read_committed consumer of the output records now - send time for every
// copy it sees after a warm-up of 3 s. Prints p50, p99 and max per mode.
// With exactly-once, a copy becomes visible when the checkpoint after it
// completes and its transaction is committed, so expect about half a
// checkpoint interval plus the checkpoint's and the commit's duration.
#include <librdkafka/rdkafkacpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/bench_flags.h"
#include "tests/kafka/kafka_io.h"
#include "tests/kafka/test_kafka.h"
#include "tests/testing/local_cluster.h"

namespace {

using Clock = std::chrono::system_clock;

struct Flags {
  int64_t rate = 5000;
  int64_t seconds = 20;
  int64_t checkpoint_ms = 100;
  int64_t parallelism = 2;
  std::string source_properties, sink_properties;  // passed to kafka_copy
  std::string keep_logs;  // copy the cluster's logs here at the end
  std::vector<std::string> cluster_config;  // -Dk=v for both daemons
};

int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now().time_since_epoch()).count();
}

std::unique_ptr<RdKafka::Conf> Conf(const std::map<std::string, std::string>& props) {
  std::unique_ptr<RdKafka::Conf> conf(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  std::string err;
  for (const auto& [k, v] : props) {
    if (conf->set(k, v, err) != RdKafka::Conf::CONF_OK) std::fprintf(stderr, "bench: %s\n", err.c_str());
  }
  return conf;
}

struct Latencies {
  std::vector<int64_t> micros;
  std::map<int64_t, std::vector<int64_t>> by_second;  // second of the run -> latencies
  int64_t Percentile(double p) {
    if (micros.empty()) return -1;
    std::sort(micros.begin(), micros.end());
    return micros[std::min(micros.size() - 1, static_cast<size_t>(p * micros.size()))];
  }
};

// Writes `rate` records/s to `in` for `seconds` while reading `out` with
// read_committed; returns the latencies of the copies seen after warm-up.
Latencies Measure(const std::string& bootstrap, const std::string& in, const std::string& out, const Flags& flags) {
  std::string err;
  auto pconf = Conf({{"bootstrap.servers", bootstrap}, {"acks", "all"}, {"linger.ms", "5"}});
  std::unique_ptr<RdKafka::Producer> producer(RdKafka::Producer::create(pconf.get(), err));
  auto cconf = Conf({{"bootstrap.servers", bootstrap},
                     {"group.id", "weir-latency-bench"},
                     {"enable.auto.commit", "false"},
                     {"isolation.level", "read_committed"},
                     {"fetch.wait.max.ms", "100"}});
  std::unique_ptr<RdKafka::KafkaConsumer> consumer(RdKafka::KafkaConsumer::create(cconf.get(), err));
  std::vector<RdKafka::TopicPartition*> assignment;
  for (int p = 0; p < 4; ++p) assignment.push_back(RdKafka::TopicPartition::create(out, p, RdKafka::Topic::OFFSET_END));
  consumer->assign(assignment);
  RdKafka::TopicPartition::destroy(assignment);

  std::atomic<bool> done{false};
  const int64_t start = NowMicros();
  const int64_t warmup_end = start + 3'000'000;
  std::thread writer([&] {
    const int64_t total = flags.rate * flags.seconds;
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < total; ++i) {
      // Paced: record i leaves at i / rate seconds.
      std::this_thread::sleep_until(t0 + std::chrono::microseconds(i * 1'000'000 / flags.rate));
      std::string value = absl::StrCat(NowMicros());
      std::string key = absl::StrCat("k", i);
      while (producer->produce(in, RdKafka::Topic::PARTITION_UA, RdKafka::Producer::RK_MSG_COPY, value.data(),
                               value.size(), key.data(), key.size(), 0, nullptr) == RdKafka::ERR__QUEUE_FULL) {
        producer->poll(1);
      }
      producer->poll(0);
    }
    producer->flush(10000);
    done = true;
  });
  Latencies result;
  const int64_t end = start + (flags.seconds + 5) * 1'000'000;
  while (NowMicros() < end) {
    std::unique_ptr<RdKafka::Message> msg(consumer->consume(20));
    if (msg->err() != RdKafka::ERR_NO_ERROR) continue;
    int64_t sent = 0;
    if (!absl::SimpleAtoi(absl::string_view(static_cast<const char*>(msg->payload()), msg->len()), &sent)) continue;
    if (sent >= warmup_end) {
      result.micros.push_back(NowMicros() - sent);
      result.by_second[(sent - start) / 1'000'000].push_back(result.micros.back());
    }
    if (done && sent >= start + flags.seconds * 1'000'000 - 200'000) break;  // the last ones arrived
  }
  writer.join();
  consumer->close();
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  weir::bench::BenchFlags parser("bench");
  parser.Int("--rate", &flags.rate);
  parser.Int("--seconds", &flags.seconds);
  parser.Int("--checkpoint-ms", &flags.checkpoint_ms);
  parser.Int("--parallelism", &flags.parallelism);
  parser.String("--source-properties", &flags.source_properties);
  parser.String("--sink-properties", &flags.sink_properties);
  parser.String("--keep-logs", &flags.keep_logs);
  parser.List("--cluster-config", &flags.cluster_config);
  if (!parser.Parse(argc, argv)) return 2;
  const std::string bootstrap = weir::test::TestKafkaBootstrap();
  if (bootstrap.empty()) return 1;
  weir::testing::LocalCluster cluster(
      {.taskmanagers = 1, .slots_per_taskmanager = static_cast<int>(flags.parallelism), .config = flags.cluster_config});
  cluster.Start();
  std::printf("latency benchmark: kafka_copy, %lld records/s for %lld s, checkpoints every %lld ms, parallelism %lld\n",
              static_cast<long long>(flags.rate), static_cast<long long>(flags.seconds),
              static_cast<long long>(flags.checkpoint_ms), static_cast<long long>(flags.parallelism));
  {
    // Baseline: the same writer and reader on one topic, no job between.
    const std::string topic = weir::test::UniqueTopicName("latency-direct");
    if (auto s = weir::test::CreateTopic(bootstrap, topic, 4); !s.ok()) return 1;
    Latencies l = Measure(bootstrap, topic, topic, flags);
    const size_t seen = l.micros.size();
    const int64_t p50 = l.Percentile(0.50), p99 = l.Percentile(0.99), max = l.Percentile(1.0);
    std::printf("  %-14s p50 %6.1f ms, p99 %6.1f ms, max %6.1f ms (%zu records measured)\n", "direct (no job)",
                p50 / 1000.0, p99 / 1000.0, max / 1000.0, seen);
  }
  for (const std::string guarantee : {"at-least-once", "exactly-once"}) {
    const std::string in = weir::test::UniqueTopicName("latency-in");
    const std::string out = weir::test::UniqueTopicName("latency-out");
    for (const std::string& t : {in, out}) {
      if (auto s = weir::test::CreateTopic(bootstrap, t, 4); !s.ok()) {
        std::fprintf(stderr, "bench: %s\n", std::string(s.message()).c_str());
        return 1;
      }
    }
    std::string error;
    const std::string job = cluster.Submit(
        std::string(WEIR_JOBS_DIR) + "/kafka_copy.so",
        {"-p", std::to_string(flags.parallelism),
         absl::StrCat("-Dexecution.checkpointing.interval=", flags.checkpoint_ms, "ms")},
        {"--brokers", bootstrap, "--input-topic", in, "--output-topic", out, "--guarantee", guarantee,
         "--source-properties", flags.source_properties, "--sink-properties", flags.sink_properties},
        &error);
    if (job.empty()) {
      std::fprintf(stderr, "bench: submission failed: %s\n", error.c_str());
      return 1;
    }
    // Let the job start (producers initialized, partitions assigned).
    absl::SleepFor(absl::Seconds(3));
    Latencies l = Measure(bootstrap, in, out, flags);
    const size_t seen = l.micros.size();
    const int64_t p50 = l.Percentile(0.50), p99 = l.Percentile(0.99), max = l.Percentile(1.0);
    std::printf("  %-14s p50 %6.1f ms, p99 %6.1f ms, max %6.1f ms (%zu records measured)\n", guarantee.c_str(),
                p50 / 1000.0, p99 / 1000.0, max / 1000.0, seen);
    // The median per second of the run: a rising line means the job falls
    // behind, a flat one a fixed delay.
    std::string trend;
    for (auto& [second, values] : l.by_second) {
      std::sort(values.begin(), values.end());
      absl::StrAppend(&trend, " ", values[values.size() / 2] / 1000);
    }
    std::printf("    median per second (ms):%s\n", trend.c_str());
    cluster.Weir({"cancel", job});
    cluster.WaitForJobEnd(job, absl::Seconds(60));
  }
  if (!flags.keep_logs.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(flags.keep_logs, ec);
    for (const auto& entry : std::filesystem::directory_iterator(cluster.dir(), ec)) {
      if (entry.path().extension() == ".log") {
        std::filesystem::copy_file(entry.path(), std::filesystem::path(flags.keep_logs) / entry.path().filename(),
                                   std::filesystem::copy_options::overwrite_existing, ec);
      }
    }
    std::printf("logs kept in %s\n", flags.keep_logs.c_str());
  }
  return 0;
}
