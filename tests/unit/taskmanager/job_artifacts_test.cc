// JobArtifacts trusts nothing it finds on disk: a planted cached binary is
// not loaded, directories must be private to the TaskManager's user.
#include "taskmanager/job_artifacts.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"

namespace weir::taskmanager {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// SHA-256 of the empty string: a valid artifact id.
constexpr char kSha[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

class JobArtifactsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) / absl::StrCat("job-artifacts-", getpid(), "-", counter_++);
    fs::remove_all(root_);
    fs::create_directories(root_);
    dir_ = (root_ / "weir-tm").string();
  }
  void TearDown() override { fs::remove_all(root_); }

  // JobArtifacts whose JobManager cannot be reached: any download fails.
  std::unique_ptr<JobArtifacts> Unreachable() {
    auto channel = grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials());
    return std::make_unique<JobArtifacts>(dir_, v1::ArtifactService::NewStub(channel));
  }

  static int counter_;
  fs::path root_;
  std::string dir_;
};
int JobArtifactsTest::counter_ = 0;

// A file planted under a binary's name is not loaded: its hash does not
// match, so it is removed and the binary downloaded (here: that fails).
TEST_F(JobArtifactsTest, APlantedCachedBinaryIsNotLoaded) {
  fs::create_directories(fs::path(dir_) / "artifacts");
  fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::replace);
  fs::permissions(fs::path(dir_) / "artifacts", fs::perms::owner_all, fs::perm_options::replace);
  const fs::path planted = fs::path(dir_) / "artifacts" / absl::StrCat(kSha, ".so");
  std::ofstream(planted) << "not what the JobManager has";
  auto artifacts = Unreachable();
  auto loaded = artifacts->Acquire("job-1", kSha, {}, "");
  ASSERT_FALSE(loaded.ok());
  EXPECT_THAT(std::string(loaded.status().message()), HasSubstr("downloading job binary"));
  EXPECT_FALSE(fs::exists(planted));
}

// Directories open to other users are made private before use.
TEST_F(JobArtifactsTest, DirectoriesAreMadePrivate) {
  fs::create_directories(dir_);
  fs::permissions(dir_, fs::perms::all, fs::perm_options::replace);
  auto artifacts = Unreachable();
  EXPECT_FALSE(artifacts->Acquire("job-1", kSha, {}, "").ok());
  EXPECT_EQ(fs::status(dir_).permissions() & fs::perms::all, fs::perms::owner_all);
  EXPECT_EQ(fs::status(fs::path(dir_) / "artifacts").permissions() & fs::perms::all, fs::perms::owner_all);
}

// A directory that belongs to another user is refused with what to do.
TEST_F(JobArtifactsTest, ADirectoryOfAnotherUserIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a directory to another user";
  fs::create_directories(dir_);
  ASSERT_EQ(chown(dir_.c_str(), 65534, 65534), 0);
  auto artifacts = Unreachable();
  auto loaded = artifacts->Acquire("job-1", kSha, {}, "");
  ASSERT_FALSE(loaded.ok());
  EXPECT_THAT(std::string(loaded.status().message()), HasSubstr("belongs to user id 65534"));
  EXPECT_THAT(std::string(loaded.status().message()), HasSubstr("io.tmp.dirs"));
}

// A link planted where the directory should be is refused.
TEST_F(JobArtifactsTest, ASymlinkInPlaceOfTheDirectoryIsRefused) {
  fs::create_directories(root_ / "elsewhere");
  fs::create_directory_symlink(root_ / "elsewhere", dir_);
  auto artifacts = Unreachable();
  auto loaded = artifacts->Acquire("job-1", kSha, {}, "");
  ASSERT_FALSE(loaded.ok());
  EXPECT_THAT(std::string(loaded.status().message()), HasSubstr("is not a directory"));
}

}  // namespace
}  // namespace weir::taskmanager
