// The network stack end to end: producers' RecordWriters, ResultPartitions,
// DataExchangeServices on real gRPC servers (one per simulated TaskManager)
// and consumers' InputGates with local and remote channels.
#include "taskmanager/network/data_exchange_service.h"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/rpc/rpc.h"
#include "gtest/gtest.h"
#include "taskmanager/network/input_gate.h"
#include "common/state/key_groups.h"
#include "taskmanager/network/record_writer.h"
#include "tests/testing/process.h"
#include "tests/unit/network/test_records.h"

namespace weir::taskmanager::network {
namespace {

using testing::DecodeBuffer;
using testing::TestRecord;
using testing::TestRecordKey;
using testing::TestRecordType;
using weir::testing::WaitFor;

// Failure guard for waits on things that must happen; never a threshold.
constexpr absl::Duration kGuard = absl::Seconds(60);

// The network side of one TaskManager: its partition registry and its
// DataExchangeService on a real gRPC server (port 0) with `threads` network
// threads.
class TestTaskManager {
 public:
  explicit TestTaskManager(DataExchangeServiceOptions options = {}, int threads = 1)
      : service_(&partitions_, options) {
    rpc::ServerOptions server_options;
    server_options.services = {&service_};
    server_options.completion_queues = threads;
    absl::StatusOr<rpc::StartedServer> started = rpc::StartServer(server_options);
    EXPECT_TRUE(started.ok()) << started.status();
    if (!started.ok()) return;
    server_ = std::move(started->server);
    service_.Start(std::move(started->completion_queues));
    address_ = rpc::JoinHostPort("127.0.0.1", started->port);
  }
  ~TestTaskManager() { Stop(); }

  // An orderly shutdown: open streams end, then the server stops.
  void Stop() {
    if (server_ == nullptr) return;
    service_.Shutdown();
    server_->Shutdown();
    service_.Stop();
    server_.reset();
  }
  // Like a dying process: every call is cancelled at once.
  void Kill() {
    if (server_ == nullptr) return;
    server_->Shutdown(std::chrono::system_clock::now());
    service_.Shutdown();
    service_.Stop();
    server_.reset();
  }

  PartitionManager& partitions() { return partitions_; }
  DataExchangeServiceImpl& service() { return service_; }
  const std::string& address() const { return address_; }

 private:
  PartitionManager partitions_;
  DataExchangeServiceImpl service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

std::unique_ptr<InputGate> CreateGate(const std::string& name, std::vector<InputChannelSpec> channels,
                                      PartitionManager* partitions, InputGateOptions options = {}) {
  absl::StatusOr<std::unique_ptr<InputGate>> gate =
      InputGate::Create(name, std::move(channels), partitions, options);
  EXPECT_TRUE(gate.ok()) << gate.status();
  return gate.ok() ? std::move(*gate) : nullptr;
}

// Reads a gate until it finishes or fails, as a consumer task does; appends
// (channel, record) in arrival order.
absl::Status ReadAll(InputGate& gate, std::vector<std::pair<int, TestRecord>>* out) {
  const absl::Time give_up = absl::Now() + kGuard;
  while (!gate.finished()) {
    if (absl::Now() > give_up) return absl::DeadlineExceededError("the gate did not finish");
    auto next = gate.Next(absl::Milliseconds(200));
    if (!next.ok()) return next.status();
    if (!next->has_value()) continue;
    auto& [channel, buffer] = **next;
    if (buffer.kind != Buffer::Kind::kData) continue;
    std::vector<TestRecord> records;
    absl::Status decoded = DecodeBuffer(buffer, &records);
    if (!decoded.ok()) return decoded;
    for (TestRecord& r : records) out->emplace_back(channel, std::move(r));
  }
  return absl::OkStatus();
}

// Calls Next until it fails; the failure guard turns a hang into an error.
absl::Status NextUntilError(InputGate& gate) {
  const absl::Time give_up = absl::Now() + kGuard;
  while (absl::Now() < give_up) {
    auto next = gate.Next(absl::Milliseconds(200));
    if (!next.ok()) return next.status();
  }
  return absl::OkStatus();
}

// Expects `status` to be an error mentioning every needle.
void ExpectErrorMentions(const absl::Status& status, absl::StatusCode code, const std::vector<std::string>& needles) {
  EXPECT_EQ(status.code(), code) << status;
  for (const std::string& needle : needles) {
    EXPECT_TRUE(absl::StrContains(status.message(), needle)) << status << "\nexpected to mention: " << needle;
  }
}

std::string PartitionId(int producer) { return absl::StrCat("job-1/source/", producer); }

class EndToEndTest : public ::testing::TestWithParam<Partitioning> {};

// Two TaskManagers; TaskManager i runs producer subtask i and consumer
// subtask i, so every consumer reads one local and one remote channel —
// except on a forward edge, where consumer i reads producer i only (as the
// JobMaster wires it; the producer sends its events nowhere else).
TEST_P(EndToEndTest, EveryRecordArrivesOnceAndInOrderPerChannel) {
  const Partitioning partitioning = GetParam();
  static constexpr int kParallelism = 2;
  static constexpr int kRecords = 3000;
  TestTaskManager taskmanagers[kParallelism];

  // Consumers start first: they wait for the producers' partitions.
  InputGateOptions gate_options;
  gate_options.initial_credit = 2;
  std::vector<std::unique_ptr<InputGate>> gates;
  // channel_producer[c][k]: the producer that channel k of consumer c reads.
  std::vector<std::vector<int>> channel_producer(kParallelism);
  for (int c = 0; c < kParallelism; ++c) {
    std::vector<InputChannelSpec> channels;
    for (int p = 0; p < kParallelism; ++p) {
      if (partitioning == Partitioning::kForward && p != c) continue;
      channels.push_back({PartitionId(p), c, taskmanagers[p].address(), /*local=*/p == c});
      channel_producer[c].push_back(p);
    }
    gates.push_back(CreateGate(absl::StrCat("consumer ", c), channels, &taskmanagers[c].partitions(), gate_options));
    ASSERT_NE(gates.back(), nullptr);
  }
  std::vector<std::vector<std::pair<int, TestRecord>>> received(kParallelism);
  std::vector<absl::Status> consumer_status(kParallelism);
  std::vector<std::thread> threads;
  for (int c = 0; c < kParallelism; ++c) {
    threads.emplace_back([&, c] { consumer_status[c] = ReadAll(*gates[c], &received[c]); });
  }

  for (int p = 0; p < kParallelism; ++p) {
    auto partition = std::make_shared<ResultPartition>(PartitionId(p), kParallelism, /*capacity=*/2);
    ASSERT_TRUE(taskmanagers[p].partitions().Register(partition).ok());
    threads.emplace_back([partition, partitioning, p] {
      RecordWriterOptions options;
      options.max_buffer_bytes = 512;  // many small buffers: flow control at work
      RecordWriter writer(partition, TestRecordType(), partitioning, &TestRecordKey, kParallelism, p, options);
      for (int i = 0; i < kRecords; ++i) {
        TestRecord record{p, i, absl::StrCat("key-", i % 97), std::string(i % 50, 'x')};
        writer.Emit(&record);
        if (i % 100 == 0) writer.FlushIfDue(absl::Now());
      }
      writer.EmitEndOfInput();
      EXPECT_EQ(writer.records_out(), kRecords);
    });
  }
  for (std::thread& t : threads) t.join();

  // (producer, seq) -> the consumers that received it.
  std::map<std::pair<int, int64_t>, std::vector<int>> receivers;
  for (int c = 0; c < kParallelism; ++c) {
    ASSERT_TRUE(consumer_status[c].ok()) << "consumer " << c << ": " << consumer_status[c];
    EXPECT_TRUE(gates[c]->finished());
    std::vector<int64_t> last_seq(kParallelism, -1);
    for (const auto& [channel, record] : received[c]) {
      // A channel carries its producer's records, in the order emitted.
      ASSERT_EQ(record.producer, channel_producer[c].at(channel));
      ASSERT_GT(record.seq, last_seq[record.producer]) << "out of order on channel " << channel << " of consumer " << c;
      last_seq[record.producer] = record.seq;
      EXPECT_EQ(record.payload, std::string(record.seq % 50, 'x'));
      receivers[{record.producer, record.seq}].push_back(c);
    }
  }

  ASSERT_EQ(receivers.size(), static_cast<size_t>(kParallelism * kRecords)) << "records were lost";
  for (const auto& [id, consumers] : receivers) {
    const auto [producer, seq] = id;
    if (partitioning == Partitioning::kBroadcast) {
      EXPECT_EQ(consumers, (std::vector<int>{0, 1})) << producer << "/" << seq;
      continue;
    }
    ASSERT_EQ(consumers.size(), 1u) << producer << "/" << seq << " arrived more than once";
    int expected = -1;
    switch (partitioning) {
      case Partitioning::kForward: expected = producer; break;
      case Partitioning::kRebalance: expected = static_cast<int>((producer + seq) % kParallelism); break;
      case Partitioning::kHash:
        expected = state::SubtaskForKeyGroup(state::KeyGroupForKey(absl::StrCat("key-", seq % 97)), state::kDefaultMaxParallelism,
                                      kParallelism);
        break;
      case Partitioning::kBroadcast: break;
    }
    EXPECT_EQ(consumers[0], expected) << producer << "/" << seq;
  }

  // Once END_OF_INPUT went out, the servers end their streams.
  for (TestTaskManager& tm : taskmanagers) {
    EXPECT_TRUE(WaitFor([&tm] { return tm.service().active_streams() == 0; }, kGuard));
  }
}

INSTANTIATE_TEST_SUITE_P(AllPartitionings, EndToEndTest,
                         ::testing::Values(Partitioning::kForward, Partitioning::kRebalance, Partitioning::kHash,
                                           Partitioning::kBroadcast),
                         [](const ::testing::TestParamInfo<Partitioning>& info) {
                           return std::string(PartitioningName(info.param));
                         });

// Backpressure: a consumer that does not read stops its producer, with no
// more than (subpartition capacity + credit + 1) buffers of records emitted;
// once it reads, everything arrives.
class BackpressureTest : public ::testing::TestWithParam<bool> {};

TEST_P(BackpressureTest, ASlowConsumerStopsTheProducerWithBoundedBuffering) {
  const bool remote = GetParam();
  constexpr int kCapacity = 2;
  constexpr int kCredit = 3;
  constexpr int kRecordsPerBuffer = 10;
  constexpr int kRecords = 20000;
  TestTaskManager producer_tm;
  TestTaskManager consumer_tm;
  PartitionManager& consumer_partitions = remote ? consumer_tm.partitions() : producer_tm.partitions();

  auto partition = std::make_shared<ResultPartition>("bp", 1, kCapacity);
  ASSERT_TRUE(producer_tm.partitions().Register(partition).ok());
  InputGateOptions gate_options;
  gate_options.initial_credit = kCredit;
  std::unique_ptr<InputGate> gate =
      CreateGate("slow consumer", {{"bp", 0, producer_tm.address(), !remote}}, &consumer_partitions, gate_options);
  ASSERT_NE(gate, nullptr);

  std::atomic<int64_t> emitted{0};
  std::thread producer([&] {
    RecordWriterOptions options;
    options.max_buffer_bytes = 1000;
    RecordWriter writer(partition, TestRecordType(), Partitioning::kForward, nullptr, 1, 0, options);
    for (int i = 0; i < kRecords; ++i) {
      // 13 + 2 + 84 = 99 bytes, framed 100: exactly 10 records per buffer.
      TestRecord record{0, i, "k0", std::string(84, 'x')};
      writer.Emit(&record);
      emitted = i + 1;
    }
    writer.EmitEndOfInput();
  });

  // The consumer does not read. The producer must come to a stop: blocked in
  // Add with its subpartition full and (remote) the consumer's credit used up.
  ASSERT_TRUE(WaitFor(
      [&] { return partition->backpressured() && (!remote || gate->queued_buffers(0) == kCredit); }, kGuard))
      << "the producer never blocked; emitted " << emitted;
  const int64_t stalled_at = emitted;
  const int in_flight = remote ? kCredit : 0;
  EXPECT_LE(stalled_at, (kCapacity + in_flight + 1) * kRecordsPerBuffer);
  EXPECT_GE(stalled_at, (kCapacity + in_flight) * kRecordsPerBuffer);
  EXPECT_EQ(partition->buffered(0), kCapacity);
  // Still stopped, at the same count: nothing moves until the consumer reads.
  EXPECT_TRUE(partition->backpressured());
  EXPECT_EQ(emitted, stalled_at);

  std::vector<std::pair<int, TestRecord>> received;
  absl::Status status = ReadAll(*gate, &received);
  producer.join();
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_EQ(received.size(), static_cast<size_t>(kRecords));
  for (int i = 0; i < kRecords; ++i) ASSERT_EQ(received[i].second.seq, i);
}

INSTANTIATE_TEST_SUITE_P(LocalAndRemote, BackpressureTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "Remote" : "Local");
                         });

// Cancelling the producer while it is blocked: Emit throws TaskCancelled and
// the (remote) consumer gets an error instead of waiting forever.
TEST(DataExchangeTest, ReleasingABlockedProducerCancelsItAndFailsTheConsumer) {
  TestTaskManager producer_tm;
  TestTaskManager consumer_tm;
  auto partition = std::make_shared<ResultPartition>("released", 1, 1);
  ASSERT_TRUE(producer_tm.partitions().Register(partition).ok());
  InputGateOptions gate_options;
  gate_options.initial_credit = 1;
  std::unique_ptr<InputGate> gate = CreateGate(
      "consumer", {{"released", 0, producer_tm.address(), false}}, &consumer_tm.partitions(), gate_options);
  ASSERT_NE(gate, nullptr);

  std::atomic<bool> cancelled{false};
  std::thread producer([&] {
    RecordWriterOptions options;
    options.max_buffer_bytes = 1;
    RecordWriter writer(partition, TestRecordType(), Partitioning::kForward, nullptr, 1, 0, options);
    try {
      for (int i = 0;; ++i) {
        TestRecord record{0, i, "k", ""};
        writer.Emit(&record);
      }
    } catch (const TaskCancelled&) {
      cancelled = true;
    }
  });
  ASSERT_TRUE(WaitFor([&] { return partition->backpressured() && gate->queued_buffers(0) == 1; }, kGuard));
  partition->Release();
  producer.join();
  EXPECT_TRUE(cancelled);

  // kAborted as for a local channel, so the consumer's task can tell that
  // its producer stopped first (IsReleasedBeforeEndOfInput).
  const absl::Status failure = NextUntilError(*gate);
  ExpectErrorMentions(failure, absl::StatusCode::kAborted, {"released", producer_tm.address(), "before end of input"});
  EXPECT_TRUE(IsReleasedBeforeEndOfInput(failure)) << failure;
}

TEST(DataExchangeTest, ReleasingALocalPartitionFailsTheConsumer) {
  PartitionManager partitions;
  auto partition = std::make_shared<ResultPartition>("local-released", 1);
  ASSERT_TRUE(partitions.Register(partition).ok());
  std::unique_ptr<InputGate> gate = CreateGate("consumer", {{"local-released", 0, "", true}}, &partitions);
  ASSERT_NE(gate, nullptr);
  auto nothing = gate->Next(absl::ZeroDuration());
  ASSERT_TRUE(nothing.ok()) << nothing.status();
  EXPECT_FALSE(nothing->has_value());
  partition->Release();
  const absl::Status failure = NextUntilError(*gate);
  ExpectErrorMentions(failure, absl::StatusCode::kAborted, {"local-released", "released"});
  EXPECT_TRUE(IsReleasedBeforeEndOfInput(failure)) << failure;
}

// A producer TaskManager that goes away mid-stream fails the consumer with an
// error naming the producer and the partition: no hang.
class ProducerGoneTest : public ::testing::TestWithParam<bool> {};

TEST_P(ProducerGoneTest, ConsumerFailsWithAClearError) {
  const bool kill = GetParam();
  TestTaskManager producer_tm;
  TestTaskManager consumer_tm;
  auto partition = std::make_shared<ResultPartition>("mid-stream", 1);
  ASSERT_TRUE(producer_tm.partitions().Register(partition).ok());
  std::unique_ptr<InputGate> gate =
      CreateGate("consumer", {{"mid-stream", 0, producer_tm.address(), false}}, &consumer_tm.partitions());
  ASSERT_NE(gate, nullptr);
  {
    RecordWriter writer(partition, TestRecordType(), Partitioning::kForward, nullptr, 1, 0);
    for (int i = 0; i < 100; ++i) {
      TestRecord record{0, i, "k", "payload"};
      writer.Emit(&record);
    }
    writer.FlushAll();  // no END_OF_INPUT: the producer is still running
  }
  auto first = gate->Next(kGuard);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(first->has_value()) << "the first buffer never arrived";

  if (kill) {
    producer_tm.Kill();
  } else {
    producer_tm.Stop();
  }
  ExpectErrorMentions(NextUntilError(*gate), absl::StatusCode::kUnavailable,
                      {producer_tm.address(), "mid-stream", "before end of input"});
  EXPECT_FALSE(gate->finished());
  partition->Release();
}

INSTANTIATE_TEST_SUITE_P(StopAndKill, ProducerGoneTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "Killed" : "Stopped");
                         });

// Consumers may subscribe before the producer task registered its partition:
// the server answers NOT_FOUND after a (here short) wait and the gate
// subscribes again until the partition is there. (The wait also bounds how
// long a new stream may take to subscribe: at 1 ms a loaded machine failed
// the stream with DEADLINE_EXCEEDED before its subscription arrived.)
TEST(DataExchangeTest, RemoteConsumerWaitsForALateProducer) {
  DataExchangeServiceOptions service_options;
  service_options.partition_wait = absl::Milliseconds(50);
  TestTaskManager producer_tm(service_options);
  TestTaskManager consumer_tm;
  InputGateOptions gate_options;
  gate_options.initial_backoff = absl::Milliseconds(5);
  std::unique_ptr<InputGate> gate = CreateGate(
      "early consumer", {{"late", 0, producer_tm.address(), false}}, &consumer_tm.partitions(), gate_options);
  ASSERT_NE(gate, nullptr);
  auto nothing = gate->Next(absl::Milliseconds(20));
  ASSERT_TRUE(nothing.ok()) << nothing.status();
  EXPECT_FALSE(nothing->has_value());

  auto partition = std::make_shared<ResultPartition>("late", 1);
  ASSERT_TRUE(producer_tm.partitions().Register(partition).ok());
  RecordWriter writer(partition, TestRecordType(), Partitioning::kForward, nullptr, 1, 0);
  TestRecord record{0, 7, "k", ""};
  writer.Emit(&record);
  writer.EmitEndOfInput();

  std::vector<std::pair<int, TestRecord>> received;
  absl::Status status = ReadAll(*gate, &received);
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].second.seq, 7);
}

TEST(DataExchangeTest, GivesUpOnAPartitionThatNeverAppears) {
  DataExchangeServiceOptions service_options;
  service_options.partition_wait = absl::Milliseconds(50);
  TestTaskManager producer_tm(service_options);
  TestTaskManager consumer_tm;
  InputGateOptions gate_options;
  gate_options.partition_timeout = absl::Milliseconds(300);
  gate_options.initial_backoff = absl::Milliseconds(10);
  std::unique_ptr<InputGate> gate = CreateGate("consumer",
                                               {{"never-remote", 0, producer_tm.address(), false},
                                                {"never-local", 0, "", true}},
                                               &consumer_tm.partitions(), gate_options);
  ASSERT_NE(gate, nullptr);
  absl::Status status = NextUntilError(*gate);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "never-")) << status;
}

// Closing a gate ends its streams on the producer side too (no leaked
// handlers), also while the subscription is still waiting for its partition.
TEST(DataExchangeTest, ClosingTheConsumerEndsItsStreams) {
  TestTaskManager producer_tm;
  TestTaskManager consumer_tm;
  auto partition = std::make_shared<ResultPartition>("open", 1, 1);
  ASSERT_TRUE(producer_tm.partitions().Register(partition).ok());
  std::unique_ptr<InputGate> gate = CreateGate(
      "consumer", {{"open", 0, producer_tm.address(), false}, {"not-yet", 0, producer_tm.address(), false}},
      &consumer_tm.partitions());
  ASSERT_NE(gate, nullptr);
  ASSERT_TRUE(WaitFor([&] { return producer_tm.service().active_streams() == 2; }, kGuard));
  gate->Close();
  EXPECT_TRUE(WaitFor([&] { return producer_tm.service().active_streams() == 0; }, kGuard));
  auto after = gate->Next(absl::ZeroDuration());
  EXPECT_EQ(after.status().code(), absl::StatusCode::kFailedPrecondition) << after.status();
  // The subpartition is free for another consumer again.
  EXPECT_TRUE(partition->AttachConsumer(0, [] {}).ok());
}

int ThreadsOfThisProcess() {
  int threads = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) ++threads;
  return threads;
}

// Writes `records` records and END_OF_INPUT to subpartition 0 of
// `partition`, or stops when it is released.
void Produce(std::shared_ptr<ResultPartition> partition, int producer, int records) {
  RecordWriterOptions options;
  options.max_buffer_bytes = 256;
  RecordWriter writer(std::move(partition), TestRecordType(), Partitioning::kForward, nullptr, 1, 0, options);
  try {
    for (int i = 0; i < records; ++i) {
      TestRecord record{producer, i, "k", std::string(40, 'x')};
      writer.Emit(&record);
    }
    writer.EmitEndOfInput();
  } catch (const TaskCancelled&) {
  }
}

// The threads of the data exchange are fixed: a consumer TaskManager reading
// 256 remote channels from a producer TaskManager (one connection, one
// HTTP/2 stream per channel) runs no more threads than with 2 channels.
TEST(DataExchangeTest, ThreadsDoNotGrowWithChannels) {
  constexpr int kNetworkThreads = 2;
  TestTaskManager producer_tm({}, kNetworkThreads);
  auto network = NetworkClient::Create(kNetworkThreads);
  EXPECT_EQ(producer_tm.service().network_threads(), kNetworkThreads);
  EXPECT_EQ(network->threads(), kNetworkThreads);

  // Reads `channels` channels of `records` records each, all at once.
  auto read_channels = [&](const std::string& prefix, int channels, int records) {
    std::vector<std::shared_ptr<ResultPartition>> partitions;
    std::vector<InputChannelSpec> specs;
    for (int i = 0; i < channels; ++i) {
      partitions.push_back(std::make_shared<ResultPartition>(absl::StrCat(prefix, i), 1, 2));
      EXPECT_TRUE(producer_tm.partitions().Register(partitions.back()).ok());
      specs.push_back({absl::StrCat(prefix, i), 0, producer_tm.address(), false});
    }
    InputGateOptions options;
    options.initial_credit = 2;
    options.network = network;
    std::unique_ptr<InputGate> gate = CreateGate(prefix, specs, nullptr, options);
    EXPECT_NE(gate, nullptr);
    // Every stream open and waiting for data: the most threads there will be.
    EXPECT_TRUE(WaitFor([&] { return producer_tm.service().active_streams() == channels; }, kGuard));
    const int threads = ThreadsOfThisProcess();
    std::vector<std::thread> producers;
    for (int i = 0; i < channels; ++i) producers.emplace_back(Produce, partitions[i], i, records);
    std::vector<std::pair<int, TestRecord>> received;
    absl::Status status = ReadAll(*gate, &received);
    for (std::thread& t : producers) t.join();
    EXPECT_TRUE(status.ok()) << status;
    EXPECT_EQ(received.size(), static_cast<size_t>(channels) * records);
    EXPECT_TRUE(WaitFor([&] { return producer_tm.service().active_streams() == 0; }, kGuard));
    return threads;
  };
  const int with_few = read_channels("few-", 2, 100);
  const int with_many = read_channels("many-", 256, 100);
  // gRPC may start a helper thread of its own on first use; a thread per
  // channel (or two per stream on the producer side) would add hundreds.
  EXPECT_LE(with_many, with_few + 4) << "threads with 2 channels: " << with_few << ", with 256: " << with_many;
  EXPECT_EQ(network->connections(), 1) << "every channel to one TaskManager shares its connection";
}

// A consumer that stops reading one channel stalls that channel's producer
// only: another channel between the same two TaskManagers (the same
// connection) delivers everything.
TEST(DataExchangeTest, ASlowChannelDoesNotStallTheOthersOnItsConnection) {
  TestTaskManager producer_tm;
  auto network = NetworkClient::Create(1);
  auto stalled = std::make_shared<ResultPartition>("stalled", 1, 2);
  auto flowing = std::make_shared<ResultPartition>("flowing", 1, 2);
  ASSERT_TRUE(producer_tm.partitions().Register(stalled).ok());
  ASSERT_TRUE(producer_tm.partitions().Register(flowing).ok());
  InputGateOptions options;
  options.initial_credit = 2;
  options.network = network;
  std::unique_ptr<InputGate> stalled_gate =
      CreateGate("stalled consumer", {{"stalled", 0, producer_tm.address(), false}}, nullptr, options);
  std::unique_ptr<InputGate> flowing_gate =
      CreateGate("flowing consumer", {{"flowing", 0, producer_tm.address(), false}}, nullptr, options);
  ASSERT_NE(stalled_gate, nullptr);
  ASSERT_NE(flowing_gate, nullptr);

  std::thread stalled_producer(Produce, stalled, 0, 20000);
  ASSERT_TRUE(WaitFor([&] { return stalled->backpressured(); }, kGuard)) << "the unread channel never filled up";
  constexpr int kRecords = 20000;
  std::thread flowing_producer(Produce, flowing, 1, kRecords);
  std::vector<std::pair<int, TestRecord>> received;
  absl::Status status = ReadAll(*flowing_gate, &received);
  flowing_producer.join();
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(received.size(), static_cast<size_t>(kRecords));
  EXPECT_TRUE(stalled->backpressured()) << "the unread channel's producer must still be held back";
  EXPECT_EQ(network->connections(), 1);

  stalled->Release();  // the unread producer ends (cancelled)
  stalled_producer.join();
}

// Subscriptions waiting for unregistered partitions are bounded; the ones
// refused beyond the bound are retried by their consumers, and nothing is
// lost once the producers register.
TEST(DataExchangeTest, BoundsSubscriptionsWaitingForTheirPartitions) {
  DataExchangeServiceOptions service_options;
  service_options.max_waiting_streams = 2;
  service_options.partition_wait = absl::Seconds(30);
  TestTaskManager producer_tm(service_options);
  constexpr int kChannels = 6;
  std::vector<InputChannelSpec> specs;
  for (int i = 0; i < kChannels; ++i) specs.push_back({absl::StrCat("later-", i), 0, producer_tm.address(), false});
  InputGateOptions options;
  options.initial_backoff = absl::Milliseconds(5);
  options.max_backoff = absl::Milliseconds(50);
  std::unique_ptr<InputGate> gate = CreateGate("eager consumer", specs, nullptr, options);
  ASSERT_NE(gate, nullptr);
  ASSERT_TRUE(WaitFor([&] { return producer_tm.service().waiting_streams() == 2; }, kGuard));
  // The others are refused and retried, never let in beyond the bound.
  for (int i = 0; i < 20; ++i) {
    EXPECT_LE(producer_tm.service().waiting_streams(), 2);
    absl::SleepFor(absl::Milliseconds(5));
  }
  std::vector<std::thread> producers;
  for (int i = 0; i < kChannels; ++i) {
    auto partition = std::make_shared<ResultPartition>(absl::StrCat("later-", i), 1);
    ASSERT_TRUE(producer_tm.partitions().Register(partition).ok());
    producers.emplace_back(Produce, partition, i, 50);
  }
  std::vector<std::pair<int, TestRecord>> received;
  absl::Status status = ReadAll(*gate, &received);
  for (std::thread& t : producers) t.join();
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(received.size(), static_cast<size_t>(kChannels) * 50);
}

TEST(DataExchangeTest, ARefusedSubscriptionFailsClearlyAtThePartitionDeadline) {
  DataExchangeServiceOptions service_options;
  service_options.max_waiting_streams = 1;
  service_options.partition_wait = absl::Seconds(30);
  TestTaskManager producer_tm(service_options);
  InputGateOptions options;
  options.initial_backoff = absl::Milliseconds(5);
  options.partition_timeout = absl::Milliseconds(300);
  std::unique_ptr<InputGate> gate = CreateGate(
      "consumer", {{"absent-0", 0, producer_tm.address(), false}, {"absent-1", 0, producer_tm.address(), false}},
      nullptr, options);
  ASSERT_NE(gate, nullptr);
  ExpectErrorMentions(NextUntilError(*gate), absl::StatusCode::kResourceExhausted,
                      {"absent-", "refused the subscription", "waiting for their partitions"});
}

// A peer that opens streams and never subscribes holds nothing for long and
// no more than the bound: the streams beyond it are refused at once, the
// others end after partition_wait; no thread is started for any of them.
TEST(DataExchangeTest, APeerOpeningManyStreamsWithoutSubscribingIsBounded) {
  DataExchangeServiceOptions service_options;
  service_options.max_waiting_streams = 20;
  service_options.partition_wait = absl::Seconds(2);
  TestTaskManager producer_tm(service_options);
  auto stub = v1::DataExchangeService::NewStub(rpc::CreateChannel(producer_tm.address()));
  const int threads_before = ThreadsOfThisProcess();
  constexpr int kStreams = 200;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReaderWriter<v1::SubscribeRequest, v1::DataBuffer>>> streams;
  for (int i = 0; i < kStreams; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    streams.push_back(stub->Subscribe(contexts.back().get()));
  }
  int peak_waiting = 0;
  for (int i = 0; i < 50; ++i) {
    peak_waiting = std::max(peak_waiting, producer_tm.service().waiting_streams());
    absl::SleepFor(absl::Milliseconds(2));
  }
  EXPECT_LE(ThreadsOfThisProcess(), threads_before + 4);
  int refused = 0;
  int expired = 0;
  for (auto& stream : streams) {
    grpc::Status status = stream->Finish();
    if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++refused;
      EXPECT_TRUE(absl::StrContains(status.error_message(), "taskmanager.network.max-waiting-subscriptions"))
          << status.error_message();
    } else if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      ++expired;
      EXPECT_TRUE(absl::StrContains(status.error_message(), "no subscription arrived")) << status.error_message();
    } else {
      ADD_FAILURE() << "unexpected end of a stream that never subscribed: " << status.error_code() << " "
                    << status.error_message();
    }
  }
  EXPECT_LE(peak_waiting, 20);
  EXPECT_GE(refused, 1);
  EXPECT_GE(expired, 1);
  EXPECT_EQ(refused + expired, kStreams);
  EXPECT_TRUE(WaitFor([&] { return producer_tm.service().waiting_streams() == 0; }, kGuard));
  // The server's side of a stream ends after the client saw its status (the
  // completion of the server's finish comes in on a network thread).
  EXPECT_TRUE(WaitFor([&] { return producer_tm.service().active_streams() == 0; }, kGuard))
      << producer_tm.service().active_streams() << " streams still active";
}

// A producer that breaks the protocol: it answers a subscription with
// `buffers` buffers of `kind`, ignoring credit, then waits for the consumer
// to go away.
class MisbehavingProducer final : public v1::DataExchangeService::Service {
 public:
  MisbehavingProducer(v1::BufferKind kind, int buffers) : kind_(kind), buffers_(buffers) {}
  grpc::Status Subscribe(grpc::ServerContext* context,
                         grpc::ServerReaderWriter<v1::DataBuffer, v1::SubscribeRequest>* stream) override {
    v1::SubscribeRequest request;
    if (!stream->Read(&request)) return grpc::Status::CANCELLED;
    for (int i = 0; i < buffers_; ++i) {
      v1::DataBuffer buffer;
      buffer.set_kind(kind_);
      if (!stream->Write(buffer)) break;
    }
    while (stream->Read(&request)) {
    }
    ended_ = true;
    return grpc::Status::OK;
  }
  // The consumer went away.
  bool ended() const { return ended_.load(); }

 private:
  std::atomic<bool> ended_{false};
  const v1::BufferKind kind_;
  const int buffers_;
};

class BadProducerTest : public ::testing::TestWithParam<bool> {};

// The consumer fails with an error that says what the producer did wrong,
// and its gate closes (no stream left behind).
TEST_P(BadProducerTest, TheConsumerFailsClearly) {
  const bool unknown_kind = GetParam();
  MisbehavingProducer producer(unknown_kind ? static_cast<v1::BufferKind>(77) : v1::BUFFER_KIND_DATA,
                               unknown_kind ? 1 : 10);
  rpc::ServerOptions server_options;
  server_options.services = {&producer};
  absl::StatusOr<rpc::StartedServer> started = rpc::StartServer(server_options);
  ASSERT_TRUE(started.ok()) << started.status();
  const std::string address = rpc::JoinHostPort("127.0.0.1", started->port);
  InputGateOptions options;
  options.initial_credit = 2;
  std::unique_ptr<InputGate> gate = CreateGate("consumer", {{"p", 0, address, false}}, nullptr, options);
  ASSERT_NE(gate, nullptr);
  // The consumer takes nothing until its side has ended the call, so that
  // the extra buffers are beyond its credit.
  ASSERT_TRUE(WaitFor([&] { return producer.ended(); }, kGuard)) << "the consumer never ended the stream";
  const absl::Status status = NextUntilError(*gate);
  if (unknown_kind) {
    ExpectErrorMentions(status, absl::StatusCode::kInvalidArgument, {"unknown kind", address});
  } else {
    ExpectErrorMentions(status, absl::StatusCode::kFailedPrecondition, {"more buffers than it had credit", address});
  }
  gate->Close();
  started->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
}

INSTANTIATE_TEST_SUITE_P(UnknownKindAndTooMany, BadProducerTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "UnknownKind" : "BeyondCredit");
                         });

TEST(DataExchangeTest, RejectsInvalidChannelSpecs) {
  PartitionManager partitions;
  EXPECT_EQ(InputGate::Create("t", {{"", 0, "h:1", false}}, &partitions).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(InputGate::Create("t", {{"p", -1, "h:1", false}}, &partitions).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(InputGate::Create("t", {{"p", 0, "", false}}, &partitions).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(InputGate::Create("t", {{"p", 0, "", true}}, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto empty = InputGate::Create("t", {}, nullptr);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE((*empty)->finished());
}

}  // namespace
}  // namespace weir::taskmanager::network
