// Job binaries in an object store: the JobManager's ArtifactStore on
// high-availability.storageDir = s3://bucket/prefix against a real
// S3-compatible server (S3Proxy, CTest fixture "s3"), served over the
// ArtifactService to a TaskManager's JobArtifacts.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/config/configuration.h"
#include "common/crypto/sha256.h"
#include "common/fs/file_system_registry.h"
#include "common/fs/s3/s3_file_system.h"
#include "common/rpc/rpc.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/s3/s3_test_server.h"
#include "jobmanager/artifact_store.h"
#include "jobmanager/job_services.h"
#include "taskmanager/job_artifacts.h"

namespace weir::jobmanager {
namespace {

using ::testing::HasSubstr;

class S3ArtifactStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<testing::S3TestBucket> bucket = testing::CreateS3TestBucket("artifacts");
    ASSERT_TRUE(bucket.ok()) << bucket.status();
    bucket_ = bucket->name;
    bucket_fs_ = std::move(bucket->fs);
    local_ = std::filesystem::path(::testing::TempDir()) / absl::StrFormat("s3-artifacts-%d", getpid());
    std::filesystem::remove_all(local_);
    std::filesystem::create_directories(local_);
  }

  void TearDown() override {
    std::filesystem::remove_all(local_);
    if (bucket_fs_ == nullptr) return;
    EXPECT_TRUE(testing::EmptyS3TestBucket(*bucket_fs_).ok());
  }

  // A JobManager's store on the bucket, with its own staging directory.
  std::unique_ptr<ArtifactStore> OpenStore(const std::string& name, int64_t quota = 0) {
    auto store = ArtifactStore::Open(absl::StrCat("s3://", bucket_, "/ha"), 64 << 20, quota,
                                     (local_ / name / "staging").string());
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(*store) : nullptr;
  }

  static absl::StatusOr<std::string> Upload(ArtifactStore& store, const std::string& bytes) {
    absl::StatusOr<std::unique_ptr<ArtifactStore::Upload>> upload = store.BeginUpload();
    if (!upload.ok()) return upload.status();
    for (size_t offset = 0; offset < bytes.size(); offset += 1 << 20) {
      if (absl::Status s = (*upload)->Append(absl::string_view(bytes).substr(offset, 1 << 20)); !s.ok()) return s;
    }
    return (*upload)->Commit(crypto::Sha256Hex(bytes));
  }

  std::string bucket_;
  std::unique_ptr<fs::S3FileSystem> bucket_fs_;
  std::filesystem::path local_;
};

// Stored in the bucket under its hash, once however often it is uploaded,
// with nothing left in the staging directory; another JobManager's store on
// the same bucket (a standby, no directory shared) serves it to a
// TaskManager in ranges, and the TaskManager keeps exactly those bytes.
TEST_F(S3ArtifactStoreTest, StoresInTheBucketAndAnyJobManagerServesIt) {
  std::string bytes(5 << 20, '\0');
  std::mt19937 random(7);
  for (char& c : bytes) c = static_cast<char>(random());
  const std::string sha = crypto::Sha256Hex(bytes);
  std::unique_ptr<ArtifactStore> leader = OpenStore("leader");
  ASSERT_NE(leader, nullptr);
  absl::StatusOr<std::string> stored = Upload(*leader, bytes);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(*stored, sha);
  absl::StatusOr<std::string> again = Upload(*leader, bytes);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(leader->stored_bytes(), static_cast<int64_t>(bytes.size()));
  absl::StatusOr<std::vector<fs::FileInfo>> objects = bucket_fs_->List("");
  ASSERT_TRUE(objects.ok()) << objects.status();
  ASSERT_EQ(objects->size(), 1u);
  EXPECT_EQ((*objects)[0].path, absl::StrCat("ha/artifacts/sha256/", sha));
  EXPECT_EQ((*objects)[0].size, static_cast<int64_t>(bytes.size()));
  EXPECT_TRUE(std::filesystem::is_empty(local_ / "leader" / "staging"));
  // What clients send waits there: private to the JobManager's user.
  EXPECT_EQ(std::filesystem::status(local_ / "leader" / "staging").permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_all);

  std::unique_ptr<ArtifactStore> standby = OpenStore("standby");
  ASSERT_NE(standby, nullptr);
  EXPECT_EQ(standby->stored_bytes(), static_cast<int64_t>(bytes.size()));
  ArtifactServiceImpl service(standby.get(), /*gate=*/nullptr);
  rpc::ServerOptions options;
  options.services = {&service};
  absl::StatusOr<rpc::StartedServer> server = rpc::StartServer(options);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = absl::StrCat("127.0.0.1:", server->port);
  taskmanager::JobArtifacts artifacts(
      (local_ / "taskmanager").string(),
      [&] { return taskmanager::ArtifactServer{address, v1::ArtifactService::NewStub(rpc::CreateChannel(address))}; },
      64 << 20, absl::Seconds(30));
  // Not a shared library: the load fails after the download.
  absl::Status loaded = artifacts.Acquire("job-1", sha, {}, "", nullptr).status();
  EXPECT_THAT(std::string(loaded.message()), ::testing::Not(HasSubstr("downloading"))) << loaded;
  const std::filesystem::path kept = local_ / "taskmanager" / "artifacts" / absl::StrCat(sha, ".so");
  ASSERT_TRUE(std::filesystem::exists(kept));
  EXPECT_EQ(*crypto::Sha256OfFile(kept.string()), sha);
  server->server->Shutdown();
}

// An object cut short in the bucket reaches the TaskManager as an error
// naming the binary; the next upload of the binary replaces the object.
TEST_F(S3ArtifactStoreTest, ATruncatedObjectIsNamedByTheTaskManagerAndReplacedByTheNextUpload) {
  const std::string bytes(3 << 20, 'j');
  const std::string sha = crypto::Sha256Hex(bytes);
  const std::string object = absl::StrCat("ha/artifacts/sha256/", sha);
  ASSERT_TRUE(bucket_fs_->Write(object, bytes.substr(0, 1 << 20), fs::WriteMode::kCreateNew).ok());
  std::unique_ptr<ArtifactStore> store = OpenStore("jobmanager");
  ASSERT_NE(store, nullptr);
  ArtifactServiceImpl service(store.get(), /*gate=*/nullptr);
  rpc::ServerOptions options;
  options.services = {&service};
  absl::StatusOr<rpc::StartedServer> server = rpc::StartServer(options);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = absl::StrCat("127.0.0.1:", server->port);
  taskmanager::JobArtifacts artifacts(
      (local_ / "taskmanager").string(),
      [&] { return taskmanager::ArtifactServer{address, v1::ArtifactService::NewStub(rpc::CreateChannel(address))}; },
      64 << 20, absl::Seconds(30));
  absl::Status loaded = artifacts.Acquire("job-1", sha, {}, "", nullptr).status();
  EXPECT_EQ(loaded.code(), absl::StatusCode::kDataLoss) << loaded;
  EXPECT_THAT(std::string(loaded.message()), HasSubstr(sha));

  absl::StatusOr<std::string> stored = Upload(*store, bytes);
  ASSERT_TRUE(stored.ok()) << stored.status();
  absl::StatusOr<fs::FileInfo> info = bucket_fs_->Stat(object);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->size, static_cast<int64_t>(bytes.size()));
  loaded = artifacts.Acquire("job-2", sha, {}, "", nullptr).status();
  EXPECT_NE(loaded.code(), absl::StatusCode::kDataLoss) << loaded;
  const std::filesystem::path kept = local_ / "taskmanager" / "artifacts" / absl::StrCat(sha, ".so");
  ASSERT_TRUE(std::filesystem::exists(kept));
  EXPECT_EQ(*crypto::Sha256OfFile(kept.string()), sha);
  server->server->Shutdown();
}

// The quota counts what the bucket holds, and collection deletes from it.
TEST_F(S3ArtifactStoreTest, QuotaAndCollectionGoByTheBucket) {
  std::unique_ptr<ArtifactStore> store = OpenStore("jobmanager", /*quota=*/3 << 20);
  ASSERT_NE(store, nullptr);
  absl::StatusOr<std::string> used = Upload(*store, std::string(1 << 20, 'u'));
  absl::StatusOr<std::string> unused = Upload(*store, std::string(1 << 20, 'n'));
  ASSERT_TRUE(used.ok() && unused.ok());
  absl::StatusOr<std::string> over = Upload(*store, std::string(3 << 19, 'o'));
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted) << over.status();
  const absl::Time now = absl::Now();
  EXPECT_EQ(store->Collect({*used}, absl::Hours(1), now).files, 0);
  ArtifactStore::Collected collected = store->Collect({*used}, absl::Hours(1), now + absl::Hours(2));
  EXPECT_EQ(collected.files, 1);
  EXPECT_EQ(store->SizeOf(*unused).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store->SizeOf(*used).ok());
  absl::StatusOr<std::string> fits = Upload(*store, std::string(3 << 19, 'o'));
  EXPECT_TRUE(fits.ok()) << fits.status();
}

}  // namespace
}  // namespace weir::jobmanager
