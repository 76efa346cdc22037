#include "tests/s3/s3_test_server.h"

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/fs/file_system_registry.h"
#include "common/status_macros.h"

namespace weir::testing {

absl::StatusOr<std::string> S3TestEndpoint() {
  const char* dir = std::getenv("WEIR_TEST_S3_DIR");
  if (dir == nullptr) {
    return absl::FailedPreconditionError("WEIR_TEST_S3_DIR is not set; run through ctest (fixture s3)");
  }
  std::ifstream in(absl::StrCat(dir, "/address"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string endpoint(absl::StripAsciiWhitespace(text));
  if (endpoint.empty()) return absl::FailedPreconditionError(absl::StrCat(dir, "/address is empty or missing"));
  return endpoint;
}

absl::StatusOr<config::Configuration> S3TestConfiguration(absl::string_view secret_key) {
  ASSIGN_OR_RETURN(std::string endpoint, S3TestEndpoint());
  return config::Configuration::Load(
      std::nullopt, {absl::StrCat("s3.endpoint=", endpoint), "s3.path.style.access=true",
                     absl::StrCat("s3.access-key=", kS3TestAccessKey), absl::StrCat("s3.secret-key=", secret_key)});
}

absl::StatusOr<S3TestBucket> CreateS3TestBucket(absl::string_view prefix) {
  ASSIGN_OR_RETURN(config::Configuration config, S3TestConfiguration());
  fs::ConfigureFileSystems(config);
  S3TestBucket bucket;
  bucket.name = absl::StrFormat("%s-%08x", prefix, std::random_device()());
  ASSIGN_OR_RETURN(fs::S3Options options, fs::ResolveS3Options(&config, fs::ProcessEnvironment()));
  ASSIGN_OR_RETURN(bucket.fs, fs::S3FileSystem::Open(absl::StrCat("s3://", bucket.name), std::move(options)));
  RETURN_IF_ERROR(bucket.fs->CreateBucket());
  return bucket;
}

absl::Status EmptyS3TestBucket(fs::FileSystem& bucket) {
  ASSIGN_OR_RETURN(std::vector<fs::FileInfo> left, bucket.List(""));
  std::vector<std::string> paths;
  for (const fs::FileInfo& f : left) paths.push_back(f.path);
  return bucket.DeleteMany(paths);
}

}  // namespace weir::testing
