#include "jobmanager/checkpoint/checkpoint_storage.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/crypto/sha256.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/process.h"

namespace weir::jobmanager::checkpoint {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string LittleEndian(uint64_t value, int bytes) {
  std::string out;
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
  return out;
}

// A _metadata file built by hand, to forge what WriteMetadata never writes.
std::string MetadataFile(const std::string& payload, uint32_t version = 1) {
  crypto::Sha256 sha;
  sha.Update(payload);
  return absl::StrCat("WEIRCKPT", LittleEndian(version, 4), LittleEndian(payload.size(), 8), payload,
                      sha.HexDigest());
}

class CheckpointStorageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = weir::testing::MakeTempDir("checkpoint-storage-test");
    absl::StatusOr<CheckpointStorage> storage = CheckpointStorage::Open(root_ + "/checkpoints/job-1");
    ASSERT_TRUE(storage.ok()) << storage.status();
    storage_.emplace(*std::move(storage));
  }
  void TearDown() override { fs::remove_all(root_); }

  CheckpointStorage& storage() { return *storage_; }

  // A checkpoint as the tasks and the coordinator would leave it: a task file
  // per task and, when `complete`, its _metadata.
  v1::CheckpointMetadata MakeCheckpoint(int64_t id, bool complete = true) {
    EXPECT_TRUE(storage().CreateCheckpointDir(id).ok());
    v1::CheckpointMetadata metadata;
    metadata.set_job_id("job-1");
    metadata.set_checkpoint_id(id);
    metadata.set_trigger_time_unix_ms(1000 * id);
    metadata.set_completion_time_unix_ms(1000 * id + 42);
    metadata.set_mode(v1::AT_LEAST_ONCE);
    metadata.set_max_parallelism(128);
    for (int subtask = 0; subtask < 2; ++subtask) {
      const std::string file = absl::StrCat("v1-s", subtask, ".snapshot");
      const std::string contents = absl::StrCat("state of subtask ", subtask, " at checkpoint ", id);
      WriteBytes(absl::StrCat(storage().CheckpointDir(id), "/", file), contents);
      v1::TaskStateHandle* handle = metadata.add_tasks();
      handle->set_file(file);
      handle->set_size_bytes(static_cast<int64_t>(contents.size()));
      handle->set_subtask_index(subtask);
      handle->set_parallelism(2);
      handle->add_vertex_ids(1);
      handle->set_key_group_start(subtask * 64);
      handle->set_key_group_end(subtask * 64 + 64);
    }
    if (complete) {
      EXPECT_TRUE(storage().WriteMetadata(metadata).ok());
    }
    return metadata;
  }

  std::string MetadataPath(int64_t id) { return storage().CheckpointDir(id) + "/_metadata"; }

  void ExpectDataLoss(int64_t id, const std::string& reason) {
    absl::StatusOr<v1::CheckpointMetadata> read = storage().ReadMetadata(id);
    EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss) << read.status();
    EXPECT_THAT(read.status().message(), HasSubstr(reason));
    EXPECT_THAT(read.status().message(), HasSubstr(MetadataPath(id)));
  }

  std::string root_;
  std::optional<CheckpointStorage> storage_;
};

TEST_F(CheckpointStorageTest, OpenCreatesTheJobDirectory) {
  EXPECT_TRUE(fs::is_directory(root_ + "/checkpoints/job-1"));
  EXPECT_EQ(storage().CheckpointDir(7), root_ + "/checkpoints/job-1/chk-7");
}

TEST_F(CheckpointStorageTest, OpenNamesThePathAndTheKeyWhenItCannotCreate) {
  WriteBytes(root_ + "/a-file", "x");
  absl::StatusOr<CheckpointStorage> storage = CheckpointStorage::Open(root_ + "/a-file/job-1");
  ASSERT_FALSE(storage.ok());
  EXPECT_THAT(storage.status().message(), HasSubstr(root_ + "/a-file/job-1"));
  EXPECT_THAT(storage.status().message(), HasSubstr("state.checkpoints.dir"));
}

TEST_F(CheckpointStorageTest, MetadataRoundTrip) {
  const v1::CheckpointMetadata written = MakeCheckpoint(3);
  absl::StatusOr<v1::CheckpointMetadata> read = storage().ReadMetadata(3);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->SerializeAsString(), written.SerializeAsString());
  EXPECT_EQ(read->mode(), v1::AT_LEAST_ONCE);
  EXPECT_THAT(read->tasks(), SizeIs(2));
  EXPECT_EQ(read->tasks(1).key_group_start(), 64);
  // Nothing temporary is left behind.
  EXPECT_FALSE(fs::exists(MetadataPath(3) + ".tmp"));
}

TEST_F(CheckpointStorageTest, FileLayoutIsMagicVersionLengthPayloadChecksum) {
  const v1::CheckpointMetadata written = MakeCheckpoint(1);
  const std::string payload = written.SerializeAsString();
  EXPECT_EQ(ReadBytes(MetadataPath(1)), MetadataFile(payload));
}

TEST_F(CheckpointStorageTest, MissingMetadataIsNotFound) {
  MakeCheckpoint(2, /*complete=*/false);
  EXPECT_EQ(storage().ReadMetadata(2).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(storage().ReadMetadata(99).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*storage().HasMetadata(2), false);
}

TEST_F(CheckpointStorageTest, TruncatedMetadataIsDataLoss) {
  const v1::CheckpointMetadata written = MakeCheckpoint(1);
  const std::string good = ReadBytes(MetadataPath(1));
  // Inside the header, inside the payload, and inside the checksum.
  for (size_t length : {size_t{4}, size_t{15}, size_t{20} + 3, good.size() - 1}) {
    WriteBytes(MetadataPath(1), good.substr(0, length));
    ExpectDataLoss(1, "truncated");
  }
  WriteBytes(MetadataPath(1), "");
  ExpectDataLoss(1, "truncated");
}

TEST_F(CheckpointStorageTest, FlippedByteIsAChecksumMismatch) {
  MakeCheckpoint(1);
  std::string bytes = ReadBytes(MetadataPath(1));
  bytes[20 + 5] ^= 0x01;  // in the payload
  WriteBytes(MetadataPath(1), bytes);
  ExpectDataLoss(1, "checksum mismatch");
}

TEST_F(CheckpointStorageTest, BadMagicIsDataLoss) {
  MakeCheckpoint(1);
  std::string bytes = ReadBytes(MetadataPath(1));
  bytes[0] = 'X';
  WriteBytes(MetadataPath(1), bytes);
  ExpectDataLoss(1, "magic WEIRCKPT");
}

TEST_F(CheckpointStorageTest, FutureFormatVersionIsDataLossSayingSo) {
  const v1::CheckpointMetadata written = MakeCheckpoint(1);
  WriteBytes(MetadataPath(1), MetadataFile(written.SerializeAsString(), /*version=*/2));
  ExpectDataLoss(1, "format version 2 is newer than this Weir understands (1)");
}

TEST_F(CheckpointStorageTest, UnparsablePayloadIsDataLoss) {
  MakeCheckpoint(1);
  // A valid checksum over bytes that are not a CheckpointMetadata.
  WriteBytes(MetadataPath(1), MetadataFile(std::string("\xff\xff\xff\xff\xff", 5)));
  ExpectDataLoss(1, "does not parse");
}

TEST_F(CheckpointStorageTest, MetadataOfAnotherCheckpointIsDataLoss) {
  MakeCheckpoint(3);
  MakeCheckpoint(4, /*complete=*/false);
  fs::copy_file(MetadataPath(3), MetadataPath(4));
  ExpectDataLoss(4, "metadata of checkpoint 3, not of 4");
}

TEST_F(CheckpointStorageTest, VerifyTaskFilesNamesAMissingOrWrongSizedFile) {
  const v1::CheckpointMetadata metadata = MakeCheckpoint(5);
  EXPECT_TRUE(storage().VerifyTaskFiles(metadata).ok());

  const std::string file = storage().CheckpointDir(5) + "/v1-s1.snapshot";
  WriteBytes(file, "shorter");
  absl::Status status = storage().VerifyTaskFiles(metadata);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr(file));
  EXPECT_THAT(status.message(), HasSubstr("has 7 bytes"));

  fs::remove(file);
  status = storage().VerifyTaskFiles(metadata);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr(file));
  EXPECT_THAT(status.message(), HasSubstr("missing"));
}

TEST_F(CheckpointStorageTest, VerifyTaskFilesRefusesNamesThatLeaveTheDirectory) {
  v1::CheckpointMetadata metadata = MakeCheckpoint(5);
  WriteBytes(root_ + "/checkpoints/job-1/outside", "x");
  for (const char* name : {"../outside", "/etc/passwd", ".hidden", "_metadata", ""}) {
    metadata.mutable_tasks(0)->set_file(name);
    const absl::Status status = storage().VerifyTaskFiles(metadata);
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << name;
  }
  EXPECT_TRUE(ValidateTaskFileName("v3-s12.snapshot").ok());
  EXPECT_FALSE(ValidateTaskFileName(std::string(300, 'a')).ok());
}

TEST_F(CheckpointStorageTest, ListCheckpointIdsIgnoresEverythingElse) {
  MakeCheckpoint(10);
  MakeCheckpoint(9, /*complete=*/false);
  MakeCheckpoint(2);
  const std::string dir = root_ + "/checkpoints/job-1/";
  for (const char* name : {"chk-007", "chk-", "chk-abc", "chk--3", "chk-1x", "savepoint-4", "chk-99999999999999999999"}) {
    fs::create_directory(dir + name);
  }
  WriteBytes(dir + "chk-11", "a file, not a directory");
  fs::create_directory_symlink(dir + "chk-2", dir + "chk-12");
  EXPECT_THAT(storage().ListCheckpointIds(), ElementsAre(2, 9, 10));
}

TEST_F(CheckpointStorageTest, LatestValidFallsBackAndSaysWhy) {
  MakeCheckpoint(1);
  MakeCheckpoint(2);
  MakeCheckpoint(3);
  MakeCheckpoint(4, /*complete=*/false);
  // 3's metadata is corrupt; 2's task file is gone.
  std::string bytes = ReadBytes(MetadataPath(3));
  bytes[bytes.size() - 1] = bytes[bytes.size() - 1] == 'a' ? 'b' : 'a';
  WriteBytes(MetadataPath(3), bytes);
  fs::remove(storage().CheckpointDir(2) + "/v1-s0.snapshot");

  std::vector<std::string> skipped;
  absl::StatusOr<std::optional<v1::CheckpointMetadata>> latest = storage().LatestValid(&skipped);
  ASSERT_TRUE(latest.ok()) << latest.status();
  ASSERT_TRUE(latest->has_value());
  EXPECT_EQ((*latest)->checkpoint_id(), 1);
  ASSERT_THAT(skipped, SizeIs(3));
  EXPECT_THAT(skipped[0], HasSubstr("checkpoint 4: "));
  EXPECT_THAT(skipped[0], HasSubstr("never completed"));
  EXPECT_THAT(skipped[1], HasSubstr("checkpoint 3: "));
  EXPECT_THAT(skipped[1], HasSubstr("checksum mismatch"));
  EXPECT_THAT(skipped[2], HasSubstr("checkpoint 2: "));
  EXPECT_THAT(skipped[2], HasSubstr("v1-s0.snapshot is missing"));
}

TEST_F(CheckpointStorageTest, LatestValidIsNulloptWithoutACompleteCheckpoint) {
  std::vector<std::string> skipped;
  absl::StatusOr<std::optional<v1::CheckpointMetadata>> latest = storage().LatestValid(&skipped);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_FALSE(latest->has_value());
  EXPECT_TRUE(skipped.empty());

  MakeCheckpoint(1, /*complete=*/false);
  latest = storage().LatestValid(nullptr);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_FALSE(latest->has_value());
}

TEST_F(CheckpointStorageTest, DiscardRemovesTheWholeDirectory) {
  MakeCheckpoint(1);
  fs::create_directory(storage().CheckpointDir(1) + "/rocksdb");
  WriteBytes(storage().CheckpointDir(1) + "/rocksdb/000001.sst", "sst");
  ASSERT_TRUE(storage().Discard(1).ok());
  EXPECT_FALSE(fs::exists(storage().CheckpointDir(1)));
  EXPECT_TRUE(storage().Discard(1).ok());  // idempotent
  EXPECT_TRUE(storage().ListCheckpointIds().empty());
}

TEST_F(CheckpointStorageTest, CheckpointDirectoriesAreNeverReused) {
  ASSERT_TRUE(storage().CreateCheckpointDir(1).ok());
  EXPECT_EQ(storage().CreateCheckpointDir(1).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(storage().CreateCheckpointDir(0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(storage().CreateCheckpointDir(-4).code(), absl::StatusCode::kInvalidArgument);
}

// Incremental checkpoints: a shared file is verified like a task file, and
// deleted once no complete checkpoint on disk refers to it — unless it is
// newer than the given time (an upload of a checkpoint still in progress).
TEST_F(CheckpointStorageTest, SharedFilesAreVerifiedAndCollectedWhenNoCheckpointRefersToThem) {
  fs::create_directories(storage().SharedDir());
  for (const char* name : {"a.sst", "b.sst", "c.sst", "fresh.sst"}) {
    WriteBytes(absl::StrCat(storage().SharedDir(), "/", name), name);
  }
  // Two complete checkpoints: 1 refers to a and b, 2 to b and c.
  v1::CheckpointMetadata first = MakeCheckpoint(1, false);
  first.mutable_tasks(0)->add_shared_files("a.sst");
  first.mutable_tasks(1)->add_shared_files("b.sst");
  ASSERT_TRUE(storage().WriteMetadata(first).ok());
  v1::CheckpointMetadata second = MakeCheckpoint(2, false);
  second.mutable_tasks(0)->add_shared_files("b.sst");
  second.mutable_tasks(0)->add_shared_files("c.sst");
  ASSERT_TRUE(storage().WriteMetadata(second).ok());
  EXPECT_TRUE(storage().VerifyTaskFiles(first).ok());

  // Nothing unreferenced is old enough yet.
  absl::StatusOr<int> collected = storage().CollectSharedGarbage(absl::Now() - absl::Hours(1));
  ASSERT_TRUE(collected.ok()) << collected.status();
  EXPECT_EQ(*collected, 0);
  // Checkpoint 1 discarded: a goes; b and c stay; so does everything newer
  // than the cut-off.
  ASSERT_TRUE(storage().Discard(1).ok());
  collected = storage().CollectSharedGarbage(absl::Now() + absl::Hours(1));
  ASSERT_TRUE(collected.ok()) << collected.status();
  EXPECT_EQ(*collected, 2);  // a and fresh (unreferenced, older than the cut-off)
  EXPECT_FALSE(fs::exists(storage().SharedDir() + "/a.sst"));
  EXPECT_TRUE(fs::exists(storage().SharedDir() + "/b.sst"));
  EXPECT_TRUE(fs::exists(storage().SharedDir() + "/c.sst"));
  EXPECT_TRUE(storage().VerifyTaskFiles(second).ok());

  // A checkpoint whose shared file is gone does not verify.
  fs::remove(storage().SharedDir() + "/c.sst");
  absl::Status verified = storage().VerifyTaskFiles(second);
  EXPECT_EQ(verified.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(verified.message(), HasSubstr("c.sst is missing"));

  // Metadata that cannot be read: nothing is deleted.
  WriteBytes(MetadataPath(2), "garbage");
  collected = storage().CollectSharedGarbage(absl::Now() + absl::Hours(1));
  EXPECT_FALSE(collected.ok());
  EXPECT_TRUE(fs::exists(storage().SharedDir() + "/b.sst"));
}

}  // namespace
}  // namespace weir::jobmanager::checkpoint
