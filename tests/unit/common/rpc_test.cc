// What counts as loopback decides whether a daemon may listen without a
// token: only literal loopback addresses and "localhost" do. A channel
// keeps waiting for a peer that is slow to take its connection. And what a
// peer can make a server hold: nothing without the token, a bounded number
// of streams per connection with it.
#include "common/rpc/rpc.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "absl/time/clock.h"
#include "common/rpc/auth.h"
#include "gtest/gtest.h"
#include "tests/testing/hostile_http2_client.h"
#include "weir/v1/cluster.grpc.pb.h"
#include "weir/v1/data.grpc.pb.h"

namespace weir::rpc {
namespace {

TEST(IsLoopbackHostTest, OnlyLoopbackLiteralsAndLocalhost) {
  for (const char* host : {"localhost", "127.0.0.1", "127.1.2.3", "::1", "[::1]"}) {
    EXPECT_TRUE(IsLoopbackHost(host)) << host;
  }
  for (const char* host : {"127.example.com", "0.0.0.0", "::", "10.0.0.1", "128.0.0.1", "example.com", "",
                           "[::2]", "127.0.0.1.nip.io"}) {
    EXPECT_FALSE(IsLoopbackHost(host)) << host;
  }
}

// A TCP relay on a free loopback port to `target_port` that holds every
// connection for `hold` before relaying it: a peer too busy to answer the
// HTTP/2 handshake at once.
class SlowRelay {
 public:
  SlowRelay(int target_port, absl::Duration hold) : target_port_(target_port), hold_(hold) {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    if (bind(listener_, reinterpret_cast<sockaddr*>(&address), length) != 0 || listen(listener_, 16) != 0 ||
        getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      ADD_FAILURE() << "cannot listen for the relay";
      return;
    }
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { Run(); });
  }
  ~SlowRelay() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    close(listener_);
  }
  int port() const { return port_; }

 private:
  void Run() {
    std::vector<std::thread> relays;
    while (!stop_) {
      pollfd ready{listener_, POLLIN, 0};
      if (poll(&ready, 1, 50) <= 0) continue;
      const int client = accept(listener_, nullptr, nullptr);
      if (client < 0) continue;
      relays.emplace_back([this, client] { Relay(client); });
    }
    for (std::thread& t : relays) t.join();
  }

  void Relay(int client) {
    absl::SleepFor(hold_);
    const int server = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<uint16_t>(target_port_));
    if (connect(server, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) {
      pollfd fds[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
      char bytes[16384];
      while (!stop_) {
        if (poll(fds, 2, 50) <= 0) continue;
        bool open = true;
        for (int i = 0; i < 2 && open; ++i) {
          if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
          const ssize_t n = read(fds[i].fd, bytes, sizeof(bytes));
          // MSG_NOSIGNAL: a peer gone at teardown must not raise SIGPIPE.
          open = n > 0 && send(fds[1 - i].fd, bytes, static_cast<size_t>(n), MSG_NOSIGNAL) == n;
        }
        if (!open) break;
      }
    }
    close(server);
    close(client);
  }

  const int target_port_;
  const absl::Duration hold_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(CreateChannelTest, WaitsForAPeerThatIsSlowToTakeTheConnection) {
  // Any service will do: the test only connects.
  v1::DataExchangeService::Service service;
  absl::StatusOr<StartedServer> server = StartServer({.services = {&service}});
  ASSERT_TRUE(server.ok()) << server.status();
  SlowRelay relay(server->port, absl::Milliseconds(600));
  ASSERT_GT(relay.port(), 0);
  std::shared_ptr<grpc::Channel> channel = CreateChannel(JoinHostPort("127.0.0.1", relay.port()));
  // The first call opens the connection, which takes 600 ms. The call must
  // reach the server (which does not implement it), not fail UNAVAILABLE
  // because gRPC abandoned the connection attempt and failed the calls
  // waiting for it.
  auto stub = v1::DataExchangeService::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  auto stream = stub->Subscribe(&context);
  stream->WritesDone();
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED) << status.error_message();
  server->server->Shutdown();
}

// Sets the process's token for one test and clears it after.
class WithToken {
 public:
  explicit WithToken(std::string token) { SetAuthToken(std::move(token)); }
  ~WithToken() { SetAuthToken(""); }
};

// The server's handler is never reached: gRPC would otherwise hold each
// stream's message until it is complete.
testing::HostileHttp2Options Flood(int port, std::string authorization) {
  return {.port = port,
          .path = "/weir.v1.TaskExecutorService/DeployTask",
          .connections = 1,
          .streams_per_connection = 64,
          .declared_message_bytes = 1 << 20,
          .authorization = std::move(authorization)};
}

TEST(StartServerTest, ACallWithoutTheTokenIsRefusedBeforeItsMessage) {
  WithToken token("s3cret");
  v1::TaskExecutorService::Service service;
  absl::StatusOr<StartedServer> server = StartServer({.services = {&service}});
  ASSERT_TRUE(server.ok()) << server.status();
  testing::HostileHttp2Client client(Flood(server->port, ""));
  client.Start();
  ASSERT_TRUE(client.WaitUntilSettled(absl::Seconds(30)));
  const testing::HostileHttp2Stats stats = client.stats();
  // Every stream is refused (UNAUTHENTICATED) on its headers. What the
  // peer could send before the refusal reached it is dropped; it is a
  // fraction of the 64 MiB the messages declare (a few may have been sent
  // whole in the meantime).
  EXPECT_EQ(stats.streams_answered + stats.streams_reset, 64);
  EXPECT_LT(stats.streams_loaded, 16);
  EXPECT_LT(stats.bytes_sent, 16 << 20);
  client.Stop();

  // With the token the same streams get their messages' worth of window:
  // the check above is the token's, not a bound on messages.
  testing::HostileHttp2Client member(Flood(server->port, "Bearer s3cret"));
  member.Start();
  ASSERT_TRUE(member.WaitUntilSettled(absl::Seconds(30)));
  EXPECT_EQ(member.stats().streams_loaded, 64);
  member.Stop();
  server->server->Shutdown();
}

TEST(StartServerTest, StreamsBeyondTheBoundPerConnectionAreRefused) {
  v1::TaskExecutorService::Service service;
  absl::StatusOr<StartedServer> server = StartServer({.services = {&service}, .max_concurrent_streams = 16});
  ASSERT_TRUE(server.ok()) << server.status();
  testing::HostileHttp2Client client(Flood(server->port, ""));
  client.Start();
  ASSERT_TRUE(client.WaitUntilSettled(absl::Seconds(30)));
  // A peer that opens more than the bound (after acknowledging it) loses
  // its connection, and with it every stream it held.
  const testing::HostileHttp2Stats stats = client.stats();
  EXPECT_EQ(stats.connections_ended, 1);
  EXPECT_LE(stats.streams_loaded, 16);
  client.Stop();
  server->server->Shutdown();
}

}  // namespace
}  // namespace weir::rpc
