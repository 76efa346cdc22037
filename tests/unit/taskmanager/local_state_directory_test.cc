// The TaskManager's local state directory: owned by one live process,
// cleared of a dead predecessor's instances, and the default-layout siblings
// of killed TaskManagers swept once nobody holds them.
#include <sys/file.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "taskmanager/state/local_state_directory.h"

namespace weir::taskmanager {
namespace {

namespace fs = std::filesystem;

class LocalStateDirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) / absl::StrCat("local-state-", getpid());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // A directory as a killed TaskManager leaves it, last written `age` ago.
  fs::path Leftover(const std::string& name, std::chrono::minutes age) {
    fs::path dir = root_ / name;
    fs::create_directories(dir / "job" / "instance");
    std::ofstream(dir / "job" / "instance" / "000001.sst") << "data";
    std::ofstream(dir / ".lock");
    fs::last_write_time(dir, fs::file_time_type::clock::now() - age);
    return dir;
  }

  fs::path root_;
};

TEST_F(LocalStateDirectoryTest, OneLiveOwnerAndAPredecessorsLeftoversRemoved) {
  const fs::path own = Leftover("weir-state-tm-1", std::chrono::minutes(0));
  auto first = LocalStateDirectory::Acquire(own.string());
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(fs::exists(own / "job")) << "a dead predecessor's instances are removed";

  auto second = LocalStateDirectory::Acquire(own.string());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(second.status().message()), ::testing::HasSubstr("taskmanager.state.local.root-dirs"));

  first->reset();  // the lock goes with the owner
  EXPECT_TRUE(LocalStateDirectory::Acquire(own.string()).ok());
}

TEST_F(LocalStateDirectoryTest, SweepsOnlyUnlockedOldSiblingsOfTheDefaultLayout) {
  const fs::path dead = Leftover("weir-state-tm-dead", std::chrono::minutes(10));
  const fs::path starting = Leftover("weir-state-tm-new", std::chrono::minutes(0));
  const fs::path live = Leftover("weir-state-tm-live", std::chrono::minutes(10));
  const fs::path foreign = Leftover("something-else", std::chrono::minutes(10));
  const int held = open((live / ".lock").c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(held, 0);
  ASSERT_EQ(flock(held, LOCK_EX | LOCK_NB), 0);

  auto own = LocalStateDirectory::Acquire((root_ / "weir-state-tm-1").string());
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(starting / "job")) << "may belong to a TaskManager that has not locked it yet";
  EXPECT_TRUE(fs::exists(live / "job")) << "a live TaskManager's";
  EXPECT_TRUE(fs::exists(foreign / "job")) << "not named like Weir's";
  close(held);
}

// Two TaskManagers starting at once on one host: the other one may hold the
// lock for a moment while it sweeps the directory as a dead TaskManager's.
// Acquiring waits for that instead of failing.
// A configured directory another local user made (or a link to one) is
// refused, naming the key; one open to others is made private.
TEST_F(LocalStateDirectoryTest, OnlyAPrivateDirectoryOfThisUserIsUsed) {
  const fs::path open_dir = root_ / "open";
  fs::create_directories(open_dir);
  fs::permissions(open_dir, fs::perms::all);
  auto acquired = LocalStateDirectory::Acquire(open_dir.string());
  ASSERT_TRUE(acquired.ok()) << acquired.status();
  EXPECT_EQ(fs::status(open_dir).permissions() & fs::perms::all, fs::perms::owner_all);

  const fs::path link = root_ / "link";
  fs::create_directory_symlink(open_dir, link);
  auto linked = LocalStateDirectory::Acquire(link.string());
  ASSERT_FALSE(linked.ok());
  EXPECT_THAT(std::string(linked.status().message()), ::testing::HasSubstr("taskmanager.state.local.root-dirs"));

  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a directory to another user";
  const fs::path foreign = root_ / "foreign";
  fs::create_directories(foreign);
  ASSERT_EQ(chown(foreign.c_str(), 65534, 65534), 0);
  auto refused = LocalStateDirectory::Acquire(foreign.string());
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), ::testing::HasSubstr("belongs to user id 65534"));
  EXPECT_THAT(std::string(refused.status().message()), ::testing::HasSubstr("taskmanager.state.local.root-dirs"));
}

TEST_F(LocalStateDirectoryTest, ABriefHolderIsWaitedFor) {
  const fs::path own = Leftover("weir-state-tm-a", std::chrono::minutes(10));
  const int held = open((own / ".lock").c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(held, 0);
  ASSERT_EQ(flock(held, LOCK_EX | LOCK_NB), 0);
  std::thread sweeper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    std::error_code ec;  // as a sweep does: contents, the lock file, let go, the directory
    fs::remove_all(own / "job", ec);
    fs::remove(own / ".lock", ec);
    close(held);
    fs::remove(own, ec);
  });
  auto acquired = LocalStateDirectory::Acquire(own.string());
  sweeper.join();
  ASSERT_TRUE(acquired.ok()) << acquired.status();
  EXPECT_TRUE(fs::exists(own / ".lock"));
}

}  // namespace
}  // namespace weir::taskmanager
