// S3FileSystem against a real S3-compatible server (S3Proxy, started by
// scripts/s3.sh through the CTest fixture "s3"; WEIR_TEST_S3_DIR names its
// directory). Each test works in a bucket of its own.
#include "common/fs/s3/s3_file_system.h"

#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/config/configuration.h"
#include "common/crypto/sha256.h"
#include "common/fs/file_system_factory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weir::fs {
namespace {

using ::testing::HasSubstr;

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return std::string(absl::StripAsciiWhitespace(text));
}

std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string out(n, '\0');
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = rng();
    std::memcpy(out.data() + i, &v, std::min<size_t>(8, n - i));
  }
  return out;
}

class S3FileSystemTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* dir = std::getenv("WEIR_TEST_S3_DIR");
    ASSERT_NE(dir, nullptr) << "WEIR_TEST_S3_DIR is not set; run through ctest (fixture s3) or scripts/s3.sh start";
    dir_ = dir;
    std::string credentials = absl::StrCat(dir_, "/credentials");
    auto env = [credentials](absl::string_view name) -> std::optional<std::string> {
      if (name == "AWS_SHARED_CREDENTIALS_FILE") return credentials;
      return std::nullopt;
    };
    absl::StatusOr<S3Options> options = ResolveS3Options(nullptr, env);
    ASSERT_TRUE(options.ok()) << options.status();
    options_ = *options;
    options_.endpoint = ReadText(absl::StrCat(dir_, "/address"));
    ASSERT_FALSE(options_.endpoint.empty()) << "no server address in " << dir_;
    options_.path_style = true;
    options_.part_size = 5 << 20;
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    bucket_ = absl::AsciiStrToLower(absl::StrFormat("t-%s-%08x", name.substr(0, 40), std::random_device()()));
    fs_ = Open(absl::StrCat("s3://", bucket_, "/root"), options_);
    absl::Status created = fs_->CreateBucket();
    ASSERT_TRUE(created.ok()) << created;
  }

  // Leaves the server's directory as small as it found it.
  void TearDown() override {
    if (fs_ == nullptr) return;
    absl::StatusOr<std::vector<FileInfo>> left = fs_->List("");
    ASSERT_TRUE(left.ok()) << left.status();
    std::vector<std::string> paths;
    for (const FileInfo& f : *left) paths.push_back(f.path);
    EXPECT_TRUE(fs_->DeleteMany(paths).ok());
  }

  std::unique_ptr<S3FileSystem> Open(const std::string& uri, const S3Options& options) {
    auto fs = S3FileSystem::Open(uri, options);
    EXPECT_TRUE(fs.ok()) << fs.status();
    return fs.ok() ? *std::move(fs) : nullptr;
  }

  // Files S3Proxy's filesystem backend holds for this test's bucket: objects
  // and the parts of multipart uploads in progress.
  int FilesInBucketDirectory() const {
    int n = 0;
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(absl::StrCat(dir_, "/data/", bucket_), ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      if (it->is_regular_file()) ++n;
    }
    return n;
  }

  std::string dir_;
  S3Options options_;
  std::string bucket_;
  std::unique_ptr<S3FileSystem> fs_;
};

TEST_F(S3FileSystemTest, SmallFileRoundTrip) {
  const std::string path = "job 1/chk-7/_metadata+é";
  ASSERT_TRUE(fs_->Write(path, "0123456789", WriteMode::kOverwrite).ok());
  EXPECT_EQ(*fs_->ReadFile(path, 10), "0123456789");
  absl::StatusOr<std::string> bounded = fs_->ReadFile(path, 9);
  EXPECT_TRUE(absl::IsResourceExhausted(bounded.status())) << bounded.status();
  EXPECT_EQ(fs_->Stat(path)->size, 10);
  EXPECT_EQ(*fs_->ReadRange(path, 2, 3), "234");
  EXPECT_EQ(*fs_->ReadRange(path, 8, 100), "89");
  EXPECT_EQ(*fs_->ReadRange(path, 10, 5), "");
  ASSERT_TRUE(fs_->Write(path, "", WriteMode::kOverwrite).ok());
  EXPECT_EQ(*fs_->ReadFile(path, 10), "");
  ASSERT_TRUE(fs_->Delete(path).ok());
  EXPECT_FALSE(*fs_->Exists(path));
  EXPECT_TRUE(fs_->Delete(path).ok()) << "deleting a missing object is OK";
  absl::StatusOr<std::string> gone = fs_->ReadFile(path, 10);
  EXPECT_TRUE(absl::IsNotFound(gone.status())) << gone.status();
  EXPECT_THAT(gone.status().message(), HasSubstr(absl::StrCat("s3://", bucket_, "/root/job 1/chk-7/")));
}

TEST_F(S3FileSystemTest, MultipartRoundTripOf23MiB) {
  const std::string data = RandomBytes(23 << 20, 23);
  auto writer = fs_->NewWriter("big/file", WriteMode::kOverwrite);
  ASSERT_TRUE(writer.ok());
  // Appends of uneven sizes that straddle the part boundaries.
  size_t at = 0;
  for (size_t step = 777777; at < data.size(); step = step * 3 % 4000037 + 1) {
    size_t n = std::min(step, data.size() - at);
    ASSERT_TRUE((*writer)->Append(absl::string_view(data).substr(at, n)).ok());
    at += n;
  }
  EXPECT_FALSE(*fs_->Exists("big/file")) << "visible before Close";
  ASSERT_TRUE((*writer)->Close().ok());
  EXPECT_EQ(fs_->Stat("big/file")->size, 23 << 20);
  absl::StatusOr<std::string> read = fs_->ReadFile("big/file", 23 << 20);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(crypto::Sha256Hex(*read), crypto::Sha256Hex(data));
  // A range across the boundary of parts 1 and 2.
  EXPECT_EQ(*fs_->ReadRange("big/file", (5 << 20) - 100, 200), data.substr((5 << 20) - 100, 200));

  // The same through files: UploadFile (multipart) and DownloadFile (ranges).
  std::string local = absl::StrCat(::testing::TempDir(), "/", bucket_, ".in");
  { std::ofstream(local, std::ios::binary) << data; }
  absl::StatusOr<int64_t> up = fs_->UploadFile(local, "big/uploaded", WriteMode::kCreateNew);
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_EQ(*up, 23 << 20);
  absl::StatusOr<int64_t> down = fs_->DownloadFile("big/uploaded", local + ".out");
  ASSERT_TRUE(down.ok()) << down.status();
  EXPECT_EQ(*crypto::Sha256OfFile(local + ".out"), crypto::Sha256Hex(data));
  std::remove(local.c_str());
  std::remove((local + ".out").c_str());
}

TEST_F(S3FileSystemTest, ListOver1000KeysFollowsContinuationAndBatchDeleteRemovesThem) {
  constexpr int kFiles = 1150;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t; i < kFiles; i += 4) {
        if (!fs_->Write(absl::StrFormat("shared/%05d.sst", i), absl::StrCat(i), WriteMode::kOverwrite).ok()) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(failures, 0);
  ASSERT_TRUE(fs_->Write("other/x", "x", WriteMode::kOverwrite).ok());

  absl::StatusOr<std::vector<FileInfo>> listed = fs_->List("shared/");
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), static_cast<size_t>(kFiles));
  for (int i = 0; i < kFiles; ++i) {
    EXPECT_EQ((*listed)[i].path, absl::StrFormat("shared/%05d.sst", i));
    EXPECT_EQ((*listed)[i].size, static_cast<int64_t>(absl::StrCat(i).size()));
  }
  EXPECT_EQ(fs_->List("")->size(), static_cast<size_t>(kFiles + 1));
  EXPECT_EQ(fs_->List("shared/001")->size(), 100u);

  std::vector<std::string> doomed;
  for (const FileInfo& f : *listed) doomed.push_back(f.path);
  doomed.push_back("shared/never-existed");
  ASSERT_TRUE(fs_->DeleteMany(doomed).ok());
  EXPECT_TRUE(fs_->List("shared/")->empty());
  EXPECT_EQ(fs_->List("")->size(), 1u);
}

TEST_F(S3FileSystemTest, ConditionalCreateIsRefusedTheSecondTime) {
  ASSERT_TRUE(fs_->Write("job/chk-3/_metadata", "first", WriteMode::kCreateNew).ok());
  absl::Status second = fs_->Write("job/chk-3/_metadata", "second", WriteMode::kCreateNew);
  EXPECT_TRUE(absl::IsAlreadyExists(second)) << second;
  EXPECT_THAT(second.message(), HasSubstr("HTTP 412"));
  EXPECT_THAT(second.message(), HasSubstr(absl::StrCat("s3://", bucket_, "/root/job/chk-3/_metadata")));
  EXPECT_EQ(*fs_->ReadFile("job/chk-3/_metadata", 100), "first");
  EXPECT_TRUE(fs_->Write("job/chk-3/_metadata", "third", WriteMode::kOverwrite).ok());
  EXPECT_EQ(*fs_->ReadFile("job/chk-3/_metadata", 100), "third");
}

TEST_F(S3FileSystemTest, ConditionalCreateOfAMultipartFileIsRefusedTheSecondTime) {
  const std::string first = RandomBytes(11 << 20, 1);
  ASSERT_TRUE(fs_->Write("artifact", first, WriteMode::kCreateNew).ok());
  absl::Status second = fs_->Write("artifact", RandomBytes(11 << 20, 2), WriteMode::kCreateNew);
  EXPECT_TRUE(absl::IsAlreadyExists(second)) << second;
  EXPECT_EQ(crypto::Sha256Hex(*fs_->ReadFile("artifact", 11 << 20)), crypto::Sha256Hex(first));
}

TEST_F(S3FileSystemTest, AMultipartUploadCutOffHalfWayLeavesNoVisibleObject) {
  {
    auto writer = fs_->NewWriter("half/aborted", WriteMode::kOverwrite);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Append(RandomBytes(12 << 20, 3)).ok());  // two parts sent, one buffered
    EXPECT_GT(FilesInBucketDirectory(), 0) << "S3Proxy keeps the uploaded parts as files";
    ASSERT_TRUE((*writer)->Abort().ok());
    EXPECT_EQ(FilesInBucketDirectory(), 0) << "the abort removed the parts";
  }
  {
    auto writer = fs_->NewWriter("half/dropped", WriteMode::kOverwrite);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Append(RandomBytes(11 << 20, 4)).ok());
    // Destroyed without Close, as when the uploading task fails.
  }
  EXPECT_EQ(FilesInBucketDirectory(), 0);
  EXPECT_FALSE(*fs_->Exists("half/aborted"));
  EXPECT_FALSE(*fs_->Exists("half/dropped"));
  EXPECT_TRUE(fs_->List("")->empty());
}

TEST_F(S3FileSystemTest, AWrongSecretKeyIsAClear403NamingTheBucket) {
  S3Options wrong = options_;
  wrong.secret_key = "not-the-secret";
  std::unique_ptr<S3FileSystem> fs = Open(absl::StrCat("s3://", bucket_, "/root"), wrong);
  absl::Status status = fs->Write("x", "y", WriteMode::kOverwrite);
  EXPECT_TRUE(absl::IsPermissionDenied(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("s3://", bucket_, "/root/x")));
  EXPECT_THAT(status.message(), HasSubstr("HTTP 403"));
  EXPECT_THAT(status.message(), HasSubstr("check the access key and secret key"));
  absl::StatusOr<std::vector<FileInfo>> listed = fs->List("");
  EXPECT_TRUE(absl::IsPermissionDenied(listed.status())) << listed.status();
  EXPECT_THAT(listed.status().message(), HasSubstr(absl::StrCat("s3://", bucket_)));
}

TEST_F(S3FileSystemTest, AMissingBucketIsAClearError) {
  std::unique_ptr<S3FileSystem> fs = Open(absl::StrCat("s3://", bucket_, "-missing/p"), options_);
  absl::Status status = fs->Write("x", "y", WriteMode::kOverwrite);
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("NoSuchBucket"));
  EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("bucket '", bucket_, "-missing' does not exist: create it or fix the URI")));
  absl::StatusOr<std::vector<FileInfo>> listed = fs->List("");
  EXPECT_TRUE(absl::IsFailedPrecondition(listed.status())) << listed.status();
}

TEST_F(S3FileSystemTest, VirtualHostStyleAddressing) {
  ASSERT_TRUE(fs_->Write("vh/a", "path-style", WriteMode::kOverwrite).ok());
  S3Options virtual_host = options_;
  virtual_host.path_style = false;
  // Requests go to <bucket>.localhost:PORT; curl resolves it to loopback without DNS.
  std::unique_ptr<S3FileSystem> fs = Open(absl::StrCat("s3://", bucket_, "/root"), virtual_host);
  EXPECT_EQ(*fs->ReadFile("vh/a", 100), "path-style");
  ASSERT_TRUE(fs->Write("vh/b", "virtual-host", WriteMode::kCreateNew).ok());
  EXPECT_EQ(*fs_->ReadFile("vh/b", 100), "virtual-host");
  EXPECT_EQ(fs->List("vh/")->size(), 2u);
}

TEST_F(S3FileSystemTest, TheFactoryOpensTheSameStore) {
  ASSERT_TRUE(fs_->Write("via/factory", "v", WriteMode::kOverwrite).ok());
  std::string credentials = absl::StrCat(dir_, "/credentials");
  auto env = [&](absl::string_view name) -> std::optional<std::string> {
    if (name == "AWS_SHARED_CREDENTIALS_FILE") return credentials;
    if (name == "AWS_ENDPOINT_URL") return options_.endpoint;
    return std::nullopt;
  };
  // Path-style addressing comes from s3.path.style.access only; without a
  // configuration the factory uses virtual-host style, which 127.0.0.1 cannot
  // serve, so this opens with a configuration.
  absl::StatusOr<config::Configuration> config =
      config::Configuration::Load(std::nullopt, {"s3.path.style.access=true", "s3.upload.part-size=5 mb"});
  ASSERT_TRUE(config.ok()) << config.status();
  auto fs = OpenFileSystem(absl::StrCat("s3://", bucket_, "/root/"), &*config, env);
  ASSERT_TRUE(fs.ok()) << fs.status();
  EXPECT_EQ(*(*fs)->ReadFile("via/factory", 10), "v");
}

}  // namespace
}  // namespace weir::fs
