// LeaderElection: which of several JobManagers of one cluster leads, the
// epoch (fencing token) of each leadership, and the job-store writes that
// succeed only while their writer still leads. See
// docs/design/jobmanager-leadership.md, step 6.
//
// Epochs rise with every new leader across the whole cluster: a write made
// for epoch e is refused once a leader of a later epoch exists, also when the
// writer does not yet know it has lost (frozen, cut off from the service).
//
// Threading: Start and Stop are called by the election's owner, one at a
// time. The listener's Granted and Revoked run on a thread of the election,
// one at a time, alternating and starting with Granted; none runs after Stop
// returned (Stop delivers the last Revoked when it ends a leadership). The
// other methods may be called from any thread, the listener's among them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace weir::jobmanager::ha {

// A leadership's fencing token: rises with every leader of a cluster.
using Epoch = int64_t;

class LeadershipListener {
 public:
  virtual ~LeadershipListener() = default;
  // This process leads from now on, for `epoch`.
  virtual void Granted(Epoch epoch) = 0;
  // This process no longer leads (or may no longer: the lease could not be
  // renewed in time). Nothing may be triggered, committed or written for the
  // revoked epoch after this; its fenced writes fail from now on or soon.
  virtual void Revoked() = 0;
};

struct LeaderInfo {
  std::string address;  // what the leader gave as its address
  Epoch epoch = 0;
};

class LeaderElection {
 public:
  virtual ~LeaderElection() = default;

  // Joins the election; `listener` must outlive Stop. Errors only for what no
  // retry can fix (bad settings); an unreachable service is retried in the
  // background.
  virtual absl::Status Start(LeadershipListener* listener) = 0;
  // Leaves the election: a leader gives up at once (Revoked, then the service
  // is told so that a standby takes over without waiting for a timeout).
  virtual void Stop() = 0;

  // Until when this process surely still leads: the time its own lease
  // check would step it down (InfinitePast while it does not lead). Threads
  // that act for the leadership check it before they act, so that a process
  // resumed after a freeze acts on nothing before the election's thread has
  // revoked it.
  virtual absl::Time LeadingUntil() const = 0;

  // The current leader, as the coordination service knows it now; nullopt
  // when none leads.
  virtual absl::StatusOr<std::optional<LeaderInfo>> GetLeader() = 0;

  // Job-store writes under `key` (relative to the cluster's store), applied
  // only while `epoch` is the current leadership's. A write for any other
  // epoch fails with kAborted, and nothing is written. The writer names the
  // epoch it acts for rather than "whatever this process holds now", so a
  // write prepared under an epoch that ended is refused even when the same
  // process leads again.
  virtual absl::Status FencedPut(Epoch epoch, absl::string_view key, absl::string_view value) = 0;
  virtual absl::Status FencedDelete(Epoch epoch, absl::string_view key) = 0;
  // A store read (not fenced); nullopt when `key` is not set.
  virtual absl::StatusOr<std::optional<std::string>> Get(absl::string_view key) = 0;
  // Every store key that starts with `prefix`, with its value, sorted by key
  // (keys as written, relative to the store). Not fenced. kResourceExhausted
  // when more than `max_keys` match, so that a store grown past what its
  // reader expects cannot exhaust its memory.
  virtual absl::StatusOr<std::vector<std::pair<std::string, std::string>>> GetPrefix(absl::string_view prefix,
                                                                                     size_t max_keys) = 0;
};

}  // namespace weir::jobmanager::ha
