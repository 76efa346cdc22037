// A process that holds a seat in an etcd leader election, for the tests that
// freeze (SIGSTOP) or kill (SIGKILL) a leader:
//
//   election_child ENDPOINT CLUSTER_ID ADDRESS [--idle]
//
// Prints one line per event on stdout, flushed: "granted EPOCH", "revoked",
// and, while it leads, one fenced write of the store key "probe" every 50 ms:
// "put ok EPOCH N" or "put refused EPOCH N: <error>" (none with --idle, to
// measure what an idle election costs etcd). Runs until killed.
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/etcd/etcd_client.h"
#include "jobmanager/ha/etcd_leader_election.h"

namespace {

using weir::jobmanager::ha::Epoch;

class Listener : public weir::jobmanager::ha::LeadershipListener {
 public:
  void Granted(Epoch epoch) override {
    std::printf("granted %lld\n", static_cast<long long>(epoch));
    std::fflush(stdout);
    epoch_.store(epoch);
  }
  void Revoked() override {
    epoch_.store(0);
    std::printf("revoked\n");
    std::fflush(stdout);
  }
  Epoch epoch() const { return epoch_.load(); }

 private:
  std::atomic<Epoch> epoch_{0};
};

}  // namespace

int main(int argc, char** argv) {
  const bool idle = argc == 5 && std::string(argv[4]) == "--idle";
  if (argc != 4 && !idle) {
    std::fprintf(stderr, "usage: %s ENDPOINT CLUSTER_ID ADDRESS [--idle]\n", argv[0]);
    return 2;
  }
  weir::etcd::EtcdClientOptions client_options;
  client_options.endpoints = {argv[1]};
  auto client = weir::etcd::EtcdClient::Create(client_options);
  if (!client.ok()) {
    std::fprintf(stderr, "%s\n", client.status().ToString().c_str());
    return 1;
  }
  weir::jobmanager::ha::EtcdLeaderElectionOptions options;
  options.cluster_id = argv[2];
  options.address = argv[3];
  auto election = weir::jobmanager::ha::EtcdLeaderElection::Create(std::move(*client), options);
  if (!election.ok()) {
    std::fprintf(stderr, "%s\n", election.status().ToString().c_str());
    return 1;
  }
  Listener listener;
  if (absl::Status started = (*election)->Start(&listener); !started.ok()) {
    std::fprintf(stderr, "%s\n", started.ToString().c_str());
    return 1;
  }
  for (long n = 0;; ++n) {
    absl::SleepFor(absl::Milliseconds(50));
    Epoch epoch = listener.epoch();
    if (epoch == 0 || idle) continue;
    absl::Status put = (*election)->FencedPut(epoch, "probe", absl::StrCat(argv[3], " ", n));
    if (put.ok()) {
      std::printf("put ok %lld %ld\n", static_cast<long long>(epoch), n);
    } else {
      std::printf("put refused %lld %ld: %s\n", static_cast<long long>(epoch), n, put.ToString().c_str());
    }
    std::fflush(stdout);
  }
}
