// Key groups: the unit in which keyed state is partitioned, and how a key
// maps to the subtask that owns it.
//
// A key hashes to one of `max_parallelism` key groups; a vertex running with
// parallelism p gives each subtask a contiguous range of key groups. Hash
// partitioning (RecordWriter) and the keyed state backend use the same two
// functions, so a record always reaches the subtask that holds its key's
// state, and state can be redistributed by key group when p changes.
//
// The hash is part of the persistent format: checkpoints store state by key
// group, so changing it (or max_parallelism) makes old checkpoints unusable.
//
// Both daemons use them: TaskManagers to route records and address state,
// the JobManager to hand key-group ranges to subtasks when state is restored
// at another parallelism.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace weir::state {

inline constexpr int kDefaultMaxParallelism = 128;

// 64-bit FNV-1a of `bytes`, then the MurmurHash3 fmix64 finalizer so that
// every input bit affects the low bits. Stable across processes, builds and
// platforms.
uint64_t StableHash64(absl::string_view bytes);

// The key group of a serialized key: in [0, max_parallelism).
int KeyGroupForKey(absl::string_view key_bytes, int max_parallelism = kDefaultMaxParallelism);

// The subtask (in [0, parallelism)) owning `key_group`:
// key_group * parallelism / max_parallelism. Requires
// 1 <= parallelism <= max_parallelism and 0 <= key_group < max_parallelism.
int SubtaskForKeyGroup(int key_group, int max_parallelism, int parallelism);

// The key groups [start, end) of one subtask.
struct KeyGroupRange {
  int start = 0;
  int end = 0;  // exclusive

  bool Contains(int key_group) const { return key_group >= start && key_group < end; }
  int size() const { return end - start; }
  bool operator==(const KeyGroupRange&) const = default;
  std::string DebugString() const;  // "[start, end)"
};

// The key groups that subtask `subtask` of `parallelism` owns: exactly those
// for which SubtaskForKeyGroup gives `subtask`. Same requirements as
// SubtaskForKeyGroup, and 0 <= subtask < parallelism.
KeyGroupRange KeyGroupRangeForSubtask(int max_parallelism, int parallelism, int subtask);

}  // namespace weir::state
