#include "connectors/system_library.h"

#include <dlfcn.h>

#include <stdexcept>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "weir/operator.h"

namespace weir::connectors {

absl::StatusOr<SystemLibrary> SystemLibrary::Open(const std::string& soname, const std::string& package,
                                                  const std::string& user) {
  void* handle = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    const std::string reason = error != nullptr ? error : "no reason given";
    if (absl::StrContains(reason, "No such file or directory")) {
      return absl::NotFoundError(absl::StrCat(user, " needs ", soname, ", which is not installed (", reason,
                                              "); install it (Debian package ", package,
                                              ") on every TaskManager (no restart needed)"));
    }
    // Out of memory or file descriptors, a damaged file: may pass.
    return absl::UnavailableError(absl::StrCat(user, " needs ", soname, ", which could not be loaded: ", reason));
  }
  return SystemLibrary(handle, soname);
}

void ThrowUnlessLoaded(const absl::Status& loaded, const std::string& client) {
  if (loaded.ok()) return;
  if (absl::IsNotFound(loaded) || absl::IsFailedPrecondition(loaded)) {
    throw UnrecoverableError(absl::StrCat(client, ": ", loaded.message(), ", then submit the job again"));
  }
  throw std::runtime_error(absl::StrCat(client, ": ", loaded.message()));
}

absl::Status SystemLibrary::Find(const char* symbol, void** address) const {
  dlerror();  // clear
  *address = dlsym(handle_, symbol);
  if (*address == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(soname_, " has no ", symbol,
                                                      ": it is older than the version Weir was built against"));
  }
  return absl::OkStatus();
}

}  // namespace weir::connectors
