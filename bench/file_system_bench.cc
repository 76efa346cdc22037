// file_system_bench: writes, reads, lists and deletes files of checkpoint-like
// sizes through the FileSystem interface on S3 (a local S3Proxy, started by
// scripts/s3.sh) and on a local directory, side by side in one run, and
// prints each side's time and the ratio S3 / local.
//
//   build/bin/file_system_bench [--files N] [--part-mib P] [--local-dir DIR]
//
// The size classes, N files each unless said otherwise: 2 KiB (checkpoint
// metadata, operator state), 256 KiB (small keyed state), 4 MiB (an SST file)
// N/10, and 24 MiB (a large SST, sent as a multipart upload) N/50. Writes
// publish each file as the callers will (atomic rename with fsync locally,
// one PUT or a multipart upload on S3); reads fetch each whole file.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bench_flags.h"
#include "common/fs/local_file_system.h"
#include "common/fs/s3/s3_file_system.h"
#include "tests/testing/script_server.h"

namespace weir {
namespace {

struct SizeClass {
  const char* name;
  int64_t bytes;
  int files;
};

struct Times {
  double write_s = 0, read_s = 0, list_s = 0, delete_s = 0;
};

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

#define BENCH_CHECK(expr)                                                     \
  do {                                                                        \
    absl::Status s_ = (expr);                                                 \
    if (!s_.ok()) {                                                           \
      std::fprintf(stderr, "file_system_bench: %s\n", s_.ToString().c_str()); \
      std::exit(1);                                                           \
    }                                                                         \
  } while (false)

Times Run(fs::FileSystem& fs, const SizeClass& c, const std::string& data) {
  Times t;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < c.files; ++i) {
    BENCH_CHECK(fs.Write(absl::StrFormat("%s/%05d", c.name, i), data, fs::WriteMode::kCreateNew));
  }
  t.write_s = Seconds(start);
  start = std::chrono::steady_clock::now();
  for (int i = 0; i < c.files; ++i) {
    absl::StatusOr<std::string> read = fs.ReadFile(absl::StrFormat("%s/%05d", c.name, i), c.bytes);
    BENCH_CHECK(read.status());
    if (read->size() != data.size()) BENCH_CHECK(absl::DataLossError("short read"));
  }
  t.read_s = Seconds(start);
  start = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<fs::FileInfo>> listed = fs.List(absl::StrCat(c.name, "/"));
  BENCH_CHECK(listed.status());
  if (static_cast<int>(listed->size()) != c.files) BENCH_CHECK(absl::DataLossError("listing is short"));
  t.list_s = Seconds(start);
  std::vector<std::string> paths;
  for (const fs::FileInfo& f : *listed) paths.push_back(f.path);
  start = std::chrono::steady_clock::now();
  BENCH_CHECK(fs.DeleteMany(paths));
  t.delete_s = Seconds(start);
  return t;
}

int Main(int argc, char** argv) {
  int files = 200;
  int part_mib = 16;
  std::string local_dir;
  bench::BenchFlags flags("file_system_bench");
  flags.Int("--files", &files);
  flags.Int("--part-mib", &part_mib, 5);
  flags.String("--local-dir", &local_dir);
  if (!flags.Parse(argc, argv)) return 2;

  absl::StatusOr<std::unique_ptr<testing::ScriptServer>> server = testing::ScriptServer::Start("s3.sh");
  BENCH_CHECK(server.status());
  if (local_dir.empty()) local_dir = absl::StrCat((*server)->dir(), "-local");
  std::filesystem::remove_all(local_dir);

  absl::StatusOr<fs::S3Options> options = fs::ResolveS3Options(nullptr, [&](absl::string_view name) -> std::optional<std::string> {
    if (name == "AWS_SHARED_CREDENTIALS_FILE") return absl::StrCat((*server)->dir(), "/credentials");
    return std::nullopt;
  });
  BENCH_CHECK(options.status());
  options->endpoint = (*server)->address();
  options->path_style = true;
  options->part_size = int64_t{part_mib} << 20;
  absl::StatusOr<std::unique_ptr<fs::S3FileSystem>> s3 = fs::S3FileSystem::Open("s3://bench/checkpoints", *options);
  BENCH_CHECK(s3.status());
  BENCH_CHECK((*s3)->CreateBucket());
  absl::StatusOr<std::unique_ptr<fs::LocalFileSystem>> local = fs::LocalFileSystem::Open(local_dir);
  BENCH_CHECK(local.status());

  const std::vector<SizeClass> classes = {
      {"2KiB", 2 << 10, files},
      {"256KiB", 256 << 10, files},
      {"4MiB", 4 << 20, std::max(1, files / 10)},
      {"24MiB", 24 << 20, std::max(1, files / 50)},
  };
  std::printf("file_system_bench: S3 at %s (S3Proxy, filesystem backend in %s) beside %s; parts of %d MiB\n",
              (*server)->address().c_str(), (*server)->dir().c_str(), local_dir.c_str(), part_mib);
  std::printf("%-7s %6s | %-6s %9s %9s %9s | %7s %7s %7s %7s\n", "size", "files", "op", "local s", "s3 s", "s3 MiB/s",
              "ratio", "", "", "");
  std::mt19937_64 rng(7);
  for (const SizeClass& c : classes) {
    std::string data(static_cast<size_t>(c.bytes), '\0');
    for (auto& ch : data) ch = static_cast<char>(rng());
    Times l = Run(**local, c, data);
    Times s = Run(**s3, c, data);
    const double mib = static_cast<double>(c.bytes) * c.files / (1 << 20);
    auto row = [&](const char* op, double ls, double ss, bool rate) {
      std::printf("%-7s %6d | %-6s %9.3f %9.3f %9s | %7.2f\n", c.name, c.files, op, ls, ss,
                  rate ? absl::StrFormat("%.1f", mib / ss).c_str() : "", ss / ls);
    };
    row("write", l.write_s, s.write_s, true);
    row("read", l.read_s, s.read_s, true);
    row("list", l.list_s, s.list_s, false);
    row("delete", l.delete_s, s.delete_s, false);
  }
  std::filesystem::remove_all(local_dir);
  return 0;
}

}  // namespace
}  // namespace weir

int main(int argc, char** argv) { return weir::Main(argc, argv); }
