// A RocksDB snapshot uploaded to a real S3-compatible server (S3Proxy, CTest
// fixture "s3") the way a TaskManager does it: staged as hard links, not
// copies (io::DurableBatch(false)), then uploaded. What it checks is what a
// link could get wrong: the instance's own names going away (a compaction)
// before the upload, and the write-ahead log growing after the snapshot.
// The upload must still hold exactly the snapshot's state, which a new
// instance restores from what it downloads.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/config/configuration.h"
#include "common/fs/file_system_registry.h"
#include "common/fs/s3/s3_file_system.h"
#include "common/io/durable_batch.h"
#include "gtest/gtest.h"
#include "tests/s3/s3_test_server.h"
#include "taskmanager/checkpointing/remote_snapshot.h"
#include "taskmanager/state/rocksdb_keyed_state.h"

namespace weir::taskmanager {
namespace {

namespace stdfs = std::filesystem;

constexpr int kMaxParallelism = 128;
constexpr int kKeysInFiles = 2000;   // flushed into SST files before the snapshot
constexpr int kKeysInLog = 1000;     // only in the write-ahead log at the snapshot
constexpr int kKeysAfter = 3000;     // written after the snapshot: must not come back

class S3SnapshotUploadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<testing::S3TestBucket> bucket = testing::CreateS3TestBucket("upload");
    ASSERT_TRUE(bucket.ok()) << bucket.status();
    bucket_ = bucket->name;
    bucket_fs_ = std::move(bucket->fs);
    root_ = stdfs::temp_directory_path() / absl::StrFormat("weir-s3-upload-%08x", std::random_device()());
    stdfs::create_directories(root_);
  }

  void TearDown() override {
    std::error_code ec;
    stdfs::remove_all(root_, ec);
    if (bucket_fs_ == nullptr) return;
    EXPECT_TRUE(testing::EmptyS3TestBucket(*bucket_fs_).ok());
  }

  std::unique_ptr<RocksDbKeyedState> OpenBackend(const std::string& name) {
    RocksDbStateOptions options;
    options.instance_dir = (root_ / name).string();
    options.incremental = true;
    absl::StatusOr<std::unique_ptr<RocksDbKeyedState>> backend =
        RocksDbKeyedState::Open(state::KeyGroupRange{0, kMaxParallelism}, kMaxParallelism, options);
    EXPECT_TRUE(backend.ok()) << backend.status();
    return backend.ok() ? std::move(*backend) : nullptr;
  }

  static void PutKeys(RocksDbKeyedState& backend, int from, int to, const std::string& value) {
    for (int i = from; i < to; ++i) {
      backend.SetCurrentKey(absl::StrCat("key-", i));
      backend.Put("count", absl::StrCat(value, "-", i));
    }
  }

  std::string bucket_;
  std::unique_ptr<fs::S3FileSystem> bucket_fs_;
  stdfs::path root_;
};

TEST_F(S3SnapshotUploadTest, LinkedFilesUploadTheSnapshotAfterACompactionAndMoreLogWrites) {
  std::unique_ptr<RocksDbKeyedState> backend = OpenBackend("instance");
  ASSERT_NE(backend, nullptr);
  PutKeys(*backend, 0, kKeysInFiles, "v1");
  backend->FlushForTesting();
  PutKeys(*backend, kKeysInFiles, kKeysInFiles + kKeysInLog, "v1");
  absl::StatusOr<std::unique_ptr<KeyedStateSnapshot>> snapshot = backend->Snapshot(1);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();

  // Writes after the snapshot, to be left out of it.
  PutKeys(*backend, 0, kKeysAfter, "v2");

  const std::string staged = StagingCheckpointDir((root_ / "staging").string(), "t", 1);
  stdfs::create_directories(staged);
  io::DurableBatch batch(/*durable=*/false);
  v1::OperatorSnapshotProto op;
  ASSERT_TRUE((*snapshot)->WriteInto(staged, "v1-s0", &op, &batch).ok());
  ASSERT_TRUE(batch.Sync().ok());
  EXPECT_EQ(batch.fsyncs(), 0);
  ASSERT_FALSE(batch.linked_prefixes().empty()) << "the write-ahead log was not staged as a link";
  // More writes between staging and upload. RocksDB may have moved on to a
  // new log by now (the snapshot asks for a flush), so the log is also
  // appended to through its link, as RocksDB would: none of it belongs to
  // the snapshot, and a restore that replayed it would fail.
  PutKeys(*backend, kKeysAfter, 2 * kKeysAfter, "v2");
  for (const auto& [path, bytes] : batch.linked_prefixes()) {
    std::ofstream(path, std::ios::app | std::ios::binary) << std::string(4096, '\x5a');
    EXPECT_GT(static_cast<int64_t>(stdfs::file_size(path)), bytes) << path;
  }

  // Then the instance's own names of its SST files go, as a compaction
  // removes them: the staged links are the files' last names.
  const stdfs::path db = root_ / "instance" / "db";
  int removed = 0;
  for (const stdfs::directory_entry& entry : stdfs::directory_iterator(db)) {
    if (entry.path().extension() == ".sst") removed += stdfs::remove(entry.path()) ? 1 : 0;
  }
  ASSERT_GT(removed, 0) << "the flush wrote no SST file to stand in for a compacted one";
  int staged_tables = 0;
  for (const stdfs::directory_entry& entry : stdfs::recursive_directory_iterator(root_ / "staging")) {
    if (entry.path().extension() != ".sst") continue;
    ++staged_tables;
    EXPECT_EQ(stdfs::hard_link_count(entry.path()), 1u) << entry.path();
  }
  EXPECT_GT(staged_tables, 0);

  const std::string remote = absl::StrCat("s3://", bucket_, "/checkpoints/job/chk-1");
  absl::StatusOr<int64_t> uploaded = UploadStagedSnapshot(staged, remote, batch.linked_prefixes());
  ASSERT_TRUE(uploaded.ok()) << uploaded.status();
  snapshot->reset();
  backend.reset();
  RemoveStaging(staged);

  // Every object has the size the snapshot recorded for it.
  const v1::KeyedStateFilesProto& files = op.keyed_files();
  const std::string restored = (root_ / "restore" / "job" / "chk-1").string();
  int64_t listed_bytes = 0;
  for (const v1::StateFileProto& file : files.files()) {
    const std::string object =
        file.shared_name().empty() ? absl::StrCat("checkpoints/job/chk-1/", files.directory(), "/", file.name())
                                   : absl::StrCat("checkpoints/job/shared/", file.shared_name());
    absl::StatusOr<fs::FileInfo> info = bucket_fs_->Stat(object);
    ASSERT_TRUE(info.ok()) << object << ": " << info.status();
    EXPECT_EQ(info->size, file.size_bytes()) << object;
    listed_bytes += file.size_bytes();
    const std::string local = file.shared_name().empty()
                                  ? absl::StrCat(restored, "/", files.directory(), "/", file.name())
                                  : (root_ / "restore" / "job" / "shared" / file.shared_name()).string();
    stdfs::create_directories(stdfs::path(local).parent_path());
    absl::StatusOr<int64_t> got = bucket_fs_->DownloadFile(object, local);
    ASSERT_TRUE(got.ok()) << object << ": " << got.status();
  }
  EXPECT_EQ(*uploaded, listed_bytes);

  // A new instance restores exactly the snapshot's state from the download.
  std::unique_ptr<RocksDbKeyedState> again = OpenBackend("again");
  ASSERT_NE(again, nullptr);
  ASSERT_TRUE(again->Restore({KeyedStateRestore{op, restored}}).ok());
  for (int i = 0; i < kKeysAfter; ++i) {
    again->SetCurrentKey(absl::StrCat("key-", i));
    std::optional<std::string> value = again->Get("count");
    if (i < kKeysInFiles + kKeysInLog) {
      ASSERT_EQ(value, absl::StrCat("v1-", i)) << "key-" << i;
    } else {
      ASSERT_EQ(value, std::nullopt) << "key-" << i << " was written after the snapshot";
    }
  }
}

}  // namespace
}  // namespace weir::taskmanager
