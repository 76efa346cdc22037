#include "taskmanager/slot_table.h"

namespace weir::taskmanager {

SlotTable::SlotTable(int num_slots) : num_slots_(num_slots), slots_(num_slots) {}

v1::SlotReport SlotTable::Report() const {
  absl::MutexLock lock(&mu_);
  v1::SlotReport report;
  int free = 0;
  for (int i = 0; i < num_slots_; ++i) {
    v1::SlotStatus* status = report.add_slots();
    status->set_index(i);
    status->set_job_id(slots_[i].job_id);
    status->set_allocation_id(slots_[i].allocation_id);
    if (slots_[i].allocation_id.empty()) ++free;
  }
  report.set_slots_total(num_slots_);
  report.set_slots_free(free);
  return report;
}

void SlotTable::SetOccupancy(const std::vector<std::string>& jobs) {
  absl::MutexLock lock(&mu_);
  for (int i = 0; i < num_slots_ && i < static_cast<int>(jobs.size()); ++i) {
    slots_[i].job_id = jobs[i];
    slots_[i].allocation_id = jobs[i];
  }
}

}  // namespace weir::taskmanager
