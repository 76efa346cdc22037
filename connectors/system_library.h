// SystemLibrary: a system library that a connector loads on first use
// (dlopen) instead of linking, so that a daemon maps it — and everything it
// depends on — only when a job uses that connector. libpq alone brings
// Kerberos, LDAP and SASL along: about 3.5 MiB of every TaskManager's
// resident memory when linked.
//
//   ASSIGN_OR_RETURN(SystemLibrary lib, SystemLibrary::Open("libpq.so.5", "libpq5", "the PostgreSQL sink"));
//   RETURN_IF_ERROR(lib.Bind("PQexec", &table.PQexec));
//
// A library opened stays loaded for the life of the process.
//
// Thread-safety: Open and Bind may be called from any thread.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace weir::connectors {

class SystemLibrary {
 public:
  // dlopen(`soname`). On failure: kFailedPrecondition naming `user` (what
  // needs it) and the Debian package `package` that provides it.
  static absl::StatusOr<SystemLibrary> Open(const std::string& soname, const std::string& package,
                                            const std::string& user);

  // Sets *fn to the library's `symbol`; kFailedPrecondition when it has none
  // (a library older than the one Weir was built against).
  template <typename F>
  absl::Status Bind(const char* symbol, F** fn) const {
    void* address = nullptr;
    absl::Status status = Find(symbol, &address);
    *fn = reinterpret_cast<F*>(address);
    return status;
  }

 private:
  SystemLibrary(void* handle, std::string soname) : handle_(handle), soname_(std::move(soname)) {}
  absl::Status Find(const char* symbol, void** address) const;

  void* handle_;
  std::string soname_;
};

}  // namespace weir::connectors
