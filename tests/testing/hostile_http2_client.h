// HostileHttp2Client: a misbehaving gRPC peer for tests and measurements.
// It writes HTTP/2 frames by hand over plain TCP (no TLS): the connection
// preface, SETTINGS, then on each connection `streams_per_connection` gRPC
// calls (HEADERS with HPACK literals: POST, the method's path,
// content-type application/grpc, te trailers, and an "authorization"
// header only when one is given), each followed by DATA holding a gRPC
// length prefix that declares `declared_message_bytes` and one byte fewer
// of body, sent as fast as the server's flow-control windows allow. No
// stream is ever finished: each holds an almost complete message in the
// server until the server resets it or the client stops.
//
// It answers SETTINGS and PING as a well-behaved peer would, so that the
// server keeps the connection, and counts what the server did to each
// stream: reset (RST_STREAM), answered (HEADERS back, i.e. the call was
// refused or ended with a status), connection ended (GOAWAY or EOF).
//
// Thread-safety: Start, Stop and the destructor from one thread; stats()
// from any thread. One thread per connection runs the frames.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"

namespace weir::testing {

struct HostileHttp2Options {
  std::string host = "127.0.0.1";
  int port = 0;
  // The gRPC method, e.g. "/weir.v1.TaskExecutorService/DeployTask".
  std::string path;
  int connections = 1;
  int streams_per_connection = 256;
  // What each stream's length prefix declares; the body sent is one byte short.
  int64_t declared_message_bytes = 4 << 20;
  // Sent as the "authorization" header when not empty.
  std::string authorization;
};

// What the server did, summed over every connection.
struct HostileHttp2Stats {
  int64_t connections_open = 0;      // connected and not ended by the server
  int64_t connections_refused = 0;   // connect() failed
  int64_t connections_ended = 0;     // GOAWAY or EOF from the server
  int64_t streams_opened = 0;        // HEADERS sent
  int64_t streams_loaded = 0;        // every byte but the last sent
  int64_t streams_reset = 0;         // RST_STREAM from the server
  int64_t streams_answered = 0;      // HEADERS from the server (status or trailers)
  int64_t bytes_sent = 0;            // DATA payload bytes
  // Streams that are loaded, reset, answered or on an ended connection
  // (each counted once, at the first of these).
  int64_t streams_settled = 0;

  // Every stream has settled: the server has done all it will do with this
  // attack.
  bool Settled(const HostileHttp2Options& options) const;
};

class HostileHttp2Client {
 public:
  explicit HostileHttp2Client(HostileHttp2Options options) : options_(std::move(options)) {}
  ~HostileHttp2Client();  // Stop()

  HostileHttp2Client(const HostileHttp2Client&) = delete;
  HostileHttp2Client& operator=(const HostileHttp2Client&) = delete;

  // Connects and opens the streams on background threads; returns at once.
  void Start();
  // Closes every connection (which frees what the server held for them).
  void Stop();

  HostileHttp2Stats stats() const;
  const HostileHttp2Options& options() const { return options_; }

  // Waits until stats().Settled() or `timeout` passes; returns whether it settled.
  bool WaitUntilSettled(absl::Duration timeout) const;

 private:
  void RunConnection();

  struct Counters {
    std::atomic<int64_t> connections_open{0};
    std::atomic<int64_t> connections_refused{0};
    std::atomic<int64_t> connections_ended{0};
    std::atomic<int64_t> streams_opened{0};
    std::atomic<int64_t> streams_loaded{0};
    std::atomic<int64_t> streams_reset{0};
    std::atomic<int64_t> streams_answered{0};
    std::atomic<int64_t> streams_settled{0};
    std::atomic<int64_t> bytes_sent{0};
  };

  const HostileHttp2Options options_;
  std::atomic<bool> stop_{false};
  Counters counters_;
  std::vector<std::thread> threads_;
};

}  // namespace weir::testing
