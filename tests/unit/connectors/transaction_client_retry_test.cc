// TransactionClient against a scripted stand-in for a broker on 127.0.0.1:
// what the real broker rarely does on demand — coordinators loading or moving,
// concurrent transactions, versions it does not share, bytes that are not
// Kafka, silence — and what the client does about it: retry, find the
// coordinator again, or give up with a clear status. The real broker's
// answers are covered by tests/kafka/connectors/transaction_client_test.cc.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "connectors/kafka/protocol/kafka_codec.h"
#include "connectors/kafka/protocol/kafka_errors.h"
#include "connectors/kafka/protocol/transaction_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weir::connectors::kafka_protocol {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Optional;
using ::testing::Pair;

// Big-endian fields of a response frame.
class Frame {
 public:
  Frame& I8(int8_t v) { return Unsigned(static_cast<uint8_t>(v), 1); }
  Frame& I16(int16_t v) { return Unsigned(static_cast<uint16_t>(v), 2); }
  Frame& I32(int32_t v) { return Unsigned(static_cast<uint32_t>(v), 4); }
  Frame& I64(int64_t v) {
    I32(static_cast<int32_t>(static_cast<uint64_t>(v) >> 32));
    return I32(static_cast<int32_t>(v & 0xffffffff));
  }
  Frame& Str(const std::string& s) {
    I16(static_cast<int16_t>(s.size()));
    bytes_ += s;
    return *this;
  }
  // A compact string shorter than 127 bytes.
  Frame& CompactStr(const std::string& s) {
    I8(static_cast<int8_t>(s.size() + 1));
    bytes_ += s;
    return *this;
  }
  // The frame with its size in front.
  std::string Sized() const {
    Frame sized;
    sized.I32(static_cast<int32_t>(bytes_.size()));
    return sized.bytes_ + bytes_;
  }

 private:
  Frame& Unsigned(uint32_t v, int n) {
    for (int shift = 8 * (n - 1); shift >= 0; shift -= 8) {
      bytes_.push_back(static_cast<char>((v >> shift) & 0xff));
    }
    return *this;
  }
  std::string bytes_;
};

int16_t ReadI16(const std::string& b, size_t at) {
  return static_cast<int16_t>((static_cast<uint8_t>(b[at]) << 8) | static_cast<uint8_t>(b[at + 1]));
}
int32_t ReadI32(const std::string& b, size_t at) {
  return static_cast<int32_t>((static_cast<uint32_t>(static_cast<uint16_t>(ReadI16(b, at))) << 16) |
                              static_cast<uint16_t>(ReadI16(b, at + 2)));
}

// A broker stand-in, one connection at a time on its own thread. It answers
// ApiVersions with the ranges it is given, FindCoordinator with the next
// scripted error code (then NONE) naming itself, EndTxn with the next
// scripted error code (then `end_txn_default`), OffsetFetch with the next
// scripted top-level error code (then offset 42, metadata "m", for every
// partition asked), and DescribeTransactions with the next scripted error
// code of the state (then an Ongoing transaction of producer id 7, epoch 3).
//
// Thread-safety: set the script before the client runs; the accessors are
// safe from the test thread while the server thread runs.
class FakeBroker {
 public:
  enum class Mode { kAnswer, kGarbage, kSilent };

  explicit FakeBroker(Mode mode = Mode::kAnswer) : mode_(mode) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
        listen(listen_fd_, 8) != 0 ||
        getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      ADD_FAILURE() << "FakeBroker: cannot listen on 127.0.0.1";
    }
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }

  ~FakeBroker() {
    stop_ = true;
    thread_.join();
    close(listen_fd_);
  }

  std::string bootstrap() const { return absl::StrCat("127.0.0.1:", port_); }

  void SetEndTxnVersions(VersionRange versions) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    end_txn_versions_ = versions;
  }
  void ScriptFindCoordinator(std::deque<int16_t> codes) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    find_coordinator_script_ = std::move(codes);
  }
  // Leaves DescribeTransactions out of the ApiVersions answer (a broker
  // before Kafka 3.0).
  void DropDescribeTransactions() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    describe_transactions_supported_ = false;
  }
  void ScriptOffsetFetch(std::deque<int16_t> codes) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    offset_fetch_script_ = std::move(codes);
  }
  void ScriptDescribeTransactions(std::deque<int16_t> codes) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    describe_transactions_script_ = std::move(codes);
  }
  // The key_type of the last FindCoordinator request.
  int last_key_type() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return last_key_type_;
  }
  void ScriptEndTxn(std::deque<int16_t> codes, int16_t then = kNone) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    end_txn_script_ = std::move(codes);
    end_txn_default_ = then;
  }

  // (api key, version) of every request received, in order.
  std::vector<std::pair<int16_t, int16_t>> requests() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return requests_;
  }
  // The last EndTxn request frame (without its size).
  std::string last_end_txn() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return last_end_txn_;
  }
  int connections() const { return connections_; }

 private:
  void Serve() {
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      ++connections_;
      ServeConnection(fd);
      close(fd);
    }
  }

  // Reads `n` bytes; false on EOF, error or stop.
  bool ReadExactly(int fd, size_t n, std::string* out) {
    out->clear();
    while (out->size() < n) {
      pollfd p{fd, POLLIN, 0};
      if (stop_) return false;
      if (poll(&p, 1, 20) <= 0) continue;
      char buffer[4096];
      const ssize_t got = read(fd, buffer, std::min(sizeof(buffer), n - out->size()));
      if (got <= 0) return false;
      out->append(buffer, static_cast<size_t>(got));
    }
    return true;
  }

  void ServeConnection(int fd) {
    std::string size;
    std::string frame;
    while (ReadExactly(fd, 4, &size) && ReadExactly(fd, static_cast<size_t>(ReadI32(size, 0)), &frame)) {
      if (mode_ == Mode::kSilent) continue;
      const std::string answer = mode_ == Mode::kGarbage ? "HTTP/1.1 400 Bad Request\r\n\r\n"
                                                         : Answer(frame);
      if (write(fd, answer.data(), answer.size()) != static_cast<ssize_t>(answer.size())) return;
    }
  }

  std::string Answer(const std::string& request) ABSL_LOCKS_EXCLUDED(mu_) {
    const int16_t api = ReadI16(request, 0);
    const int16_t version = ReadI16(request, 2);
    const int32_t correlation_id = ReadI32(request, 4);
    absl::MutexLock lock(&mu_);
    requests_.emplace_back(api, version);
    Frame f;
    f.I32(correlation_id);
    switch (api) {
      case kApiVersionsKey:
        f.I16(kNone).I32(describe_transactions_supported_ ? 5 : 4);
        f.I16(kApiVersionsKey).I16(0).I16(4);
        f.I16(kFindCoordinatorKey).I16(0).I16(6);
        f.I16(kEndTxnKey).I16(end_txn_versions_.min).I16(end_txn_versions_.max);
        f.I16(kOffsetFetchKey).I16(1).I16(9);
        if (describe_transactions_supported_) f.I16(kDescribeTransactionsKey).I16(0).I16(0);
        if (version >= 1) f.I32(0);
        break;
      case kFindCoordinatorKey:
        // The key_type is the last byte of the request.
        last_key_type_ = request.back();
        f.I32(0).I16(Next(find_coordinator_script_, kNone)).I16(-1);
        f.I32(1).Str("127.0.0.1").I32(port_);
        break;
      case kOffsetFetchKey: {
        // Header: api, version, correlation id, client id; then the group.
        size_t at = 8;
        at += 2 + static_cast<size_t>(ReadI16(request, at));  // client id
        at += 2 + static_cast<size_t>(ReadI16(request, at));  // group id
        const int16_t code = Next(offset_fetch_script_, kNone);
        if (version >= 3) f.I32(0);
        if (code != kNone) {
          f.I32(0);
        } else {
          const int32_t topics = ReadI32(request, at);
          at += 4;
          f.I32(topics);
          for (int32_t t = 0; t < topics; ++t) {
            const size_t name_length = static_cast<size_t>(ReadI16(request, at));
            f.Str(request.substr(at + 2, name_length));
            at += 2 + name_length;
            const int32_t partitions = ReadI32(request, at);
            at += 4;
            f.I32(partitions);
            for (int32_t p = 0; p < partitions; ++p, at += 4) {
              f.I32(ReadI32(request, at)).I64(42);
              if (version >= 5) f.I32(-1);
              f.Str("m").I16(kNone);
            }
          }
        }
        f.I16(code);
        break;
      }
      case kDescribeTransactionsKey: {
        // Header: api, version, correlation id, client id, tags; then the
        // compact array of ids (one, shorter than 127 bytes, here).
        size_t at = 8;
        at += 2 + static_cast<size_t>(ReadI16(request, at)) + 1;
        const std::string id = request.substr(at + 2, static_cast<size_t>(request[at + 1]) - 1);
        const int16_t code = Next(describe_transactions_script_, kNone);
        f.I8(0).I32(0).I8(2).I16(code).CompactStr(id);
        f.CompactStr(code == kNone ? "Ongoing" : "").I32(code == kNone ? 60000 : 0).I64(0);
        f.I64(code == kNone ? 7 : -1).I16(code == kNone ? 3 : -1).I8(1).I8(0).I8(0);
        break;
      }
      case kEndTxnKey:
        last_end_txn_ = request;
        if (version >= 3) f.I8(0);
        f.I32(0).I16(Next(end_txn_script_, end_txn_default_));
        if (version >= 3) f.I8(0);
        break;
      default:
        ADD_FAILURE() << "unexpected API " << api;
    }
    return f.Sized();
  }

  static int16_t Next(std::deque<int16_t>& script, int16_t otherwise) {
    if (script.empty()) return otherwise;
    const int16_t code = script.front();
    script.pop_front();
    return code;
  }

  const Mode mode_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::thread thread_;

  mutable absl::Mutex mu_;
  VersionRange end_txn_versions_ ABSL_GUARDED_BY(mu_){0, 5};
  bool describe_transactions_supported_ ABSL_GUARDED_BY(mu_) = true;
  std::deque<int16_t> offset_fetch_script_ ABSL_GUARDED_BY(mu_);
  std::deque<int16_t> describe_transactions_script_ ABSL_GUARDED_BY(mu_);
  int last_key_type_ ABSL_GUARDED_BY(mu_) = -1;
  std::deque<int16_t> find_coordinator_script_ ABSL_GUARDED_BY(mu_);
  std::deque<int16_t> end_txn_script_ ABSL_GUARDED_BY(mu_);
  int16_t end_txn_default_ ABSL_GUARDED_BY(mu_) = kNone;
  std::vector<std::pair<int16_t, int16_t>> requests_ ABSL_GUARDED_BY(mu_);
  std::string last_end_txn_ ABSL_GUARDED_BY(mu_);
};

TransactionClient Client(const FakeBroker& broker, absl::Duration deadline = absl::Seconds(10)) {
  TransactionClientOptions options;
  options.deadline = deadline;
  options.retry_backoff = absl::Milliseconds(10);
  options.max_retry_backoff = absl::Milliseconds(100);
  absl::StatusOr<TransactionClient> client = TransactionClient::Create(broker.bootstrap(), options);
  EXPECT_TRUE(client.ok()) << client.status();
  return *std::move(client);
}

constexpr std::pair<int16_t, int16_t> kApiVersionsV2{kApiVersionsKey, 2};
constexpr std::pair<int16_t, int16_t> kFindCoordinatorV2{kFindCoordinatorKey, 2};
constexpr std::pair<int16_t, int16_t> kEndTxnV4{kEndTxnKey, 4};
constexpr std::pair<int16_t, int16_t> kOffsetFetchV5{kOffsetFetchKey, 5};
constexpr std::pair<int16_t, int16_t> kDescribeTransactionsV0{kDescribeTransactionsKey, 0};

TEST(TransactionClientRetryTest, SendsEndTxnV4ToABrokerThatAlsoSpeaksV5) {
  FakeBroker broker;
  const absl::Status status = Client(broker).CommitTransaction("txn-1", 7, 3);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(broker.requests(), ElementsAre(kApiVersionsV2, kFindCoordinatorV2, kEndTxnV4));
  // The coordinator is the bootstrap broker itself: one connection.
  EXPECT_EQ(broker.connections(), 1);
  absl::StatusOr<std::string> expected =
      EncodeEndTxnRequest({4, 3, "weir-transaction-client"}, {"txn-1", 7, 3, true});
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(broker.last_end_txn(), expected->substr(4));
}

TEST(TransactionClientRetryTest, SendsTheHighestVersionBothSpeak) {
  FakeBroker broker;
  broker.SetEndTxnVersions({0, 1});
  ASSERT_TRUE(Client(broker).AbortTransaction("txn-1", 7, 3).ok());
  EXPECT_THAT(broker.requests().back(), Pair(kEndTxnKey, 1));
  const std::string request = broker.last_end_txn();
  EXPECT_EQ(request.back(), 0) << "committed=false";
}

TEST(TransactionClientRetryTest, RefusesABrokerWithoutAClassicEndTxnVersion) {
  FakeBroker broker;
  broker.SetEndTxnVersions({5, 6});
  const absl::Status status = Client(broker).CommitTransaction("txn-1", 7, 3);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << status;
  EXPECT_THAT(status.message(), HasSubstr("supports EndTxn v5-v6; this client sends only v0-v4"));
  EXPECT_THAT(broker.requests(), ElementsAre(kApiVersionsV2, kFindCoordinatorV2));
}

TEST(TransactionClientRetryTest, RetriesALoadingCoordinatorAndConcurrentTransactions) {
  FakeBroker broker;
  broker.ScriptEndTxn({kCoordinatorLoadInProgress, kConcurrentTransactions});
  const absl::Status status = Client(broker).CommitTransaction("txn-1", 7, 3);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(broker.requests(), ElementsAre(kApiVersionsV2, kFindCoordinatorV2, kEndTxnV4,
                                             kEndTxnV4, kEndTxnV4));
  EXPECT_EQ(broker.connections(), 1);
}

TEST(TransactionClientRetryTest, FindsTheCoordinatorAgainWhenItMoved) {
  FakeBroker broker;
  broker.ScriptFindCoordinator({kCoordinatorNotAvailable});
  broker.ScriptEndTxn({kNotCoordinator});
  const absl::Status status = Client(broker).CommitTransaction("txn-1", 7, 3);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(broker.requests(),
              ElementsAre(kApiVersionsV2, kFindCoordinatorV2,  // COORDINATOR_NOT_AVAILABLE
                          kApiVersionsV2, kFindCoordinatorV2, kEndTxnV4,  // NOT_COORDINATOR
                          kApiVersionsV2, kFindCoordinatorV2, kEndTxnV4));
  EXPECT_EQ(broker.connections(), 3);
}

TEST(TransactionClientRetryTest, GivesUpAtTheDeadlineWithTheLastError) {
  FakeBroker broker;
  broker.ScriptEndTxn({}, /*then=*/kConcurrentTransactions);
  const absl::Time start = absl::Now();
  const absl::Status status =
      Client(broker, absl::Milliseconds(500)).CommitTransaction("txn-1", 7, 3);
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(), HasSubstr("no result within the deadline of 500ms"));
  EXPECT_THAT(status.message(), HasSubstr("CONCURRENT_TRANSACTIONS (51)"));
  EXPECT_THAT(KafkaErrorCodeOf(status), Optional(kConcurrentTransactions));
}

TEST(TransactionClientRetryTest, DoesNotRetryAFinalAnswer) {
  FakeBroker broker;
  broker.ScriptEndTxn({kInvalidTxnState});
  const absl::Status status = Client(broker).CommitTransaction("txn-1", 7, 3);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_THAT(status.message(), HasSubstr("committing transaction 'txn-1' (producer id 7, epoch 3) "
                                          "at coordinator 127.0.0.1:"));
  EXPECT_THAT(KafkaErrorCodeOf(status), Optional(kInvalidTxnState));
  EXPECT_EQ(broker.requests().size(), 3u);
}

TEST(TransactionClientRetryTest, RefusesAServerThatIsNotKafka) {
  FakeBroker broker(FakeBroker::Mode::kGarbage);
  const absl::Time start = absl::Now();
  const absl::Status status = Client(broker).CommitTransaction("txn-1", 7, 3);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2)) << "not retried";
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
  EXPECT_THAT(status.message(), HasSubstr("does not answer like a Kafka broker"));
  EXPECT_EQ(KafkaErrorCodeOf(status), std::nullopt);
}

TEST(TransactionClientRetryTest, ASilentBrokerTimesOutWithinTheDeadline) {
  FakeBroker broker(FakeBroker::Mode::kSilent);
  TransactionClientOptions options;
  options.request_timeout = absl::Milliseconds(200);
  options.deadline = absl::Milliseconds(700);
  absl::StatusOr<TransactionClient> client = TransactionClient::Create(broker.bootstrap(), options);
  ASSERT_TRUE(client.ok()) << client.status();
  const absl::Time start = absl::Now();
  const absl::Status status = client->CommitTransaction("txn-1", 7, 3);
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(), HasSubstr("waiting for a response from 127.0.0.1:"));
  EXPECT_THAT(status.message(), HasSubstr("timed out"));
  EXPECT_GE(broker.connections(), 2) << "retried with a new connection";
}

TEST(TransactionClientRetryTest, FetchesAGroupOffsetFromTheGroupCoordinatorOnceItIsReady) {
  FakeBroker broker;
  broker.ScriptOffsetFetch({kCoordinatorLoadInProgress, kNotCoordinator});
  const absl::StatusOr<std::optional<CommittedOffset>> offset =
      Client(broker).FetchCommittedOffset("txn-1", "out", 3);
  ASSERT_TRUE(offset.ok()) << offset.status();
  ASSERT_TRUE(offset->has_value());
  EXPECT_EQ((*offset)->offset, 42);
  EXPECT_EQ((*offset)->metadata, "m");
  EXPECT_EQ(broker.last_key_type(), kCoordinatorTypeGroup);
  // Loading: the same coordinator again; NOT_COORDINATOR: find it again.
  EXPECT_THAT(broker.requests(),
              ElementsAre(kApiVersionsV2, kFindCoordinatorV2, kOffsetFetchV5, kOffsetFetchV5,
                          kApiVersionsV2, kFindCoordinatorV2, kOffsetFetchV5));
}

TEST(TransactionClientRetryTest, FetchingAGroupOffsetFailsClearlyWithoutPermission) {
  FakeBroker broker;
  broker.ScriptOffsetFetch({kGroupAuthorizationFailed});
  const absl::Status status = Client(broker).FetchCommittedOffset("txn-1", "out", 0).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
  EXPECT_THAT(status.message(), HasSubstr("fetching the offset group 'txn-1' committed on out-0"));
  EXPECT_THAT(status.message(), HasSubstr("GROUP_AUTHORIZATION_FAILED (30)"));
  EXPECT_THAT(KafkaErrorCodeOf(status), Optional(kGroupAuthorizationFailed));
  EXPECT_EQ(Client(broker).FetchCommittedOffset("", "out", 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Client(broker).FetchCommittedOffset("g", "out", -1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TransactionClientRetryTest, DescribesATransactionAfterTheCoordinatorMoved) {
  FakeBroker broker;
  broker.ScriptDescribeTransactions({kNotCoordinator, kCoordinatorLoadInProgress});
  const absl::StatusOr<TransactionDescription> description =
      Client(broker).DescribeTransaction("txn-1");
  ASSERT_TRUE(description.ok()) << description.status();
  EXPECT_TRUE(description->found);
  EXPECT_EQ(description->state, "Ongoing");
  EXPECT_EQ(description->producer_id, 7);
  EXPECT_EQ(description->producer_epoch, 3);
  EXPECT_EQ(description->timeout_ms, 60000);
  EXPECT_EQ(broker.last_key_type(), kCoordinatorTypeTransaction);
  EXPECT_THAT(broker.requests(),
              ElementsAre(kApiVersionsV2, kFindCoordinatorV2, kDescribeTransactionsV0,
                          kApiVersionsV2, kFindCoordinatorV2, kDescribeTransactionsV0,
                          kDescribeTransactionsV0));
}

TEST(TransactionClientRetryTest, AnUnknownTransactionalIdIsNotFound) {
  FakeBroker broker;
  broker.ScriptDescribeTransactions({kTransactionalIdNotFound});
  const absl::StatusOr<TransactionDescription> description =
      Client(broker).DescribeTransaction("txn-1");
  ASSERT_TRUE(description.ok()) << description.status();
  EXPECT_FALSE(description->found);
  EXPECT_EQ(description->producer_id, -1);
  EXPECT_EQ(broker.requests().size(), 3u);
}

TEST(TransactionClientRetryTest, DescribingNeedsABrokerWithDescribeTransactions) {
  FakeBroker broker;
  broker.DropDescribeTransactions();
  const absl::Status status = Client(broker).DescribeTransaction("txn-1").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << status;
  EXPECT_THAT(status.message(), HasSubstr("does not support DescribeTransactions"));
  EXPECT_THAT(broker.requests(), ElementsAre(kApiVersionsV2, kFindCoordinatorV2));
}

}  // namespace
}  // namespace weir::connectors::kafka_protocol
