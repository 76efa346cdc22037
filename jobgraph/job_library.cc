#include "jobgraph/job_library.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "weir/job.h"
#include "weir/version.h"

namespace weir::jobgraph {
namespace {

// Shared libraries start with the ELF magic; anything else gets a plain
// message instead of the loader's.
bool LooksLikeElf(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char magic[4] = {};
  ssize_t n = read(fd, magic, sizeof(magic));
  close(fd);
  return n == 4 && std::memcmp(magic, "\x7f" "ELF", 4) == 0;
}

}  // namespace

absl::StatusOr<std::shared_ptr<JobLibrary>> JobLibrary::Load(const std::string& path) {
  if (access(path.c_str(), R_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("cannot read job binary '", path, "': ", std::strerror(errno)));
  }
  if (!LooksLikeElf(path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", path, "' is not a job binary: not a shared library (ELF). Build the job with "
        "weir_add_job(<name> <sources>) in CMake (docs/job-authoring.md) and submit the .so it makes"));
  }
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot load job binary '", path, "': ", dlerror()));
  }
  const char* abi = static_cast<const char*>(dlsym(handle, "weir_job_abi"));
  void* build = dlsym(handle, "weir_job_build_v1");
  if (abi == nullptr || build == nullptr) {
    dlclose(handle);
    return absl::InvalidArgumentError(absl::StrCat(
        "'", path, "' is a shared library but not a Weir job: it does not export the entry point "
        "(weir_job_abi / weir_job_build_v1). Add WEIR_JOB(YourBuildFunction) to the job's source"));
  }
  if (std::strcmp(abi, WEIR_JOB_ABI) != 0) {
    std::string theirs = abi;
    dlclose(handle);
    return absl::FailedPreconditionError(absl::StrCat(
        "job binary '", path, "' was built for a different Weir job API/ABI: it has [", theirs,
        "], this runtime needs [", WEIR_JOB_ABI,
        "]. Rebuild the job against this Weir version's headers with the same compiler"));
  }
  return std::shared_ptr<JobLibrary>(new JobLibrary(path, handle, reinterpret_cast<BuildFn>(build)));
}

JobLibrary::~JobLibrary() { dlclose(handle_); }

absl::StatusOr<JobGraph> JobLibrary::Build(const std::vector<std::string>& args) const {
  JobGraph graph;
  std::string error;
  JobBuildCall call{&graph, &args, &error};
  if (build_(&call) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("the job's build function failed: ", error));
  }
  return graph;
}

absl::StatusOr<std::shared_ptr<LoadedJob>> LoadJob(const std::string& path, const std::vector<std::string>& args) {
  auto job = std::make_shared<LoadedJob>();
  ASSIGN_OR_RETURN(job->library, JobLibrary::Load(path));
  ASSIGN_OR_RETURN(job->graph, job->library->Build(args));
  return job;
}

}  // namespace weir::jobgraph
