// JobLibrary: a loaded job binary (a shared library built with WEIR_JOB).
//
// Load checks, in order, that the file is a loadable shared library, that it
// exports weir_job_abi and weir_job_build_v1, and that its ABI string equals
// this runtime's (same Weir headers, same compiler) — each failure with a
// message that says what to do. Build runs the job's build function.
//
// A JobGraph built from a library holds code of that library: keep the
// library alive while the graph (and anything made by its factories) lives;
// LoadedJob does that.
//
// Thread-safety: Load and Build from one thread at a time.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "weir/job_graph.h"

namespace weir {
struct JobBuildCall;
}  // namespace weir

namespace weir::jobgraph {

class JobLibrary {
 public:
  static absl::StatusOr<std::shared_ptr<JobLibrary>> Load(const std::string& path);
  ~JobLibrary();

  JobLibrary(const JobLibrary&) = delete;
  JobLibrary& operator=(const JobLibrary&) = delete;

  absl::StatusOr<JobGraph> Build(const std::vector<std::string>& args) const;

  const std::string& path() const { return path_; }

 private:
  using BuildFn = int (*)(JobBuildCall* call);
  JobLibrary(std::string path, void* handle, BuildFn build) : path_(std::move(path)), handle_(handle), build_(build) {}

  std::string path_;
  void* handle_;
  BuildFn build_;
};

// A job graph together with the library its code lives in. Members are
// destroyed in reverse order: the graph before the library.
struct LoadedJob {
  std::shared_ptr<JobLibrary> library;
  JobGraph graph;
};

absl::StatusOr<std::shared_ptr<LoadedJob>> LoadJob(const std::string& path, const std::vector<std::string>& args);

}  // namespace weir::jobgraph
