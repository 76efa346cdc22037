// Fuzz target: a checkpoint's _metadata file as recovery reads it. The input
// is taken twice: as the whole file (magic, version, length, payload,
// checksum: corrupt files must be refused with kDataLoss, never crash), and
// as the payload of a well-formed file, so that what comes after the checksum
// check is reached too.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "jobmanager/checkpoint/checkpoint_storage.h"
#include "tests/fuzz/scratch_dir.h"
#include "weir/v1/checkpoint.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = weir::fuzz::ScratchDir() + "/job";
  std::filesystem::remove_all(dir);
  auto storage = weir::jobmanager::checkpoint::CheckpointStorage::Open(dir);
  if (!storage.ok()) return 0;
  if (!storage->CreateCheckpointDir(1).ok()) return 0;
  {
    std::ofstream out(storage->CheckpointDir(1) + "/_metadata", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  (void)storage->ReadMetadata(1);

  weir::v1::CheckpointMetadata metadata;
  if (metadata.ParseFromArray(data, static_cast<int>(size)) && storage->CreateCheckpointDir(2).ok()) {
    metadata.set_checkpoint_id(2);
    if (storage->WriteMetadata(metadata).ok()) {
      auto read = storage->ReadMetadata(2);
      if (read.ok()) (void)storage->VerifyTaskFiles(*read);
    }
  }
  return 0;
}
