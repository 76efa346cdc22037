#include "connectors/kafka/protocol/broker_connection.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "connectors/kafka/protocol/kafka_codec.h"

namespace weir::connectors::kafka_protocol {
namespace {

std::string ErrnoText(int error) { return std::strerror(error); }

// Milliseconds left until `deadline` for poll(): rounded up so that a wait
// does not end just before it, and 0 once it has passed.
int PollTimeoutMs(absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  const int64_t ms = absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1)));
  return static_cast<int>(std::min<int64_t>(ms, 60 * 60 * 1000));
}

absl::StatusOr<BrokerAddress> ParseEntry(absl::string_view entry) {
  absl::string_view rest = entry;
  if (const size_t scheme = rest.find("://"); scheme != absl::string_view::npos) {
    if (!absl::EqualsIgnoreCase(rest.substr(0, scheme), "plaintext")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bootstrap server '", entry, "': only plaintext connections are supported"));
    }
    rest.remove_prefix(scheme + 3);
  }
  BrokerAddress address;
  absl::string_view port;
  if (absl::ConsumePrefix(&rest, "[")) {
    const size_t close = rest.find(']');
    if (close == absl::string_view::npos || close + 1 >= rest.size() || rest[close + 1] != ':') {
      return absl::InvalidArgumentError(
          absl::StrCat("bootstrap server '", entry, "' is not \"[ipv6-address]:port\""));
    }
    address.host = std::string(rest.substr(0, close));
    port = rest.substr(close + 2);
  } else {
    const size_t colon = rest.rfind(':');
    if (colon == absl::string_view::npos || rest.find(':') != colon) {
      return absl::InvalidArgumentError(
          absl::StrCat("bootstrap server '", entry, "' is not \"host:port\""));
    }
    address.host = std::string(rest.substr(0, colon));
    port = rest.substr(colon + 1);
  }
  if (address.host.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("bootstrap server '", entry, "' has no host"));
  }
  if (!absl::SimpleAtoi(port, &address.port) || address.port < 1 || address.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("bootstrap server '", entry, "' has port '",
                                                   port, "'; expected 1-65535"));
  }
  return address;
}

}  // namespace

std::string BrokerAddress::ToString() const {
  if (absl::StrContains(host, ':')) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<std::vector<BrokerAddress>> ParseBootstrapServers(absl::string_view servers) {
  std::vector<BrokerAddress> addresses;
  for (absl::string_view entry : absl::StrSplit(servers, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    if (entry.empty()) continue;
    ASSIGN_OR_RETURN(BrokerAddress address, ParseEntry(entry));
    addresses.push_back(std::move(address));
  }
  if (addresses.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bootstrap servers '", servers, "' name no \"host:port\""));
  }
  return addresses;
}

absl::StatusOr<std::unique_ptr<BrokerConnection>> BrokerConnection::Connect(
    const BrokerAddress& address, absl::Time deadline) {
  const std::string where = address.ToString();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | AI_ADDRCONFIG;
  addrinfo* resolved = nullptr;
  const std::string port = absl::StrCat(address.port);
  if (const int rc = getaddrinfo(address.host.c_str(), port.c_str(), &hints, &resolved); rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("resolving ", where, ": ", rc == EAI_SYSTEM ? ErrnoText(errno) : gai_strerror(rc)));
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owned(resolved, &freeaddrinfo);

  std::string last_error = "no address";
  for (const addrinfo* ai = resolved; ai != nullptr; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                          ai->ai_protocol);
    if (fd < 0) {
      last_error = absl::StrCat("socket: ", ErrnoText(errno));
      continue;
    }
    // Owns fd from here on: the destructor closes it on every failure below.
    std::unique_ptr<BrokerConnection> connection(new BrokerConnection(address, fd));
    const int one = 1;
    // Requests are small and answered one at a time: do not let Nagle hold them.
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        last_error = ErrnoText(errno);
        continue;
      }
      if (absl::Status ready = connection->WaitFor(POLLOUT, deadline, "connecting to"); !ready.ok()) {
        last_error = absl::Now() >= deadline ? "timed out" : std::string(ready.message());
        continue;
      }
      int error = 0;
      socklen_t length = sizeof(error);
      if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0) error = errno;
      if (error != 0) {
        last_error = ErrnoText(error);
        continue;
      }
    }
    return connection;
  }
  return absl::UnavailableError(absl::StrCat("connecting to ", where, ": ", last_error));
}

BrokerConnection::~BrokerConnection() {
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<std::string> BrokerConnection::RoundTrip(absl::string_view request,
                                                        absl::Time deadline) {
  if (broken_) {
    return absl::UnavailableError(
        absl::StrCat("the connection to ", address_.ToString(), " failed earlier"));
  }
  // Any error below leaves the stream in an unknown place.
  broken_ = true;
  RETURN_IF_ERROR(SendAll(request, deadline));
  std::string size_bytes;
  RETURN_IF_ERROR(ReceiveExactly(4, deadline, &size_bytes));
  absl::StatusOr<int32_t> size = DecodeResponseSize(size_bytes);
  if (!size.ok()) {
    return absl::InternalError(absl::StrCat(address_.ToString(),
                                            " does not answer like a Kafka broker: ",
                                            size.status().message()));
  }
  std::string frame;
  RETURN_IF_ERROR(ReceiveExactly(static_cast<size_t>(*size), deadline, &frame));
  broken_ = false;
  return frame;
}

absl::Status BrokerConnection::SendAll(absl::string_view bytes, absl::Time deadline) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n >= 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return absl::UnavailableError(
          absl::StrCat("sending to ", address_.ToString(), ": ", ErrnoText(errno)));
    }
    RETURN_IF_ERROR(WaitFor(POLLOUT, deadline, "sending a request to"));
  }
  return absl::OkStatus();
}

absl::Status BrokerConnection::ReceiveExactly(size_t n, absl::Time deadline, std::string* out) {
  out->resize(n);
  size_t received = 0;
  while (received < n) {
    const ssize_t got = recv(fd_, out->data() + received, n - received, 0);
    if (got > 0) {
      received += static_cast<size_t>(got);
      continue;
    }
    if (got == 0) {
      return absl::UnavailableError(absl::StrCat(address_.ToString(),
                                                 " closed the connection before its response was "
                                                 "complete (",
                                                 received, " of ", n, " bytes)"));
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return absl::UnavailableError(
          absl::StrCat("receiving from ", address_.ToString(), ": ", ErrnoText(errno)));
    }
    RETURN_IF_ERROR(WaitFor(POLLIN, deadline, "waiting for a response from"));
  }
  return absl::OkStatus();
}

absl::Status BrokerConnection::WaitFor(short events, absl::Time deadline, absl::string_view doing) {
  for (;;) {
    const int timeout_ms = PollTimeoutMs(deadline);
    if (timeout_ms == 0) {
      return absl::UnavailableError(
          absl::StrCat(doing, " ", address_.ToString(), ": timed out"));
    }
    pollfd p{};
    p.fd = fd_;
    p.events = events;
    const int rc = poll(&p, 1, timeout_ms);
    if (rc < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(
          absl::StrCat(doing, " ", address_.ToString(), ": poll: ", ErrnoText(errno)));
    }
    // Ready, or an error / hang-up that the next send, recv or SO_ERROR
    // reports in detail.
    if (rc > 0) return absl::OkStatus();
  }
}

}  // namespace weir::connectors::kafka_protocol
