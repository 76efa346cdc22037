// A blocking, plaintext TCP connection to one Kafka broker, and the parsing
// of bootstrap server lists. The transport under TransactionClient.
//
// Thread-safety: ParseBootstrapServers is a pure function. A BrokerConnection
// is thread-compatible: one thread at a time uses it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace weir::connectors::kafka_protocol {

struct BrokerAddress {
  std::string host;  // a name, an IPv4 address or an IPv6 address (no brackets)
  int port = 0;

  // "host:port", "[::1]:9092" for IPv6.
  std::string ToString() const;
  friend bool operator==(const BrokerAddress&, const BrokerAddress&) = default;
};

// Parses "host:port[,host:port...]" as librdkafka's bootstrap.servers takes
// it: whitespace around entries is ignored, an IPv6 host is written in
// brackets, and an entry may start with "plaintext://". kInvalidArgument
// naming the entry that is malformed, and for any other "<protocol>://".
absl::StatusOr<std::vector<BrokerAddress>> ParseBootstrapServers(absl::string_view servers);

// One TCP connection to a broker that carries one request at a time: send a
// request frame, wait for its response frame. Every wait is a poll() bounded
// by the caller's deadline. After any error the connection is broken (the
// stream position is unknown) and every later call fails; open a new one.
class BrokerConnection {
 public:
  // Resolves `address` and connects to the first of its addresses that
  // accepts within `deadline`. kUnavailable naming the address and the
  // system's reason (refused, unreachable, timed out). Name resolution
  // (getaddrinfo) itself is not bounded by the deadline.
  static absl::StatusOr<std::unique_ptr<BrokerConnection>> Connect(const BrokerAddress& address,
                                                                   absl::Time deadline);

  ~BrokerConnection();
  BrokerConnection(const BrokerConnection&) = delete;
  BrokerConnection& operator=(const BrokerConnection&) = delete;

  // The correlation id for the next request on this connection.
  int32_t NextCorrelationId() { return next_correlation_id_++; }

  // Sends `request` (a whole frame, size prefix included) and returns the
  // response frame that follows, without its size prefix. kUnavailable for a
  // socket error, the broker closing the connection, or `deadline` passing;
  // kInternal for a response size above kMaxResponseBytes or below 4 (not a
  // Kafka broker, or a broken one).
  absl::StatusOr<std::string> RoundTrip(absl::string_view request, absl::Time deadline);

  const BrokerAddress& address() const { return address_; }

 private:
  BrokerConnection(BrokerAddress address, int fd) : address_(std::move(address)), fd_(fd) {}

  absl::Status SendAll(absl::string_view bytes, absl::Time deadline);
  absl::Status ReceiveExactly(size_t n, absl::Time deadline, std::string* out);
  // Waits until `fd_` is ready for `events` (POLLIN / POLLOUT).
  absl::Status WaitFor(short events, absl::Time deadline, absl::string_view doing);

  const BrokerAddress address_;
  int fd_ = -1;
  bool broken_ = false;
  int32_t next_correlation_id_ = 1;
};

}  // namespace weir::connectors::kafka_protocol

