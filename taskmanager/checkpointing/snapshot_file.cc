#include "taskmanager/checkpointing/snapshot_file.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/crypto/sha256.h"
#include "common/io/atomic_file.h"
#include "common/io/durable_batch.h"
#include "common/status_macros.h"

namespace weir::taskmanager {
namespace {

constexpr char kMagic[] = "WEIRTASK";
constexpr size_t kMagicSize = 8;
// 2: operators may carry pending keyed-state entries (pending_entries),
// which a reader of version 1 would drop without a word — so it refuses
// the file. Files of version 1, written before, still read.
constexpr uint32_t kFormatVersion = 2;
constexpr uint32_t kOldestReadableVersion = 1;
constexpr size_t kHeaderSize = kMagicSize + 4;

}  // namespace

std::string TaskSnapshotFileName(const v1::TaskDeploymentDescriptor& tdd) {
  return absl::StrCat("v", tdd.vertex_ids_size() > 0 ? tdd.vertex_ids(0) : -1, "-s", tdd.subtask_index(),
                      ".snapshot");
}

absl::StatusOr<std::string> EncodeTaskSnapshot(const v1::TaskDeploymentDescriptor& tdd, const ChainSnapshot& snapshot,
                                               const std::string& checkpoint_dir, StateFilesSummary* files,
                                               io::DurableBatch* batch) {
  io::DurableBatch own;
  io::DurableBatch* writes = batch != nullptr ? batch : &own;
  StateFilesSummary ignored;
  StateFilesSummary* stats = files != nullptr ? files : &ignored;
  v1::TaskSnapshotProto proto;
  proto.set_job_id(tdd.job_id());
  proto.set_checkpoint_id(snapshot.checkpoint_id);
  proto.set_input_ended(snapshot.input_ended);
  proto.set_subtask_index(tdd.subtask_index());
  proto.set_parallelism(tdd.parallelism());
  for (size_t i = 0; i < snapshot.operators.size(); ++i) {
    const OperatorSnapshot& op = snapshot.operators[i];
    v1::OperatorSnapshotProto* out = proto.add_operators();
    const int vertex = i < static_cast<size_t>(tdd.vertex_ids_size()) ? tdd.vertex_ids(static_cast<int>(i)) : -1;
    out->set_vertex_id(vertex);
    if (i < static_cast<size_t>(tdd.operator_uids_size())) out->set_uid(tdd.operator_uids(static_cast<int>(i)));
    for (const auto& [name, list] : op.operator_state) {
      v1::ListStateSnapshotProto* l = out->add_list_states();
      l->set_name(name);
      l->set_is_union(list.is_union);
      for (const std::string& entry : list.entries) l->add_entries(entry);
    }
    if (op.keyed != nullptr) {
      RETURN_IF_ERROR(
          Annotate(op.keyed->WriteInto(checkpoint_dir, absl::StrCat("v", vertex, "-s", tdd.subtask_index()), out, writes),
                   absl::StrCat("writing the keyed state of vertex ", vertex)));
      for (const v1::StateFileProto& f : out->keyed_files().files()) {
        if (!f.shared_name().empty()) stats->shared.push_back(f.shared_name());
        (f.reused() ? stats->reused_bytes : stats->written_bytes) += f.size_bytes();
      }
    }
  }
  std::string file(kMagic, kMagicSize);
  for (int i = 0; i < 4; ++i) file.push_back(static_cast<char>((kFormatVersion >> (8 * i)) & 0xff));
  proto.AppendToString(&file);
  if (batch == nullptr) RETURN_IF_ERROR(own.Sync());
  return file;
}

absl::StatusOr<v1::TaskStateHandle> WriteTaskSnapshot(const std::string& checkpoint_dir,
                                                      const v1::TaskDeploymentDescriptor& tdd,
                                                      const std::string& encoded, const StateFilesSummary& files,
                                                      io::DurableBatch* batch) {
  const std::string name = TaskSnapshotFileName(tdd);
  io::DurableBatch own;
  io::DurableBatch* writes = batch != nullptr ? batch : &own;
  RETURN_IF_ERROR(writes->WriteAtomically(absl::StrCat(checkpoint_dir, "/", name), encoded));
  RETURN_IF_ERROR(writes->Sync());
  v1::TaskStateHandle handle;
  handle.set_file(name);
  handle.set_size_bytes(static_cast<int64_t>(encoded.size()));
  handle.set_sha256(crypto::Sha256Hex(encoded));
  *handle.mutable_vertex_ids() = tdd.vertex_ids();
  *handle.mutable_operator_uids() = tdd.operator_uids();
  handle.set_subtask_index(tdd.subtask_index());
  handle.set_parallelism(tdd.parallelism());
  handle.set_state_files_bytes(files.written_bytes);
  handle.set_state_files_reused_bytes(files.reused_bytes);
  for (const std::string& name : files.shared) handle.add_shared_files(name);
  return handle;
}

absl::StatusOr<ChainSnapshot> ReadTaskSnapshot(const std::string& checkpoint_dir, const v1::TaskStateHandle& handle) {
  if (handle.file().empty() || handle.file().find('/') != std::string::npos || handle.file()[0] == '.') {
    return absl::InvalidArgumentError(absl::StrCat("state handle names the file '", handle.file(),
                                                   "', which is not a snapshot file name"));
  }
  const std::string path = absl::StrCat(checkpoint_dir, "/", handle.file());
  auto corrupt = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat("task snapshot ", path, " is unusable: ", why));
  };
  ASSIGN_OR_RETURN(std::string bytes, io::ReadWholeFile(path));
  if (static_cast<int64_t>(bytes.size()) != handle.size_bytes()) {
    return corrupt(absl::StrCat("it has ", bytes.size(), " bytes, the checkpoint recorded ", handle.size_bytes()));
  }
  if (crypto::Sha256Hex(bytes) != handle.sha256()) return corrupt("its SHA-256 differs from the one the checkpoint recorded");
  if (bytes.size() < kHeaderSize || std::memcmp(bytes.data(), kMagic, kMagicSize) != 0) {
    return corrupt("it does not start with WEIRTASK");
  }
  uint32_t version = 0;
  for (int i = 0; i < 4; ++i) version |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[kMagicSize + i])) << (8 * i);
  if (version < kOldestReadableVersion || version > kFormatVersion) {
    return corrupt(absl::StrCat("format version ", version, " is not one this Weir reads (", kOldestReadableVersion,
                                " to ", kFormatVersion, "); a newer Weir wrote it"));
  }
  v1::TaskSnapshotProto proto;
  if (!proto.ParseFromArray(bytes.data() + kHeaderSize, static_cast<int>(bytes.size() - kHeaderSize))) {
    return corrupt("its contents do not parse");
  }
  if (proto.operators_size() != handle.operator_uids_size()) {
    return corrupt(absl::StrCat("it holds ", proto.operators_size(), " operators, its handle names ",
                                handle.operator_uids_size()));
  }
  ChainSnapshot snapshot;
  snapshot.checkpoint_id = proto.checkpoint_id();
  snapshot.input_ended = proto.input_ended();
  for (int i = 0; i < proto.operators_size(); ++i) {
    const v1::OperatorSnapshotProto& op = proto.operators(i);
    if (op.uid() != handle.operator_uids(i)) {
      return corrupt(absl::StrCat("its operator ", i, " is '", op.uid(), "', its handle says '",
                                  handle.operator_uids(i), "'"));
    }
    OperatorSnapshot& out = snapshot.operators.emplace_back();
    out.uid = op.uid();
    for (const v1::ListStateSnapshotProto& l : op.list_states()) {
      ListStateSnapshot& list = out.operator_state[l.name()];
      list.is_union = l.is_union();
      list.entries.assign(l.entries().begin(), l.entries().end());
    }
    KeyedStateRestore& keyed = out.keyed_restore.emplace_back();
    keyed.checkpoint_dir = checkpoint_dir;
    keyed.snapshot.mutable_key_groups()->CopyFrom(op.key_groups());
    if (op.has_keyed_files()) *keyed.snapshot.mutable_keyed_files() = op.keyed_files();
    keyed.snapshot.set_pending_entries(op.pending_entries());
  }
  return snapshot;
}

ChainSnapshot RescaleChainSnapshot(std::vector<ChainSnapshot> old_subtasks, int subtask, int parallelism) {
  ChainSnapshot out;
  if (old_subtasks.empty()) return out;
  out.checkpoint_id = old_subtasks.front().checkpoint_id;
  // EndInput is skipped at restore only when every old subtask ran it; one
  // that did not has records left to end (an operator that emits at its
  // end may then emit for the others' share again: docs/exactly-once.md).
  out.input_ended = true;
  for (const ChainSnapshot& old : old_subtasks) out.input_ended = out.input_ended && old.input_ended;
  const size_t operators = old_subtasks.front().operators.size();
  for (size_t i = 0; i < operators; ++i) {
    OperatorSnapshot& op = out.operators.emplace_back();
    op.uid = old_subtasks.front().operators[i].uid;
    std::vector<OperatorStateSnapshot> lists;
    for (ChainSnapshot& old : old_subtasks) {
      if (i >= old.operators.size()) continue;
      lists.push_back(std::move(old.operators[i].operator_state));
      for (KeyedStateRestore& part : old.operators[i].keyed_restore) op.keyed_restore.push_back(std::move(part));
    }
    std::vector<OperatorStateSnapshot> shares = RedistributeOperatorState(lists, parallelism);
    op.operator_state = std::move(shares.at(subtask));
  }
  return out;
}

absl::StatusOr<std::optional<ChainSnapshot>> ReadRestoredState(const v1::TaskDeploymentDescriptor& tdd) {
  if (tdd.restore_sources_size() == 0) return std::optional<ChainSnapshot>();
  ChainSnapshot chain;
  chain.checkpoint_id = tdd.restore_checkpoint_id();
  chain.operators.resize(tdd.operator_uids_size());
  for (OperatorSnapshot& op : chain.operators) op.present = false;
  bool input_ended = true;
  for (const v1::RestoreSource& source : tdd.restore_sources()) {
    std::vector<ChainSnapshot> old_subtasks;
    for (const v1::TaskStateHandle& handle : source.handles()) {
      ASSIGN_OR_RETURN(ChainSnapshot old, ReadTaskSnapshot(tdd.restore_checkpoint_dir(), handle));
      old_subtasks.push_back(std::move(old));
    }
    if (old_subtasks.empty()) continue;
    ChainSnapshot part = old_subtasks.size() == 1
                             ? std::move(old_subtasks.front())
                             : RescaleChainSnapshot(std::move(old_subtasks), tdd.subtask_index(), tdd.parallelism());
    input_ended = input_ended && part.input_ended;
    for (OperatorSnapshot& op : part.operators) {
      for (int i = 0; i < tdd.operator_uids_size(); ++i) {
        if (tdd.operator_uids(i) != op.uid) continue;
        chain.operators[i] = std::move(op);
        chain.operators[i].present = true;
        break;
      }
    }
  }
  // EndInput is skipped only when every part was taken after it.
  chain.input_ended = input_ended;
  return std::optional<ChainSnapshot>(std::move(chain));
}

}  // namespace weir::taskmanager
