#include "common/io/private_directory.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace weir::io {

absl::Status EnsurePrivateDirectory(const std::string& dir, absl::string_view config_key) {
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::UnavailableError(absl::StrCat("cannot create ", dir, ": ", std::strerror(errno)));
  }
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot inspect ", dir, ": ", std::strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(dir, " is not a directory (a symbolic link or a file is there); "
                                                      "remove it or point ", config_key, " elsewhere"));
  }
  if (st.st_uid != geteuid()) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, " belongs to user id ", st.st_uid, ", not to this process's user (", geteuid(),
                     "): what is there could have been planted; remove it or point ", config_key, " elsewhere"));
  }
  if ((st.st_mode & 0077) != 0 && chmod(dir.c_str(), 0700) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, " is open to other users and cannot be made private: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace weir::io
