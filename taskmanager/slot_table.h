// SlotTable: the task slots of one TaskManager and what occupies them.
//
// Thread-safety: thread-safe.
#pragma once

#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "weir/v1/cluster.pb.h"

namespace weir::taskmanager {

class SlotTable {
 public:
  explicit SlotTable(int num_slots);

  int size() const { return num_slots_; }

  // The current state of every slot, as sent with heartbeats.
  v1::SlotReport Report() const ABSL_LOCKS_EXCLUDED(mu_);

  // Sets which job occupies each slot ("" = free); `jobs` has size() entries.
  void SetOccupancy(const std::vector<std::string>& jobs) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Slot {
    std::string job_id;
    std::string allocation_id;
  };

  const int num_slots_;
  mutable absl::Mutex mu_;
  std::vector<Slot> slots_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weir::taskmanager
