#include "jobmanager/artifact_store.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "common/crypto/sha256.h"
#include "gtest/gtest.h"
#include "tests/testing/process.h"

namespace weir::jobmanager {
namespace {

TEST(ArtifactStoreTest, StoresUnderTheContentHash) {
  std::string root = weir::testing::MakeTempDir("weir-artifacts");
  auto store = ArtifactStore::Open(root, 1 << 20);
  ASSERT_TRUE(store.ok()) << store.status();
  auto upload = (*store)->BeginUpload();
  ASSERT_TRUE(upload.ok());
  ASSERT_TRUE((*upload)->Append("hello ").ok());
  ASSERT_TRUE((*upload)->Append("world").ok());
  auto sha = (*upload)->Commit();
  ASSERT_TRUE(sha.ok()) << sha.status();
  crypto::Sha256 expected;
  expected.Update("hello world");
  EXPECT_EQ(*sha, expected.HexDigest());
  auto path = (*store)->PathOf(*sha);
  ASSERT_TRUE(path.ok());
  EXPECT_EQ(*path, root + "/artifacts/sha256/" + *sha);
  EXPECT_EQ(weir::testing::ReadFile(*path), "hello world");
}

// An upload that is not what the client announced (cut off, or other
// bytes) is not stored under any hash; temporaries of a crashed JobManager
// go when the store opens.
TEST(ArtifactStoreTest, StoresOnlyWhatWasAnnouncedAndCleansCrashedUploads) {
  std::string root = weir::testing::MakeTempDir("weir-artifacts");
  auto store = ArtifactStore::Open(root, 1 << 20);
  ASSERT_TRUE(store.ok());
  crypto::Sha256 whole;
  whole.Update("hello world");
  const std::string announced = whole.HexDigest();
  {
    auto upload = (*store)->BeginUpload();
    ASSERT_TRUE((*upload)->Append("hello ").ok());  // the rest never came
    auto sha = (*upload)->Commit(announced);
    EXPECT_EQ(sha.status().code(), absl::StatusCode::kDataLoss);
  }
  crypto::Sha256 prefix;
  prefix.Update("hello ");
  EXPECT_EQ((*store)->PathOf(prefix.HexDigest()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*store)->PathOf(announced).status().code(), absl::StatusCode::kNotFound);

  std::ofstream(root + "/artifacts/sha256/.upload-1-0") << "left by a crash";
  auto reopened = ArtifactStore::Open(root, 1 << 20);
  ASSERT_TRUE(reopened.ok());
  EXPECT_FALSE(std::filesystem::exists(root + "/artifacts/sha256/.upload-1-0"));
}

TEST(ArtifactStoreTest, EnforcesTheSizeLimitAndLeavesNothingBehind) {
  std::string root = weir::testing::MakeTempDir("weir-artifacts");
  auto store = ArtifactStore::Open(root, 8);
  ASSERT_TRUE(store.ok());
  {
    auto upload = (*store)->BeginUpload();
    ASSERT_TRUE((*upload)->Append("12345").ok());
    absl::Status too_big = (*upload)->Append("67890");
    EXPECT_EQ(too_big.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_TRUE(absl::StrContains(too_big.message(), "jobmanager.artifact.max-size"));
  }
  int files = 0;
  for (auto& entry : std::filesystem::directory_iterator(root + "/artifacts/sha256")) {
    (void)entry;
    ++files;
  }
  EXPECT_EQ(files, 0);
}

TEST(ArtifactStoreTest, NeverTrustsAClientSuppliedPath) {
  std::string root = weir::testing::MakeTempDir("weir-artifacts");
  auto store = ArtifactStore::Open(root, 1 << 20);
  ASSERT_TRUE(store.ok());
  for (const char* bad : {"../../etc/passwd", "/etc/passwd", "ABCDEF", "",
                          "0000000000000000000000000000000000000000000000000000000000000000/.."}) {
    EXPECT_EQ((*store)->PathOf(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  absl::Status missing = (*store)->PathOf(std::string(64, 'a')).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  // Errors reach clients: they must not reveal where the JobManager stores files.
  EXPECT_FALSE(absl::StrContains(missing.message(), root)) << missing;
  EXPECT_FALSE(absl::StrContains(missing.message(), "artifacts/sha256")) << missing;
}

TEST(ArtifactStoreTest, StorageErrorsDoNotRevealPaths) {
  std::string root = weir::testing::MakeTempDir("weir-artifacts");
  auto store = ArtifactStore::Open(root, 1 << 20);
  ASSERT_TRUE(store.ok());
  // A store whose directory vanished cannot create its temporary file.
  std::filesystem::remove_all(root + "/artifacts");
  auto upload = (*store)->BeginUpload();
  ASSERT_FALSE(upload.ok());
  EXPECT_EQ(upload.status().code(), absl::StatusCode::kInternal);
  EXPECT_FALSE(absl::StrContains(upload.status().message(), root)) << upload.status();
  EXPECT_TRUE(absl::StrContains(upload.status().message(), "log")) << upload.status();
}

TEST(ArtifactStoreTest, RejectsAnEmptyUpload) {
  auto store = ArtifactStore::Open(weir::testing::MakeTempDir("weir-artifacts"), 1 << 20);
  auto upload = (*store)->BeginUpload();
  EXPECT_EQ((*upload)->Commit().status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::jobmanager

namespace weir::jobmanager {
namespace {

std::string Store(ArtifactStore& store, const std::string& bytes) {
  auto upload = store.BeginUpload();
  EXPECT_TRUE(upload.ok());
  EXPECT_TRUE((*upload)->Append(bytes).ok());
  auto sha = (*upload)->Commit();
  EXPECT_TRUE(sha.ok()) << sha.status();
  return sha.ok() ? *sha : "";
}

// Binaries no job uses go once older than the retention; the quota counts
// what is stored, also across a reopen, and frees what was collected.
TEST(ArtifactStoreTest, CollectsUnusedBinariesAfterTheRetentionAndKeepsWithinItsQuota) {
  const std::string root = weir::testing::MakeTempDir("weir-artifacts");
  auto store = ArtifactStore::Open(root, 1 << 20, /*quota_bytes=*/25);
  ASSERT_TRUE(store.ok());
  const std::string used = Store(**store, "0123456789");
  const std::string unused = Store(**store, "abcdefghij");
  EXPECT_EQ((*store)->stored_bytes(), 20);
  // Storing one again replaces it: no more bytes.
  EXPECT_EQ(Store(**store, "abcdefghij"), unused);
  EXPECT_EQ((*store)->stored_bytes(), 20);
  // Beyond the quota: refused when it would be stored, saying which setting.
  auto upload = (*store)->BeginUpload();
  ASSERT_TRUE(upload.ok());
  ASSERT_TRUE((*upload)->Append("9876543210").ok());
  absl::StatusOr<std::string> over = (*upload)->Commit();
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(over.status().message(), "jobmanager.artifact.store.max-size")) << over.status();
  upload->reset();
  // One bigger than the whole quota: refused as it arrives; so are uploads
  // in flight that together would hold more than the quota.
  auto big = (*store)->BeginUpload();
  ASSERT_TRUE(big.ok());
  EXPECT_EQ((*big)->Append(std::string(26, 'x')).code(), absl::StatusCode::kResourceExhausted);
  auto first = (*store)->BeginUpload();
  auto second = (*store)->BeginUpload();
  ASSERT_TRUE(first.ok() && second.ok());
  ASSERT_TRUE((*first)->Append(std::string(15, 'a')).ok());
  EXPECT_EQ((*second)->Append(std::string(15, 'b')).code(), absl::StatusCode::kResourceExhausted);
  first->reset();  // abandoned: its bytes are free again
  EXPECT_TRUE((*second)->Append(std::string(15, 'b')).ok());
  second->reset();

  // Within the retention nothing goes; after it, only what no job uses.
  ArtifactStore::Collected none = (*store)->Collect({used}, absl::Hours(1), absl::Now());
  EXPECT_EQ(none.files, 0);
  ArtifactStore::Collected collected = (*store)->Collect({used}, absl::Hours(1), absl::Now() + absl::Hours(2));
  EXPECT_EQ(collected.files, 1);
  EXPECT_EQ(collected.bytes, 10);
  EXPECT_TRUE((*store)->PathOf(used).ok());
  EXPECT_EQ((*store)->PathOf(unused).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*store)->stored_bytes(), 10);
  EXPECT_FALSE(Store(**store, "klmnopqrst").empty());  // room again

  auto reopened = ArtifactStore::Open(root, 1 << 20, 25);
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ((*reopened)->stored_bytes(), 20);
}

}  // namespace
}  // namespace weir::jobmanager
