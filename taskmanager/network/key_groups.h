// Key groups: how a key maps to the subtask that owns it.
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
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "absl/strings/string_view.h"

namespace weir::taskmanager::network {

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

}  // namespace weir::taskmanager::network
