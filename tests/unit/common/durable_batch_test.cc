// DurableBatch: final names appear only at Sync and with their whole
// contents, an abandoned or failed batch leaves no temporary files, and the
// number of open descriptors stays bounded.
#include "common/io/durable_batch.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/io/atomic_file.h"
#include "gtest/gtest.h"

namespace weir::io {
namespace {

namespace fs = std::filesystem;

class DurableBatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "out");
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  std::string Make(const std::string& name, const std::string& contents) const {
    std::ofstream(Path(name), std::ios::binary) << contents;
    return Path(name);
  }
  std::string Read(const std::string& name) const {
    absl::StatusOr<std::string> bytes = ReadWholeFile(Path(name));
    return bytes.ok() ? *bytes : "<" + std::string(bytes.status().message()) + ">";
  }
  // Names in out/, sorted.
  std::vector<std::string> Listing() const {
    std::set<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_ / "out")) names.insert(entry.path().filename().string());
    return {names.begin(), names.end()};
  }
  static int OpenDescriptors() {
    int n = 0;
    for ([[maybe_unused]] const auto& entry : fs::directory_iterator("/proc/self/fd")) ++n;
    return n;
  }

  fs::path dir_;
};

TEST_F(DurableBatchTest, FinalNamesAppearOnlyAtSyncWithTheirWholeContents) {
  const std::string log = Make("log", "0123456789");
  const std::string table = Make("table", std::string(100000, 't'));
  DurableBatch batch;
  absl::StatusOr<int64_t> prefix = batch.Copy(log, Path("out/log"), 4);
  ASSERT_TRUE(prefix.ok()) << prefix.status();
  EXPECT_EQ(*prefix, 4);
  absl::StatusOr<int64_t> shared = batch.CopyThenRename(table, Path("out/table.tmp-1"), Path("out/table"));
  ASSERT_TRUE(shared.ok()) << shared.status();
  EXPECT_EQ(*shared, 100000);
  ASSERT_TRUE(batch.WriteAtomically(Path("out/snapshot"), "snapshot bytes").ok());
  // Before Sync: the plain copy under its name, the others only as temporary files.
  EXPECT_EQ(Listing(), (std::vector<std::string>{"log", "snapshot.tmp", "table.tmp-1"}));

  ASSERT_TRUE(batch.Sync().ok());
  EXPECT_EQ(Listing(), (std::vector<std::string>{"log", "snapshot", "table"}));
  EXPECT_EQ(Read("out/log"), "0123");
  EXPECT_EQ(Read("out/table"), std::string(100000, 't'));
  EXPECT_EQ(Read("out/snapshot"), "snapshot bytes");
  // Three files and one directory.
  EXPECT_EQ(batch.fsyncs(), 4);
}

// A staging directory (uploaded, then removed) gets links to the sources,
// not copies, and not a single fsync; a source still appended to is listed
// with the bytes that belong to the batch.
TEST_F(DurableBatchTest, AStagingBatchLinksTheSourcesWithoutSyncing) {
  const std::string log = Make("log", "0123456789");
  const std::string table = Make("table", std::string(100000, 't'));
  DurableBatch batch(/*durable=*/false);
  absl::StatusOr<int64_t> log_bytes = batch.Copy(log, Path("out/log"), 4);
  ASSERT_TRUE(log_bytes.ok()) << log_bytes.status();
  EXPECT_EQ(*log_bytes, 4);
  absl::StatusOr<int64_t> table_bytes = batch.CopyThenRename(table, Path("out/table.tmp-1"), Path("out/table"));
  ASSERT_TRUE(table_bytes.ok()) << table_bytes.status();
  EXPECT_EQ(*table_bytes, 100000);
  ASSERT_TRUE(batch.WriteAtomically(Path("out/snapshot"), "snapshot bytes").ok());
  EXPECT_EQ(Listing(), (std::vector<std::string>{"log", "snapshot.tmp", "table"}));
  ASSERT_TRUE(batch.Sync().ok());
  EXPECT_EQ(Listing(), (std::vector<std::string>{"log", "snapshot", "table"}));
  EXPECT_TRUE(fs::equivalent(log, Path("out/log")));
  EXPECT_TRUE(fs::equivalent(table, Path("out/table")));
  EXPECT_EQ(batch.linked_prefixes(), (std::map<std::string, int64_t>{{Path("out/log"), 4}}));
  // The source's first name going (a compaction) leaves the staged bytes.
  fs::remove(table);
  EXPECT_EQ(Read("out/table"), std::string(100000, 't'));
  EXPECT_EQ(Read("out/snapshot"), "snapshot bytes");
  EXPECT_EQ(batch.fsyncs(), 0);
}

TEST_F(DurableBatchTest, AStagingBatchRefusesASourceShorterThanItsLimit) {
  const std::string log = Make("log", "0123");
  DurableBatch batch(/*durable=*/false);
  absl::StatusOr<int64_t> linked = batch.Copy(log, Path("out/log"), 10);
  EXPECT_TRUE(absl::IsDataLoss(linked.status())) << linked.status();
  EXPECT_TRUE(batch.linked_prefixes().empty());
}

TEST_F(DurableBatchTest, WriteAtomicallyReplacesAnOldFileOnlyAtSync) {
  Make("out/snapshot", "old");
  DurableBatch batch;
  ASSERT_TRUE(batch.WriteAtomically(Path("out/snapshot"), "new").ok());
  EXPECT_EQ(Read("out/snapshot"), "old");
  ASSERT_TRUE(batch.Sync().ok());
  EXPECT_EQ(Read("out/snapshot"), "new");
}

TEST_F(DurableBatchTest, AnAbandonedBatchRemovesItsTemporaryFiles) {
  const std::string table = Make("table", "abc");
  {
    DurableBatch batch;
    ASSERT_TRUE(batch.CopyThenRename(table, Path("out/table.tmp-1"), Path("out/table")).ok());
    ASSERT_TRUE(batch.WriteAtomically(Path("out/snapshot"), "x").ok());
  }
  EXPECT_TRUE(Listing().empty());
}

TEST_F(DurableBatchTest, ACopyOfAMissingFileFailsAndLeavesNothing) {
  DurableBatch batch;
  absl::StatusOr<int64_t> copied = batch.Copy(Path("absent"), Path("out/absent"));
  ASSERT_FALSE(copied.ok());
  EXPECT_EQ(copied.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(copied.status().message().find(Path("absent")), std::string::npos) << copied.status();
  EXPECT_TRUE(Listing().empty());
  // A shorter file than the prefix asked for is data loss, and leaves nothing either.
  copied = batch.Copy(Make("short", "ab"), Path("out/short"), 10);
  ASSERT_FALSE(copied.ok());
  EXPECT_EQ(copied.status().code(), absl::StatusCode::kDataLoss) << copied.status();
  EXPECT_TRUE(Listing().empty());
  EXPECT_TRUE(batch.Sync().ok());
}

TEST_F(DurableBatchTest, AFailedRenameFailsSyncNamesTheFileAndRemovesTheTemporaryFiles) {
  const std::string table = Make("table", "abc");
  DurableBatch batch;
  // The final name's directory does not exist: the rename in Sync fails.
  ASSERT_TRUE(batch.CopyThenRename(table, Path("out/table.tmp-1"), Path("gone/table")).ok());
  ASSERT_TRUE(batch.WriteAtomically(Path("out/snapshot"), "x").ok());
  absl::Status synced = batch.Sync();
  ASSERT_FALSE(synced.ok());
  EXPECT_NE(synced.message().find(Path("gone/table")), std::string::npos) << synced;
  EXPECT_TRUE(Listing().empty());
}

TEST_F(DurableBatchTest, ManyFilesKeepOnlyABoundedNumberOfDescriptorsOpen) {
  const std::string source = Make("source", "payload");
  const int before = OpenDescriptors();
  DurableBatch batch;
  constexpr int kFiles = static_cast<int>(DurableBatch::kMaxOpenFiles) * 3;
  for (int i = 0; i < kFiles; ++i) {
    ASSERT_TRUE(batch.CopyThenRename(source, Path("out/f" + std::to_string(i) + ".tmp"), Path("out/f" + std::to_string(i)))
                    .ok());
    EXPECT_LE(OpenDescriptors() - before, static_cast<int>(DurableBatch::kMaxOpenFiles));
  }
  ASSERT_TRUE(batch.Sync().ok());
  EXPECT_EQ(OpenDescriptors(), before);
  EXPECT_EQ(Listing().size(), static_cast<size_t>(kFiles));
  for (int i = 0; i < kFiles; i += 37) EXPECT_EQ(Read("out/f" + std::to_string(i)), "payload");
  EXPECT_EQ(batch.fsyncs(), kFiles + 1);
}

}  // namespace
}  // namespace weir::io
