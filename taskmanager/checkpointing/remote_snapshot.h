// Task snapshots in an object store (state.checkpoints.dir or a savepoint
// at s3://bucket/prefix). The asynchronous part writes the snapshot exactly
// as into a local checkpoint directory, but into a staging directory on the
// TaskManager's disk with the same layout (<job>/chk-<n>/..., <job>/shared/
// for the new files of an incremental snapshot), then uploads what it
// staged and removes it. RocksDB's files are staged as hard links to the
// snapshot's own links, not copied (io::DurableBatch(false)); those still
// appended to (the log, MANIFEST) are uploaded up to the snapshot's size. The acknowledgement goes out only after every
// upload completed, so an upload cut off half-way is never referenced.
// A restore downloads the files the task's handles name into a local
// directory of the same layout and reads them from there. RocksDB's
// instances and local recovery copies never leave local disk.
//
// Thread-safety: free functions without shared state; each call works in
// directories of its own (the TaskManager's uploader thread calls the
// upload, a task thread the download).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "weir/v1/job.pb.h"

namespace weir::taskmanager {

// The checkpoint directory a snapshot of `checkpoint_id` by task `task_id`
// is staged in below `root` (the TaskManager's local state directory):
// <root>/upload/<task>-c<n>/job/chk-<n>. Nothing is created.
std::string StagingCheckpointDir(const std::string& root, const std::string& task_id, int64_t checkpoint_id);

// Uploads what was staged in `staged_dir` (a chk-<n> directory of
// StagingCheckpointDir, and the shared directory beside it) to
// `remote_dir` (the checkpoint's URI) and the shared directory beside that.
// Up to four uploads run at once, the largest first, on the calling thread
// and helpers that live only for the call. The task's snapshot file goes
// with the others, not after them: nothing refers to it before the task
// acknowledges, which it does only once every upload succeeded (an upload
// that failed leaves a checkpoint that never completes, whatever else of it
// arrived). A file in `prefixes` (the staged path: io::DurableBatch's
// linked_prefixes, links to files still appended to) is uploaded up to the
// bytes named there. Returns the bytes uploaded; on an error, the first.
absl::StatusOr<int64_t> UploadStagedSnapshot(const std::string& staged_dir, const std::string& remote_dir,
                                             const std::map<std::string, int64_t>& prefixes = {});

// Removes the staging tree of StagingCheckpointDir (the <task>-c<n>
// directory); quiet when there is none.
void RemoveStaging(const std::string& staged_dir);

// For a task restoring from an object store: downloads every file its
// restore_sources name (the snapshot files, the keyed state files they list,
// the shared files) into <root>/restore/<task>-a<attempt>/job/chk-<n>, and
// returns that directory, to read the state from in place of
// tdd.restore_checkpoint_dir(). RemoveStaging removes it.
absl::StatusOr<std::string> DownloadRestoreFiles(const v1::TaskDeploymentDescriptor& tdd, const std::string& root);

}  // namespace weir::taskmanager
