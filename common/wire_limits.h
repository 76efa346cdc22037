// Bounds on every count and size that arrives over the wire.
//
// gRPC caps a message's bytes, not what is inside: a registration may claim
// 2^31 slots, a submission 10^6 vertices. Handlers check what they receive
// against these bounds before they act on it (allocate, loop, store), so that
// one malformed or hostile message is an error for its sender and nothing
// else. The bounds are far above any real cluster and job.
//
// Thread-safety: constants and pure functions.
#ifndef WEIR_COMMON_WIRE_LIMITS_H_
#define WEIR_COMMON_WIRE_LIMITS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace weir::limits {

// Ids: TaskManager resource ids, job ids, task ids, partition ids.
inline constexpr size_t kMaxIdLength = 256;
// host:port of a daemon, a host name.
inline constexpr size_t kMaxAddressLength = 512;
// Names and labels: job, vertex and connector names, versions.
inline constexpr size_t kMaxNameLength = 1024;
// Slots one TaskManager may offer (taskmanager.numberOfTaskSlots' bound).
inline constexpr int64_t kMaxSlotsPerTaskManager = 1024;
// A job graph.
inline constexpr int kMaxVertices = 1024;
inline constexpr int kMaxEdges = 4096;
// Parallel tasks of one job (every chain's parallelism summed).
inline constexpr int kMaxTasksPerJob = 16384;
// Properties of one vertex, and their sizes (values hold inline PEM keys).
inline constexpr int kMaxPropertiesPerVertex = 256;
inline constexpr size_t kMaxPropertyKeyLength = 256;
inline constexpr size_t kMaxPropertyValueLength = 64 * 1024;
// A submission's job arguments and -D settings.
inline constexpr int kMaxJobArgs = 1024;
inline constexpr size_t kMaxJobArgLength = 64 * 1024;
inline constexpr int kMaxJobConfigEntries = 1024;
// Error text a task reports; longer text is cut, not refused.
inline constexpr size_t kMaxErrorLength = 16 * 1024;

// kInvalidArgument "<field> is N bytes long; at most M are allowed" when
// `value` is longer than `max`.
inline absl::Status CheckLength(absl::string_view field, absl::string_view value, size_t max) {
  if (value.size() <= max) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, " is ", value.size(), " bytes long; at most ", max, " are allowed"));
}

// kInvalidArgument "<count> <what>; at most M are allowed" when count > max.
inline absl::Status CheckCount(absl::string_view what, int64_t count, int64_t max) {
  if (count <= max) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(count, " ", what, "; at most ", max, " are allowed"));
}

}  // namespace weir::limits

#endif  // WEIR_COMMON_WIRE_LIMITS_H_
