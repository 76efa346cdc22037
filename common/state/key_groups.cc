#include "common/state/key_groups.h"

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace weir::state {

uint64_t StableHash64(absl::string_view bytes) {
  constexpr uint64_t kFnvOffsetBasis = 0xcbf29ce484222325ULL;
  constexpr uint64_t kFnvPrime = 0x100000001b3ULL;
  uint64_t h = kFnvOffsetBasis;
  for (char c : bytes) {
    h ^= static_cast<uint8_t>(c);
    h *= kFnvPrime;
  }
  // MurmurHash3 fmix64.
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}

int KeyGroupForKey(absl::string_view key_bytes, int max_parallelism) {
  WEIR_CHECK(max_parallelism >= 1, absl::StrCat("max parallelism must be >= 1, got ", max_parallelism));
  return static_cast<int>(StableHash64(key_bytes) % static_cast<uint64_t>(max_parallelism));
}

int SubtaskForKeyGroup(int key_group, int max_parallelism, int parallelism) {
  WEIR_CHECK(parallelism >= 1 && parallelism <= max_parallelism,
             absl::StrCat("parallelism ", parallelism, " must be in [1, max parallelism ", max_parallelism, "]"));
  WEIR_CHECK(key_group >= 0 && key_group < max_parallelism,
             absl::StrCat("key group ", key_group, " out of range [0, ", max_parallelism, ")"));
  return static_cast<int>(static_cast<int64_t>(key_group) * parallelism / max_parallelism);
}

std::string KeyGroupRange::DebugString() const { return absl::StrCat("[", start, ", ", end, ")"); }

KeyGroupRange KeyGroupRangeForSubtask(int max_parallelism, int parallelism, int subtask) {
  WEIR_CHECK(parallelism >= 1 && parallelism <= max_parallelism,
             absl::StrCat("parallelism ", parallelism, " must be in [1, max parallelism ", max_parallelism, "]"));
  WEIR_CHECK(subtask >= 0 && subtask < parallelism,
             absl::StrCat("subtask ", subtask, " out of range [0, ", parallelism, ")"));
  // Key group g belongs to floor(g * p / m); the first g with that >= i is
  // ceil(i * m / p).
  auto first = [&](int64_t i) {
    return static_cast<int>((i * max_parallelism + parallelism - 1) / parallelism);
  };
  return KeyGroupRange{first(subtask), first(subtask + 1)};
}

}  // namespace weir::state
