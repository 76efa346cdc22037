// LocalFileSystem: publishing (whole or nothing, never overwriting under
// kCreateNew), reads, ranges, listing at every depth without temporary
// files, deletes; and the factory's URI forms.
#include "common/fs/local_file_system.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/fs/file_system_factory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weir::fs {
namespace {

using ::testing::HasSubstr;

class LocalFileSystemTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = absl::StrCat(::testing::TempDir(), "/local_fs_", ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(root_);
    auto fs = LocalFileSystem::Open(root_);
    ASSERT_TRUE(fs.ok()) << fs.status();
    fs_ = *std::move(fs);
  }

  std::string root_;
  std::unique_ptr<LocalFileSystem> fs_;
};

TEST_F(LocalFileSystemTest, WriteReadStatRangeDelete) {
  ASSERT_TRUE(fs_->Write("job/chk-1/_metadata", "0123456789", WriteMode::kOverwrite).ok());
  EXPECT_EQ(*fs_->ReadFile("job/chk-1/_metadata", 10), "0123456789");
  EXPECT_TRUE(absl::IsResourceExhausted(fs_->ReadFile("job/chk-1/_metadata", 9).status()));
  EXPECT_EQ(fs_->Stat("job/chk-1/_metadata")->size, 10);
  EXPECT_EQ(*fs_->ReadRange("job/chk-1/_metadata", 3, 4), "3456");
  EXPECT_EQ(*fs_->ReadRange("job/chk-1/_metadata", 8, 100), "89");
  EXPECT_EQ(*fs_->ReadRange("job/chk-1/_metadata", 20, 5), "");
  EXPECT_TRUE(*fs_->Exists("job/chk-1/_metadata"));
  ASSERT_TRUE(fs_->Delete("job/chk-1/_metadata").ok());
  EXPECT_FALSE(*fs_->Exists("job/chk-1/_metadata"));
  EXPECT_TRUE(fs_->Delete("job/chk-1/_metadata").ok()) << "deleting a missing file is OK";
  EXPECT_TRUE(absl::IsNotFound(fs_->ReadFile("job/chk-1/_metadata", 10).status()));
}

TEST_F(LocalFileSystemTest, CreateNewNeverOverwrites) {
  ASSERT_TRUE(fs_->Write("m", "first", WriteMode::kCreateNew).ok());
  absl::Status second = fs_->Write("m", "second", WriteMode::kCreateNew);
  EXPECT_TRUE(absl::IsAlreadyExists(second)) << second;
  EXPECT_EQ(*fs_->ReadFile("m", 100), "first");
  ASSERT_TRUE(fs_->Write("m", "third", WriteMode::kOverwrite).ok());
  EXPECT_EQ(*fs_->ReadFile("m", 100), "third");
  // Nothing left behind by the refused write.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(root_), std::filesystem::directory_iterator()), 1);
}

TEST_F(LocalFileSystemTest, AWriterPublishesAtCloseOnlyAndAbortLeavesNothing) {
  auto writer = fs_->NewWriter("d/f", WriteMode::kOverwrite);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->Append("abc").ok());
  EXPECT_FALSE(*fs_->Exists("d/f"));
  EXPECT_TRUE(fs_->List("")->empty()) << "a file being written is not listed";
  ASSERT_TRUE((*writer)->Close().ok());
  EXPECT_EQ(*fs_->ReadFile("d/f", 3), "abc");

  auto aborted = fs_->NewWriter("d/g", WriteMode::kOverwrite);
  ASSERT_TRUE((*aborted)->Append("xyz").ok());
  ASSERT_TRUE((*aborted)->Abort().ok());
  { auto dropped = fs_->NewWriter("d/h", WriteMode::kOverwrite); ASSERT_TRUE((*dropped)->Append("x").ok()); }
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(root_ + "/d"), std::filesystem::directory_iterator()), 1);
}

TEST_F(LocalFileSystemTest, ListGoesThroughEveryLevelSorted) {
  for (const char* p : {"j1/chk-2/_metadata", "j1/chk-10/_metadata", "j1/shared/a.sst", "j2/x", "j10/y"}) {
    ASSERT_TRUE(fs_->Write(p, p, WriteMode::kOverwrite).ok());
  }
  auto all = fs_->List("");
  ASSERT_TRUE(all.ok());
  std::vector<std::string> paths;
  for (const FileInfo& f : *all) paths.push_back(f.path);
  EXPECT_THAT(paths, testing::ElementsAre("j1/chk-10/_metadata", "j1/chk-2/_metadata", "j1/shared/a.sst", "j10/y", "j2/x"));
  auto j1 = fs_->List("j1/");
  ASSERT_TRUE(j1.ok());
  EXPECT_EQ(j1->size(), 3u);
  EXPECT_EQ((*j1)[2].size, static_cast<int64_t>(std::string("j1/shared/a.sst").size()));
  EXPECT_EQ(fs_->List("j1/chk-1")->size(), 1u) << "a partial last segment is a prefix (chk-10, not chk-2)";
  EXPECT_TRUE(fs_->List("none/")->empty());
  ASSERT_TRUE(fs_->DeleteMany({"j2/x", "j10/y", "missing"}).ok());
  EXPECT_EQ(fs_->List("")->size(), 3u);
}

TEST_F(LocalFileSystemTest, UploadAndDownload) {
  std::string local = root_ + "-local";
  { std::ofstream(local) << std::string(100000, 'q'); }
  auto size = fs_->UploadFile(local, "up/file", WriteMode::kCreateNew);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(*size, 100000);
  EXPECT_TRUE(absl::IsAlreadyExists(fs_->UploadFile(local, "up/file", WriteMode::kCreateNew).status()));
  auto down = fs_->DownloadFile("up/file", local + ".copy");
  ASSERT_TRUE(down.ok()) << down.status();
  EXPECT_EQ(std::filesystem::file_size(local + ".copy"), 100000u);
}

TEST_F(LocalFileSystemTest, BadPathsAreRefused) {
  for (const char* bad : {"", "/abs", "a//b", "a/../b", "./a", "a/", "a\nb"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(fs_->Write(bad, "x", WriteMode::kOverwrite))) << bad;
  }
}

TEST(FileSystemFactoryTest, UriForms) {
  auto plain = OpenFileSystem("/tmp/weir-fs-factory", nullptr);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ((*plain)->Uri(), "/tmp/weir-fs-factory");
  auto file = OpenFileSystem("file:///tmp/weir-fs-factory/", nullptr);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->Uri(), "/tmp/weir-fs-factory");
  EXPECT_THAT(OpenFileSystem("file://relative", nullptr).status().message(), HasSubstr("no absolute path"));
  EXPECT_THAT(OpenFileSystem("relative/dir", nullptr).status().message(), HasSubstr("unsupported storage URI"));
  EXPECT_THAT(OpenFileSystem("hdfs://nn/x", nullptr).status().message(),
              HasSubstr("use an absolute path (/data/weir), file:///data/weir or s3://bucket/prefix"));
  auto env = [](absl::string_view name) -> std::optional<std::string> {
    if (name == "AWS_ACCESS_KEY_ID") return "a";
    if (name == "AWS_SECRET_ACCESS_KEY") return "b";
    return std::nullopt;
  };
  auto s3 = OpenFileSystem("s3://bucket/some/prefix/", nullptr, env);
  ASSERT_TRUE(s3.ok()) << s3.status();
  EXPECT_EQ((*s3)->Uri(), "s3://bucket/some/prefix");
}

}  // namespace
}  // namespace weir::fs
