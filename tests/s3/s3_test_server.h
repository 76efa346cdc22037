// The S3 server of the CTest fixture "s3" (S3Proxy, started by scripts/s3.sh
// in $WEIR_TEST_S3_DIR), and buckets of a test's own on it.
//
// Thread-safety: call from a test's SetUp (CreateS3TestBucket configures the
// process's FileSystems).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/config/configuration.h"
#include "common/fs/s3/s3_file_system.h"

namespace weir::testing {

// The credentials scripts/s3.sh gives the server.
inline constexpr char kS3TestAccessKey[] = "weir-test-access-key";
inline constexpr char kS3TestSecretKey[] = "weir-test-secret-key";

// The server's endpoint (http://127.0.0.1:PORT), from
// $WEIR_TEST_S3_DIR/address; kFailedPrecondition outside the fixture.
absl::StatusOr<std::string> S3TestEndpoint();

// The s3.* keys that reach the server (path-style), with `secret_key`.
absl::StatusOr<config::Configuration> S3TestConfiguration(absl::string_view secret_key = kS3TestSecretKey);

struct S3TestBucket {
  std::string name;
  std::unique_ptr<fs::S3FileSystem> fs;  // the bucket's root
};

// Configures this process's FileSystems for the server
// (fs::ConfigureFileSystems) and creates a new bucket "<prefix>-<random>".
absl::StatusOr<S3TestBucket> CreateS3TestBucket(absl::string_view prefix);

// Deletes every object in `bucket` (a test's clean-up).
absl::Status EmptyS3TestBucket(fs::FileSystem& bucket);

}  // namespace weir::testing
