#include "tests/testing/hostile_http2_client.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/time/clock.h"

namespace weir::testing {
namespace {

constexpr uint8_t kData = 0x0;
constexpr uint8_t kHeaders = 0x1;
constexpr uint8_t kRstStream = 0x3;
constexpr uint8_t kSettings = 0x4;
constexpr uint8_t kPing = 0x6;
constexpr uint8_t kGoAway = 0x7;
constexpr uint8_t kWindowUpdate = 0x8;
constexpr uint8_t kFlagAck = 0x1;
constexpr uint8_t kFlagEndHeaders = 0x4;
constexpr uint16_t kSettingsInitialWindowSize = 0x4;
constexpr uint16_t kSettingsMaxFrameSize = 0x5;
constexpr int64_t kDefaultWindow = 65535;

std::string FrameHeader(uint32_t length, uint8_t type, uint8_t flags, uint32_t stream) {
  std::string out(9, '\0');
  out[0] = static_cast<char>((length >> 16) & 0xff);
  out[1] = static_cast<char>((length >> 8) & 0xff);
  out[2] = static_cast<char>(length & 0xff);
  out[3] = static_cast<char>(type);
  out[4] = static_cast<char>(flags);
  out[5] = static_cast<char>((stream >> 24) & 0x7f);
  out[6] = static_cast<char>((stream >> 16) & 0xff);
  out[7] = static_cast<char>((stream >> 8) & 0xff);
  out[8] = static_cast<char>(stream & 0xff);
  return out;
}

// An HPACK integer with an N-bit prefix (RFC 7541, 5.1) after `first`'s high bits.
void AppendHpackInteger(std::string* out, uint8_t first, int prefix_bits, uint64_t value) {
  const uint64_t max_prefix = (1u << prefix_bits) - 1;
  if (value < max_prefix) {
    out->push_back(static_cast<char>(first | value));
    return;
  }
  out->push_back(static_cast<char>(first | max_prefix));
  value -= max_prefix;
  while (value >= 128) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

// "Literal Header Field without Indexing -- New Name", no Huffman coding.
void AppendLiteralHeader(std::string* out, const std::string& name, const std::string& value) {
  out->push_back('\0');
  AppendHpackInteger(out, 0, 7, name.size());
  out->append(name);
  AppendHpackInteger(out, 0, 7, value.size());
  out->append(value);
}

uint32_t ReadU32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

bool WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

int Connect(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &result) != 0) return -1;
  int fd = -1;
  for (addrinfo* a = result; a != nullptr; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) break;
    close(fd);
    fd = -1;
  }
  freeaddrinfo(result);
  if (fd >= 0) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  return fd;
}

}  // namespace

bool HostileHttp2Stats::Settled(const HostileHttp2Options& options) const {
  const int64_t total = int64_t{options.connections} * options.streams_per_connection;
  return streams_settled + connections_refused * options.streams_per_connection >= total;
}

HostileHttp2Client::~HostileHttp2Client() { Stop(); }

void HostileHttp2Client::Start() {
  for (int i = 0; i < options_.connections; ++i) threads_.emplace_back([this] { RunConnection(); });
}

void HostileHttp2Client::Stop() {
  stop_ = true;
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

HostileHttp2Stats HostileHttp2Client::stats() const {
  HostileHttp2Stats s;
  s.connections_open = counters_.connections_open.load();
  s.connections_refused = counters_.connections_refused.load();
  s.connections_ended = counters_.connections_ended.load();
  s.streams_opened = counters_.streams_opened.load();
  s.streams_loaded = counters_.streams_loaded.load();
  s.streams_reset = counters_.streams_reset.load();
  s.streams_answered = counters_.streams_answered.load();
  s.bytes_sent = counters_.bytes_sent.load();
  s.streams_settled = counters_.streams_settled.load();
  return s;
}

bool HostileHttp2Client::WaitUntilSettled(absl::Duration timeout) const {
  const absl::Time deadline = absl::Now() + timeout;
  while (!stats().Settled(options_)) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return true;
}

void HostileHttp2Client::RunConnection() {
  const int fd = Connect(options_.host, options_.port);
  if (fd < 0) {
    ++counters_.connections_refused;
    return;
  }
  ++counters_.connections_open;

  struct Stream {
    uint32_t id = 0;
    int64_t window = kDefaultWindow;
    int64_t remaining = 0;  // bytes of prefix and body still to send
    int64_t offset = 0;     // bytes sent
    bool settled = false;
    bool dead = false;
  };
  const int64_t total = 5 + options_.declared_message_bytes - 1;
  std::vector<Stream> streams(options_.streams_per_connection);
  for (size_t i = 0; i < streams.size(); ++i) streams[i].id = static_cast<uint32_t>(2 * i + 1);
  int64_t connection_window = kDefaultWindow;
  int64_t initial_window = kDefaultWindow;
  int64_t max_frame = 16384;
  bool ended = false;
  auto settle = [this](Stream& s) {
    if (s.settled) return;
    s.settled = true;
    ++counters_.streams_settled;
  };
  auto find = [&streams](uint32_t id) -> Stream* {
    if (id == 0 || id % 2 == 0) return nullptr;
    const size_t index = (id - 1) / 2;
    return index < streams.size() ? &streams[index] : nullptr;
  };

  std::string in;
  std::vector<uint8_t> buf(1 << 16);
  bool got_settings = false;
  // Reads what is there (waiting up to 50 ms) and answers it; false once
  // the connection is gone.
  auto read_frames = [&]() -> bool {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) return true;
    const ssize_t n = recv(fd, buf.data(), buf.size(), 0);
    if (n <= 0) return false;
    in.append(reinterpret_cast<const char*>(buf.data()), static_cast<size_t>(n));
    std::string reply;
    while (in.size() >= 9) {
      const auto* h = reinterpret_cast<const uint8_t*>(in.data());
      const uint32_t length = (uint32_t{h[0]} << 16) | (uint32_t{h[1]} << 8) | h[2];
      if (in.size() < 9 + length) break;
      const uint8_t type = h[3];
      const uint8_t flags = h[4];
      const uint32_t stream_id = ReadU32(h + 5) & 0x7fffffff;
      const uint8_t* payload = h + 9;
      switch (type) {
        case kSettings:
          if ((flags & kFlagAck) == 0) {
            for (uint32_t off = 0; off + 6 <= length; off += 6) {
              const uint16_t id = static_cast<uint16_t>((payload[off] << 8) | payload[off + 1]);
              const uint32_t value = ReadU32(payload + off + 2);
              if (id == kSettingsInitialWindowSize) {
                for (Stream& s : streams) s.window += int64_t{value} - initial_window;
                initial_window = value;
              } else if (id == kSettingsMaxFrameSize) {
                max_frame = value;
              }
            }
            reply += FrameHeader(0, kSettings, kFlagAck, 0);
            got_settings = true;
          }
          break;
        case kPing:
          if ((flags & kFlagAck) == 0 && length == 8) {
            reply += FrameHeader(8, kPing, kFlagAck, 0);
            reply.append(reinterpret_cast<const char*>(payload), 8);
          }
          break;
        case kWindowUpdate:
          if (length == 4) {
            const int64_t increment = ReadU32(payload) & 0x7fffffff;
            if (stream_id == 0) {
              connection_window += increment;
            } else if (Stream* s = find(stream_id)) {
              s->window += increment;
            }
          }
          break;
        case kRstStream:
          if (Stream* s = find(stream_id); s != nullptr && !s->dead) {
            s->dead = true;
            ++counters_.streams_reset;
            settle(*s);
          }
          break;
        case kHeaders:
          if (Stream* s = find(stream_id); s != nullptr && !s->dead) {
            // A status before the message is complete: the call was refused.
            s->dead = true;
            ++counters_.streams_answered;
            settle(*s);
          }
          break;
        case kGoAway:
          ended = true;
          break;
        case kData:
        default:
          break;
      }
      in.erase(0, 9 + length);
    }
    return reply.empty() || WriteAll(fd, reply);
  };

  // The preface, then the server's SETTINGS acknowledged before any stream,
  // as a well-behaved client does: the server's bounds (streams per
  // connection) apply from the first stream on.
  std::string out = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  out += FrameHeader(0, kSettings, 0, 0);
  if (!WriteAll(fd, out)) ended = true;
  while (!stop_.load() && !ended && !got_settings) {
    if (!read_frames()) ended = true;
  }
  out.clear();
  std::string authority = options_.host + ":" + std::to_string(options_.port);
  for (size_t i = 0; i < streams.size() && !ended; ++i) {
    Stream& s = streams[i];
    s.remaining = total;
    std::string block;
    AppendLiteralHeader(&block, ":method", "POST");
    AppendLiteralHeader(&block, ":scheme", "http");
    AppendLiteralHeader(&block, ":path", options_.path);
    AppendLiteralHeader(&block, ":authority", authority);
    AppendLiteralHeader(&block, "content-type", "application/grpc");
    AppendLiteralHeader(&block, "te", "trailers");
    if (!options_.authorization.empty()) AppendLiteralHeader(&block, "authorization", options_.authorization);
    out += FrameHeader(static_cast<uint32_t>(block.size()), kHeaders, kFlagEndHeaders, s.id);
    out += block;
  }
  if (!ended) {
    if (!WriteAll(fd, out)) ended = true;
    counters_.streams_opened += static_cast<int64_t>(streams.size());
  }

  while (!stop_.load() && !ended) {
    // Send what the windows allow.
    std::string data;
    for (Stream& s : streams) {
      while (!s.dead && s.remaining > 0 && s.window > 0 && connection_window > 0) {
        const int64_t chunk = std::min({s.remaining, s.window, connection_window, max_frame});
        data += FrameHeader(static_cast<uint32_t>(chunk), kData, 0, s.id);
        std::string payload(static_cast<size_t>(chunk), '\0');
        // The gRPC prefix: not compressed, then the declared length.
        for (int64_t i = 0; i < chunk; ++i) {
          const int64_t pos = s.offset + i;
          if (pos >= 1 && pos <= 4) {
            payload[i] = static_cast<char>((options_.declared_message_bytes >> (8 * (4 - pos))) & 0xff);
          }
        }
        data += payload;
        s.offset += chunk;
        s.remaining -= chunk;
        s.window -= chunk;
        connection_window -= chunk;
        counters_.bytes_sent += chunk;
        if (s.remaining == 0) {
          ++counters_.streams_loaded;
          settle(s);
        }
      }
    }
    if (!data.empty() && !WriteAll(fd, data)) break;
    if (!read_frames()) break;
  }
  if (!stop_.load()) {
    ++counters_.connections_ended;
    --counters_.connections_open;
    for (Stream& s : streams) settle(s);
  }
  close(fd);
}

}  // namespace weir::testing
