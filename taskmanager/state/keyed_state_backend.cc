#include "taskmanager/state/keyed_state_backend.h"

#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace weir::taskmanager {
namespace {

// The backend's snapshot, and the pending entries beside it.
class WithPendingEntries final : public KeyedStateSnapshot {
 public:
  WithPendingEntries(std::unique_ptr<KeyedStateSnapshot> state, std::string pending)
      : state_(std::move(state)), pending_(std::move(pending)) {}
  absl::Status WriteInto(const std::string& checkpoint_dir, const std::string& base_name,
                         v1::OperatorSnapshotProto* out, io::DurableBatch* batch) override {
    RETURN_IF_ERROR(state_->WriteInto(checkpoint_dir, base_name, out, batch));
    out->set_pending_entries(std::move(pending_));
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<KeyedStateSnapshot> state_;
  std::string pending_;
};

}  // namespace

absl::Status KeyedStateSnapshot::Write(const std::string& checkpoint_dir, const std::string& base_name,
                                       v1::OperatorSnapshotProto* out) {
  io::DurableBatch batch;
  RETURN_IF_ERROR(WriteInto(checkpoint_dir, base_name, out, &batch));
  return batch.Sync();
}

absl::StatusOr<std::unique_ptr<KeyedStateSnapshot>> KeyedStateBackend::Snapshot(int64_t checkpoint_id) {
  // Taken whatever the snapshot does (an exception included): a failed
  // snapshot's entries are still the caches', and their next SnapshotState
  // hands them over again.
  std::string pending = pending_.Take();
  absl::StatusOr<std::unique_ptr<KeyedStateSnapshot>> state = TakeSnapshot(checkpoint_id);
  if (!state.ok() || pending.empty()) return state;
  return std::make_unique<WithPendingEntries>(std::move(*state), std::move(pending));
}

absl::Status KeyedStateBackend::Restore(const std::vector<KeyedStateRestore>& parts) {
  RETURN_IF_ERROR(RestoreState(parts));
  for (const KeyedStateRestore& part : parts) {
    const std::string& pending = part.snapshot.pending_entries();
    if (pending.empty()) continue;
    absl::Status status;
    try {
      StartWriteBatch();
      status = PendingEntries::ForEach(
          pending, [&](std::string_view key, std::string_view state_name, std::string_view user_key,
                       const std::string_view* value) {
            const int group = state::KeyGroupForKey(absl::string_view(key.data(), key.size()), max_parallelism());
            if (!range().Contains(group)) return;  // another subtask's share
            SetCurrentKey(key);
            if (value == nullptr) {
              RemoveEntry(state_name, user_key);
            } else {
              PutEntry(state_name, user_key, *value);
            }
          });
      CommitWriteBatch();
    } catch (const std::exception& e) {
      status = absl::InternalError(e.what());
    }
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat("restoring the pending entries of the snapshot in ",
                                                      part.checkpoint_dir, ": ", status.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace weir::taskmanager
