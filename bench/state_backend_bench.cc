// state_backend_bench: the cost of keyed state per record, in one process,
// for the rocksdb backend beside the hashmap backend (the baseline), and
// the synchronous and asynchronous parts of a snapshot of each.
//
//   build/bin/state_backend_bench [--records N] [--keys K] [--snapshot-every M]
//
// Each record does what keyed_count does: read a ValueState<int64_t> of its
// key, add one, write it back. Keys are "key-<i % K>" in a shuffled order.
// Prints records/s of both backends, their ratio, and per snapshot the
// synchronous (task thread) and asynchronous (copy) time. Then the rocksdb
// state's last snapshot is restored into a new instance twice: from the
// checkpoint directory, and from its local recovery copy
// (state.backend.local-recovery), side by side.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bench/bench_flags.h"
#include "common/state/key_groups.h"
#include "taskmanager/state/in_memory_keyed_state.h"
#include "taskmanager/state/rocksdb_keyed_state.h"
#include "weir/state.h"

namespace {

using Clock = std::chrono::steady_clock;
using weir::taskmanager::KeyedStateBackend;

struct Result {
  double records_per_s = 0;
  double sync_ms = 0, async_ms = 0;  // means over the snapshots
  int snapshots = 0;
};

Result Run(KeyedStateBackend& backend, const std::vector<std::string>& keys, int64_t records, int64_t snapshot_every,
           const std::string& checkpoint_dir) {
  Result result;
  double sync_total = 0, async_total = 0, processing = 0;
  auto start = Clock::now();
  for (int64_t i = 0; i < records; ++i) {
    backend.SetCurrentKey(keys[static_cast<size_t>(i) % keys.size()]);
    weir::ValueState<int64_t> count(&backend, "count");
    count.Set(count.Get().value_or(0) + 1);
    if (snapshot_every > 0 && (i + 1) % snapshot_every == 0) {
      processing += std::chrono::duration<double>(Clock::now() - start).count();
      const auto t0 = Clock::now();
      auto snapshot = backend.Snapshot(result.snapshots + 1);
      const auto t1 = Clock::now();
      if (!snapshot.ok()) {
        std::fprintf(stderr, "snapshot failed: %s\n", std::string(snapshot.status().message()).c_str());
        std::exit(1);
      }
      weir::v1::OperatorSnapshotProto proto;
      const std::string dir = absl::StrCat(checkpoint_dir, "/chk-", result.snapshots + 1);
      std::filesystem::create_directories(dir);
      if (auto s = (*snapshot)->Write(dir, "v1-s0", &proto); !s.ok()) {
        std::fprintf(stderr, "writing failed: %s\n", std::string(s.message()).c_str());
        std::exit(1);
      }
      const auto t2 = Clock::now();
      std::filesystem::remove_all(dir);
      sync_total += std::chrono::duration<double, std::milli>(t1 - t0).count();
      async_total += std::chrono::duration<double, std::milli>(t2 - t1).count();
      ++result.snapshots;
      start = Clock::now();
    }
  }
  processing += std::chrono::duration<double>(Clock::now() - start).count();
  result.records_per_s = static_cast<double>(records) / processing;
  if (result.snapshots > 0) {
    result.sync_ms = sync_total / result.snapshots;
    result.async_ms = async_total / result.snapshots;
  }
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t records = 2000000, keys_count = 500000, snapshot_every = 500000;
  weir::bench::BenchFlags parser("state_backend_bench");
  parser.Int("--records", &records, 0);
  parser.Int("--keys", &keys_count, 0);
  parser.Int("--snapshot-every", &snapshot_every, 0);
  if (!parser.Parse(argc, argv)) return 2;
  std::vector<std::string> keys;
  for (int64_t i = 0; i < keys_count; ++i) keys.push_back(absl::StrCat("key-", i));
  std::shuffle(keys.begin(), keys.end(), std::mt19937(42));
  const std::string root = absl::StrCat(std::filesystem::temp_directory_path().string(), "/weir-state-bench-", getpid());
  std::filesystem::remove_all(root);
  const weir::state::KeyGroupRange all{0, weir::state::kDefaultMaxParallelism};

  weir::taskmanager::InMemoryKeyedState heap(all, weir::state::kDefaultMaxParallelism);
  const Result h = Run(heap, keys, records, snapshot_every, root + "/checkpoints");
  weir::taskmanager::RocksDbStateOptions options;
  options.instance_dir = root + "/instance";
  options.local_recovery_dir = root + "/local-recovery";
  auto rocks = weir::taskmanager::RocksDbKeyedState::Open(all, weir::state::kDefaultMaxParallelism, options);
  if (!rocks.ok()) {
    std::fprintf(stderr, "%s\n", std::string(rocks.status().message()).c_str());
    return 1;
  }
  const Result r = Run(**rocks, keys, records, snapshot_every, root + "/checkpoints");
  // The same without the write-ahead log (a job without checkpoints): what
  // the log costs, and the snapshot that must flush on the task thread.
  Result unlogged;
  {
    weir::taskmanager::RocksDbStateOptions o;
    o.instance_dir = root + "/unlogged";
    o.write_ahead_log = false;
    auto plain = weir::taskmanager::RocksDbKeyedState::Open(all, weir::state::kDefaultMaxParallelism, o);
    if (!plain.ok()) {
      std::fprintf(stderr, "%s\n", std::string(plain.status().message()).c_str());
      return 1;
    }
    unlogged = Run(**plain, keys, records, snapshot_every, root + "/unlogged-checkpoints");
  }

  // The last snapshot, restored from the checkpoint directory and from the
  // local copy.
  const int64_t last = r.snapshots + 1;
  weir::taskmanager::KeyedStateRestore part;
  part.checkpoint_dir = absl::StrCat(root, "/checkpoints/chk-", last);
  std::filesystem::create_directories(part.checkpoint_dir);
  auto snapshot = (*rocks)->Snapshot(last);
  if (!snapshot.ok() || !(*snapshot)->Write(part.checkpoint_dir, "v1-s0", &part.snapshot).ok()) {
    std::fprintf(stderr, "the last snapshot failed\n");
    return 1;
  }
  snapshot->reset();
  rocks->reset();
  int64_t state_bytes = 0;
  for (const auto& file : part.snapshot.keyed_files().files()) state_bytes += file.size_bytes();
  auto timed_restore = [&](const std::string& instance, bool local) {
    weir::taskmanager::RocksDbStateOptions o;
    o.instance_dir = root + "/" + instance;
    if (local) o.local_recovery_dir = options.local_recovery_dir;
    auto restored = weir::taskmanager::RocksDbKeyedState::Open(all, weir::state::kDefaultMaxParallelism, o);
    const auto t0 = Clock::now();
    if (!restored.ok() || !(*restored)->Restore({part}).ok()) {
      std::fprintf(stderr, "restore failed\n");
      std::exit(1);
    }
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  const double remote_ms = timed_restore("restored-remote", false);
  const double local_ms = timed_restore("restored-local", true);
  std::filesystem::remove_all(root);

  std::printf("state backend benchmark: %lld read-modify-writes over %lld keys, a snapshot every %lld\n",
              static_cast<long long>(records), static_cast<long long>(keys_count),
              static_cast<long long>(snapshot_every));
  std::printf("  hashmap (baseline): %10.0f records/s; snapshot sync %.1f ms, async %.1f ms (%d snapshots)\n",
              h.records_per_s, h.sync_ms, h.async_ms, h.snapshots);
  std::printf("  rocksdb:            %10.0f records/s; snapshot sync %.1f ms, async %.1f ms\n", r.records_per_s,
              r.sync_ms, r.async_ms);
  std::printf("  ratio rocksdb/hashmap: %.3f\n", r.records_per_s / h.records_per_s);
  std::printf("  rocksdb without the log (no checkpoints): %10.0f records/s (ratio with/without %.3f); a snapshot "
              "then flushes on the task thread: sync %.1f ms, async %.1f ms\n",
              unlogged.records_per_s, r.records_per_s / unlogged.records_per_s, unlogged.sync_ms, unlogged.async_ms);
  std::printf("  rocksdb restore of the last snapshot (%lld bytes): from the checkpoint directory %.1f ms, from the "
              "local recovery copy %.1f ms; ratio local/directory %.3f (both on this machine's disk)\n",
              static_cast<long long>(state_bytes), remote_ms, local_ms, local_ms / remote_ms);
  return 0;
}
