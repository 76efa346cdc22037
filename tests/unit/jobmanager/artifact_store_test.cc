#include "jobmanager/artifact_store.h"

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/crypto/sha256.h"
#include "gtest/gtest.h"
#include "tests/testing/process.h"

namespace weir::jobmanager {
namespace {

// A directory of its own for a test, removed when the test ends.
struct TempDir {
  TempDir() : path(weir::testing::MakeTempDir("weir-artifacts")) {}
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  const std::string path;
};

TEST(ArtifactStoreTest, StoresUnderTheContentHash) {
  const TempDir temp;
  const std::string& root = temp.path;
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
  auto size = (*store)->SizeOf(*sha);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(*size, 11);
  // The layout of a local directory stays what it always was.
  EXPECT_EQ(weir::testing::ReadFile(root + "/artifacts/sha256/" + *sha), "hello world");
}

// An upload that is not what the client announced (cut off, or other
// bytes) is not stored under any hash; staging files of a crashed
// JobManager of this host go when the store opens, those of a live process
// or of another host stay.
TEST(ArtifactStoreTest, StoresOnlyWhatWasAnnouncedAndCleansCrashedUploads) {
  const TempDir temp;
  const std::string& root = temp.path;
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
  EXPECT_EQ((*store)->SizeOf(prefix.HexDigest()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*store)->SizeOf(announced).status().code(), absl::StatusCode::kNotFound);

  // A pid that is gone: a child that exited and was reaped.
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
  const std::string dir = root + "/artifacts/sha256/";
  const std::string crashed = absl::StrCat(dir, ".upload-", host, "-", child, "-0");
  const std::string live = absl::StrCat(dir, ".upload-", host, "-1-0");  // init runs
  const std::string elsewhere = absl::StrCat(dir, ".upload-", host, "x-", child, "-0");
  for (const std::string& path : {crashed, live, elsewhere}) std::ofstream(path) << "an upload under way";
  auto reopened = ArtifactStore::Open(root, 1 << 20);
  ASSERT_TRUE(reopened.ok());
  EXPECT_FALSE(std::filesystem::exists(crashed));
  EXPECT_TRUE(std::filesystem::exists(live));
  EXPECT_TRUE(std::filesystem::exists(elsewhere));
}

TEST(ArtifactStoreTest, EnforcesTheSizeLimitAndLeavesNothingBehind) {
  const TempDir temp;
  const std::string& root = temp.path;
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
  const TempDir temp;
  const std::string& root = temp.path;
  auto store = ArtifactStore::Open(root, 1 << 20);
  ASSERT_TRUE(store.ok());
  for (const char* bad : {"../../etc/passwd", "/etc/passwd", "ABCDEF", "",
                          "0000000000000000000000000000000000000000000000000000000000000000/.."}) {
    EXPECT_EQ((*store)->SizeOf(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ((*store)->Read(bad, 0, 10).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  absl::Status missing = (*store)->SizeOf(std::string(64, 'a')).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  // Errors reach clients: they must not reveal where the JobManager stores files.
  EXPECT_FALSE(absl::StrContains(missing.message(), root)) << missing;
  EXPECT_FALSE(absl::StrContains(missing.message(), "artifacts/sha256")) << missing;
}

TEST(ArtifactStoreTest, StorageErrorsDoNotRevealPaths) {
  const TempDir temp;
  const std::string& root = temp.path;
  auto store = ArtifactStore::Open(root, 1 << 20);
  ASSERT_TRUE(store.ok());
  // A store whose directory vanished cannot create its staging file.
  std::filesystem::remove_all(root + "/artifacts");
  auto upload = (*store)->BeginUpload();
  ASSERT_FALSE(upload.ok());
  EXPECT_EQ(upload.status().code(), absl::StatusCode::kInternal);
  EXPECT_FALSE(absl::StrContains(upload.status().message(), root)) << upload.status();
  EXPECT_TRUE(absl::StrContains(upload.status().message(), "log")) << upload.status();
}

TEST(ArtifactStoreTest, RejectsAnEmptyUpload) {
  const TempDir temp;
  auto store = ArtifactStore::Open(temp.path, 1 << 20);
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
  const TempDir temp;
  const std::string& root = temp.path;
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
  EXPECT_TRUE((*store)->SizeOf(used).ok());
  EXPECT_EQ((*store)->SizeOf(unused).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*store)->stored_bytes(), 10);
  EXPECT_FALSE(Store(**store, "klmnopqrst").empty());  // room again

  auto reopened = ArtifactStore::Open(root, 1 << 20, 25);
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ((*reopened)->stored_bytes(), 20);
}

}  // namespace
}  // namespace weir::jobmanager

namespace weir::jobmanager {
namespace {

std::string Sha256Of(const std::string& bytes) {
  crypto::Sha256 sha;
  sha.Update(bytes);
  return sha.HexDigest();
}

// The same binary uploaded twice (two submissions, two clients) is stored
// once and counted once.
TEST(ArtifactStoreTest, ADuplicateUploadIsStoredOnce) {
  const TempDir temp;
  const std::string& root = temp.path;
  auto store = ArtifactStore::Open(root, 1 << 20, /*quota_bytes=*/25);
  ASSERT_TRUE(store.ok());
  const std::string sha = Store(**store, "0123456789");
  // Both under way at once, both committed.
  auto first = (*store)->BeginUpload();
  auto second = (*store)->BeginUpload();
  ASSERT_TRUE(first.ok() && second.ok());
  ASSERT_TRUE((*first)->Append("0123456789").ok());
  absl::StatusOr<std::string> committed_first = (*first)->Commit(sha);
  ASSERT_TRUE(committed_first.ok()) << committed_first.status();
  ASSERT_TRUE((*second)->Append("0123456789").ok());
  absl::StatusOr<std::string> committed_second = (*second)->Commit(sha);
  ASSERT_TRUE(committed_second.ok()) << committed_second.status();
  EXPECT_EQ(*committed_first, sha);
  EXPECT_EQ(*committed_second, sha);
  EXPECT_EQ((*store)->stored_bytes(), 10);
  first->reset();
  second->reset();
  int objects = 0;
  for (const auto& entry : std::filesystem::directory_iterator(root + "/artifacts/sha256")) {
    (void)entry;
    ++objects;
  }
  EXPECT_EQ(objects, 1);  // the artifact; no staging file left
  // Counted once: 15 more bytes fit the quota of 25.
  EXPECT_FALSE(Store(**store, std::string(15, 'x')).empty());
}

// An object already under the name is not taken on trust: cut short, or of
// the right size with other bytes, it is replaced by the upload.
TEST(ArtifactStoreTest, ADamagedObjectIsReplacedByTheNextUpload) {
  const TempDir temp;
  const std::string& root = temp.path;
  auto store = ArtifactStore::Open(root, 1 << 20);
  ASSERT_TRUE(store.ok());
  const std::string bytes = "the whole job binary";
  const std::string sha = Sha256Of(bytes);
  const std::string object = root + "/artifacts/sha256/" + sha;
  for (const std::string& damaged : {std::string("the whole"), std::string("THE WHOLE JOB BINARY")}) {
    {
      std::ofstream out(object, std::ios::trunc);
      out << damaged;
    }
    auto reopened = ArtifactStore::Open(root, 1 << 20);
    ASSERT_TRUE(reopened.ok());
    EXPECT_EQ(Store(**reopened, bytes), sha) << damaged;
    EXPECT_EQ(weir::testing::ReadFile(object), bytes) << damaged;
    EXPECT_EQ((*reopened)->stored_bytes(), static_cast<int64_t>(bytes.size())) << damaged;
  }
}

// Reads go by range, and what one JobManager stored another one on the same
// storage serves; its Collect counts it into its quota.
TEST(ArtifactStoreTest, AnyStoreOnTheStorageServesInRanges) {
  const TempDir temp;
  const std::string& root = temp.path;
  auto leader = ArtifactStore::Open(root, 1 << 20);
  auto standby = ArtifactStore::Open(root, 1 << 20);
  ASSERT_TRUE(leader.ok() && standby.ok());
  const std::string sha = Store(**leader, "0123456789");
  absl::StatusOr<int64_t> size = (*standby)->SizeOf(sha);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(*size, 10);
  absl::StatusOr<std::string> middle = (*standby)->Read(sha, 3, 4);
  ASSERT_TRUE(middle.ok()) << middle.status();
  EXPECT_EQ(*middle, "3456");
  absl::StatusOr<std::string> end = (*standby)->Read(sha, 8, 100);
  ASSERT_TRUE(end.ok());
  EXPECT_EQ(*end, "89");
  EXPECT_EQ((*standby)->stored_bytes(), 0);
  (*standby)->Collect({sha}, absl::Hours(1), absl::Now());
  EXPECT_EQ((*standby)->stored_bytes(), 10);
}

// Retention counts from when a binary was first found unused, and storing
// it again starts it over.
TEST(ArtifactStoreTest, StoringABinaryAgainRestartsItsRetention) {
  const TempDir temp;
  const std::string& root = temp.path;
  auto store = ArtifactStore::Open(root, 1 << 20);
  ASSERT_TRUE(store.ok());
  const std::string sha = Store(**store, "0123456789");
  const absl::Time t0 = absl::Now();
  EXPECT_EQ((*store)->Collect({}, absl::Hours(1), t0).files, 0);  // first found unused
  EXPECT_EQ((*store)->Collect({}, absl::Hours(1), t0 + absl::Minutes(59)).files, 0);
  EXPECT_EQ(Store(**store, "0123456789"), sha);
  EXPECT_EQ((*store)->Collect({}, absl::Hours(1), t0 + absl::Minutes(61)).files, 0);  // unused anew from here
  EXPECT_EQ((*store)->Collect({}, absl::Hours(1), t0 + absl::Minutes(120)).files, 0);
  EXPECT_EQ((*store)->Collect({}, absl::Hours(1), t0 + absl::Minutes(122)).files, 1);
  EXPECT_EQ((*store)->SizeOf(sha).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*store)->stored_bytes(), 0);
}

}  // namespace
}  // namespace weir::jobmanager
