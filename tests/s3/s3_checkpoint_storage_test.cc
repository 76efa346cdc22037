// The JobManager's checkpoint and savepoint stores on a real S3-compatible
// server (S3Proxy, CTest fixture "s3"): state.checkpoints.dir and
// state.savepoints.dir given as s3://bucket/prefix.
#include <cstdlib>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/config/configuration.h"
#include "common/fs/file_system_registry.h"
#include "common/fs/s3/s3_file_system.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/s3/s3_test_server.h"
#include "jobmanager/checkpoint/checkpoint_storage.h"
#include "jobmanager/checkpoint/savepoint.h"

namespace weir::jobmanager::checkpoint {
namespace {

using ::testing::HasSubstr;

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return std::string(absl::StripAsciiWhitespace(text));
}

class S3CheckpointStorageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* dir = std::getenv("WEIR_TEST_S3_DIR");
    ASSERT_NE(dir, nullptr) << "WEIR_TEST_S3_DIR is not set; run through ctest (fixture s3)";
    dir_ = dir;
    endpoint_ = ReadText(absl::StrCat(dir_, "/address"));
    Configure("weir-test-secret-key");
    bucket_ = absl::StrFormat("ckpt-%08x", std::random_device()());
    fs::S3Options options = *fs::ResolveS3Options(&config_, fs::ProcessEnvironment());
    auto bucket = fs::S3FileSystem::Open(absl::StrCat("s3://", bucket_), options);
    ASSERT_TRUE(bucket.ok()) << bucket.status();
    bucket_fs_ = std::move(*bucket);
    ASSERT_TRUE(bucket_fs_->CreateBucket().ok());
  }

  void TearDown() override {
    Configure("weir-test-secret-key");
    if (bucket_fs_ == nullptr) return;
    EXPECT_TRUE(testing::EmptyS3TestBucket(*bucket_fs_).ok());
  }

  void Configure(const std::string& secret) {
    absl::StatusOr<config::Configuration> config = config::Configuration::Load(
        std::nullopt, {absl::StrCat("s3.endpoint=", endpoint_), "s3.path.style.access=true",
                       "s3.access-key=weir-test-access-key", absl::StrCat("s3.secret-key=", secret)});
    ASSERT_TRUE(config.ok()) << config.status();
    config_ = *config;
    fs::ConfigureFileSystems(config_);
  }

  std::string JobDir() const { return absl::StrCat("s3://", bucket_, "/checkpoints/job-1"); }

  // A complete checkpoint `id` with one task file and the shared files named.
  void WriteCheckpoint(CheckpointStorage& storage, int64_t id, const std::vector<std::string>& shared) {
    ASSERT_TRUE(storage.CreateCheckpointDir(id).ok());
    const std::string chk = absl::StrCat("checkpoints/job-1/chk-", id);
    ASSERT_TRUE(bucket_fs_->Write(absl::StrCat(chk, "/v1-s0.snapshot"), "task", fs::WriteMode::kOverwrite).ok());
    for (const std::string& name : shared) {
      ASSERT_TRUE(bucket_fs_->Write(absl::StrCat("checkpoints/job-1/shared/", name), "sst", fs::WriteMode::kOverwrite)
                      .ok());
    }
    ASSERT_TRUE(storage.WriteMetadata(Metadata(id, shared)).ok());
  }

  static v1::CheckpointMetadata Metadata(int64_t id, const std::vector<std::string>& shared) {
    v1::CheckpointMetadata m;
    m.set_checkpoint_id(id);
    v1::TaskStateHandle* task = m.add_tasks();
    task->set_file("v1-s0.snapshot");
    task->set_size_bytes(4);
    for (const std::string& name : shared) task->add_shared_files(name);
    return m;
  }

  std::string dir_, endpoint_, bucket_;
  config::Configuration config_;
  std::unique_ptr<fs::S3FileSystem> bucket_fs_;
};

TEST_F(S3CheckpointStorageTest, MetadataIsCreatedOnceAndReadsBack) {
  absl::StatusOr<CheckpointStorage> storage = CheckpointStorage::Open(JobDir());
  ASSERT_TRUE(storage.ok()) << storage.status();
  EXPECT_TRUE(storage->remote());
  WriteCheckpoint(*storage, 1, {});
  absl::StatusOr<v1::CheckpointMetadata> read = storage->ReadMetadata(1);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->checkpoint_id(), 1);
  EXPECT_TRUE(storage->VerifyTaskFiles(*read).ok());

  // The same id again, with other contents: refused, the first one stays.
  v1::CheckpointMetadata other = Metadata(1, {});
  other.set_max_parallelism(77);
  absl::Status again = storage->WriteMetadata(other);
  EXPECT_TRUE(absl::IsAlreadyExists(again)) << again;
  EXPECT_EQ(storage->ReadMetadata(1)->max_parallelism(), 0);
  EXPECT_TRUE(absl::IsAlreadyExists(storage->CreateCheckpointDir(1)));

  // A checkpoint without _metadata is incomplete; one whose task file is
  // gone does not verify; the latest valid is chosen past both.
  ASSERT_TRUE(storage->CreateCheckpointDir(2).ok());
  ASSERT_TRUE(bucket_fs_->Write("checkpoints/job-1/chk-2/v1-s0.snapshot", "half", fs::WriteMode::kOverwrite).ok());
  WriteCheckpoint(*storage, 3, {});
  ASSERT_TRUE(bucket_fs_->Delete("checkpoints/job-1/chk-3/v1-s0.snapshot").ok());
  EXPECT_THAT(storage->ListCheckpointIds(), ::testing::ElementsAre(1, 2, 3));
  EXPECT_TRUE(absl::IsNotFound(storage->ReadMetadata(2).status()));
  std::vector<std::string> skipped;
  absl::StatusOr<std::optional<v1::CheckpointMetadata>> latest = storage->LatestValid(&skipped);
  ASSERT_TRUE(latest.ok()) << latest.status();
  ASSERT_TRUE(latest->has_value());
  EXPECT_EQ((*latest)->checkpoint_id(), 1);
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_THAT(skipped[0], HasSubstr("is missing"));

  ASSERT_TRUE(storage->Discard(3).ok());
  EXPECT_THAT(storage->ListCheckpointIds(), ::testing::ElementsAre(1, 2));
  ASSERT_TRUE(storage->DiscardAll().ok());
  EXPECT_TRUE(bucket_fs_->List("checkpoints/")->empty());
}

// Verification lists the checkpoint's files and the shared files at once:
// a shared file or a task file that is missing, or a task file of another
// size, keeps the checkpoint from completing.
TEST_F(S3CheckpointStorageTest, VerificationFindsAMissingSharedFileAndAShortTaskFile) {
  absl::StatusOr<CheckpointStorage> storage = CheckpointStorage::Open(JobDir());
  ASSERT_TRUE(storage.ok()) << storage.status();
  ASSERT_TRUE(storage->CreateCheckpointDir(1).ok());
  ASSERT_TRUE(bucket_fs_->Write("checkpoints/job-1/chk-1/v1-s0.snapshot", "task", fs::WriteMode::kOverwrite).ok());
  ASSERT_TRUE(bucket_fs_->Write("checkpoints/job-1/shared/c1-a-1.sst", "sst", fs::WriteMode::kOverwrite).ok());
  EXPECT_TRUE(storage->VerifyTaskFiles(Metadata(1, {"c1-a-1.sst"})).ok());

  absl::Status missing = storage->VerifyTaskFiles(Metadata(1, {"c1-a-1.sst", "c1-a-2.sst"}));
  EXPECT_TRUE(absl::IsDataLoss(missing)) << missing;
  EXPECT_THAT(missing.message(), HasSubstr("shared state file"));
  EXPECT_THAT(missing.message(), HasSubstr("c1-a-2.sst is missing"));

  ASSERT_TRUE(bucket_fs_->Write("checkpoints/job-1/chk-1/v1-s0.snapshot", "tas", fs::WriteMode::kOverwrite).ok());
  absl::Status short_file = storage->VerifyTaskFiles(Metadata(1, {"c1-a-1.sst"}));
  EXPECT_TRUE(absl::IsDataLoss(short_file)) << short_file;
  EXPECT_THAT(short_file.message(), HasSubstr("has 3 bytes; the checkpoint recorded 4"));
}

// Shared files go by reference and by the id in their names, never by time:
// a file of a checkpoint still uploading stays although nothing refers to it.
TEST_F(S3CheckpointStorageTest, SharedFilesAreCollectedByReference) {
  absl::StatusOr<CheckpointStorage> storage = CheckpointStorage::Open(JobDir());
  ASSERT_TRUE(storage.ok()) << storage.status();
  WriteCheckpoint(*storage, 1, {"c1-a-000010.sst", "c1-a-000011.sst"});
  WriteCheckpoint(*storage, 2, {"c1-a-000011.sst", "c2-a-000012.sst"});
  ASSERT_TRUE(storage->Discard(1).ok());
  // Checkpoint 3 is uploading (no _metadata yet); "legacy" has no id.
  for (const char* name : {"c3-a-000013.sst", "legacy-000009.sst"}) {
    ASSERT_TRUE(bucket_fs_->Write(absl::StrCat("checkpoints/job-1/shared/", name), "sst", fs::WriteMode::kOverwrite).ok());
  }
  // The modification time is not looked at: a cutoff in the future deletes
  // nothing more.
  absl::StatusOr<int> collected = storage->CollectSharedGarbage(absl::InfiniteFuture(), /*below_checkpoint_id=*/3);
  ASSERT_TRUE(collected.ok()) << collected.status();
  EXPECT_EQ(*collected, 1);
  std::vector<std::string> left;
  absl::StatusOr<std::vector<fs::FileInfo>> listed = bucket_fs_->List("checkpoints/job-1/shared/");
  ASSERT_TRUE(listed.ok()) << listed.status();
  for (const fs::FileInfo& f : *listed) left.push_back(f.path);
  EXPECT_THAT(left, ::testing::ElementsAre("checkpoints/job-1/shared/c1-a-000011.sst",
                                           "checkpoints/job-1/shared/c2-a-000012.sst",
                                           "checkpoints/job-1/shared/c3-a-000013.sst",
                                           "checkpoints/job-1/shared/legacy-000009.sst"));
  // Once checkpoint 3 is no longer in progress, its unreferenced upload goes.
  EXPECT_EQ(*storage->CollectSharedGarbage(absl::InfiniteFuture(), 4), 1);
}

TEST_F(S3CheckpointStorageTest, SavepointIsCopiedWholeAndRestores) {
  absl::StatusOr<CheckpointStorage> storage = CheckpointStorage::Open(JobDir());
  ASSERT_TRUE(storage.ok()) << storage.status();
  WriteCheckpoint(*storage, 4, {"c4-a-000010.sst"});
  const std::string target = absl::StrCat("s3://", bucket_, "/savepoints");
  absl::StatusOr<std::string> path = WriteSavepoint(*storage, 4, target, "job-1");
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_THAT(*path, HasSubstr(absl::StrCat(target, "/savepoint-job-1-")));
  // Self-contained: the job's checkpoints can go.
  ASSERT_TRUE(storage->DiscardAll().ok());
  EXPECT_TRUE(RestorePathExists(*path));
  absl::StatusOr<RestorePoint> point = ReadRestorePoint(*path);
  ASSERT_TRUE(point.ok()) << point.status();
  EXPECT_TRUE(point->is_savepoint);
  EXPECT_EQ(point->metadata.checkpoint_id(), 4);
  EXPECT_EQ(point->checkpoint_dir, absl::StrCat(*path, "/chk-4"));
  // Paths a client sends stay inside the root.
  EXPECT_TRUE(PathInside(target, "savepoint-x", "state.savepoints.dir").ok());
  EXPECT_FALSE(PathInside(target, "../checkpoints", "state.savepoints.dir").ok());
  EXPECT_FALSE(PathInside(target, "/etc", "state.savepoints.dir").ok());
  EXPECT_FALSE(PathInside(target, absl::StrCat("s3://", bucket_, "/other"), "state.savepoints.dir").ok());
}

TEST_F(S3CheckpointStorageTest, AMissingBucketOrWrongKeysAreRefusedAtOpenNamingTheBucketAndStatus) {
  absl::StatusOr<CheckpointStorage> missing = CheckpointStorage::Open("s3://no-such-bucket-weir/checkpoints/job-1");
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(missing.status())) << missing.status();
  EXPECT_THAT(missing.status().message(), HasSubstr("no-such-bucket-weir"));
  EXPECT_THAT(missing.status().message(), HasSubstr("HTTP 404"));
  EXPECT_THAT(missing.status().message(), HasSubstr("state.checkpoints.dir"));

  Configure("a-wrong-secret-key");
  absl::StatusOr<CheckpointStorage> refused = CheckpointStorage::Open(JobDir());
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(refused.status())) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr(bucket_));
  EXPECT_THAT(refused.status().message(), HasSubstr("HTTP 403"));
}

}  // namespace
}  // namespace weir::jobmanager::checkpoint
