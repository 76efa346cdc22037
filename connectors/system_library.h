// SystemLibrary: a system library that a connector loads on first use
// (dlopen) instead of linking, so that a daemon maps it — and everything it
// depends on — only when a job uses that connector. libpq alone brings
// Kerberos, LDAP and SASL along: about 3.5 MiB of every TaskManager's
// resident memory when linked.
//
//   ASSIGN_OR_RETURN(SystemLibrary lib, SystemLibrary::Open("libpq.so.5", "libpq5", "the PostgreSQL sink"));
//   RETURN_IF_ERROR(lib.Bind("PQexec", &table.PQexec));
//
// A library opened stays loaded for the life of the process. A connector
// keeps its function table in a LazyLibrary, which loads it once; the
// table's functions are named once, in an X-macro list:
//
//   #define LIBPQ_FUNCTIONS(X) X(PQexec) X(PQfinish)
//   WEIR_SYSTEM_LIBRARY_TABLE(LibPq, LIBPQ_FUNCTIONS);
//   LazyLibrary<LibPq> libpq(WEIR_LIBPQ_SONAME, WEIR_LIBPQ_PACKAGE, "the PostgreSQL sink", LibPq::Bind);
//
// Thread-safety: Open and Bind may be called from any thread; so may
// LazyLibrary::Load and Get.
#pragma once

#include <atomic>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

// A table's member for the library function `name` (same name, its type).
#define WEIR_SYSTEM_LIBRARY_FUNCTION(name) decltype(&::name) name = nullptr;
// In a bind function with `library` and `table`: binds `name`, or returns
// the error.
#define WEIR_SYSTEM_LIBRARY_BIND(name) \
  if (absl::Status bound = library.Bind(#name, &table->name); !bound.ok()) return bound;
// struct `Table`: a member per function of FUNCTIONS (an X-macro list) and
// `static absl::Status Bind(const SystemLibrary&, Table*)` for LazyLibrary.
#define WEIR_SYSTEM_LIBRARY_TABLE(Table, FUNCTIONS)                                        \
  struct Table {                                                                           \
    FUNCTIONS(WEIR_SYSTEM_LIBRARY_FUNCTION)                                                \
    static absl::Status Bind(const ::weir::connectors::SystemLibrary& library, Table* table) { \
      FUNCTIONS(WEIR_SYSTEM_LIBRARY_BIND)                                                  \
      return absl::OkStatus();                                                             \
    }                                                                                      \
  }

namespace weir::connectors {

// For a connector opening a connection: throws unless `loaded` is OK — a
// weir::UnrecoverableError when the library is not installed or too old
// (only installing it helps, not a restart), else std::runtime_error.
// `client` names the connector's subtask.
void ThrowUnlessLoaded(const absl::Status& loaded, const std::string& client);

class SystemLibrary {
 public:
  // dlopen(`soname`). Not installed: kNotFound naming `user` (what needs it)
  // and the Debian package `package` that provides it; another failure (out
  // of memory or file descriptors): kUnavailable.
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

// LazyLibrary<Table>: a table of a system library's functions (a struct of
// function pointers), filled by `bind` the first time Load succeeds. Only a
// success is kept: after a failure the next Load tries again, so installing
// the missing package on a running TaskManager is enough.
template <typename Table>
class LazyLibrary {
 public:
  using Binder = absl::Status (*)(const SystemLibrary& library, Table* table);

  LazyLibrary(const char* soname, const char* package, const char* user, Binder bind)
      : soname_(soname), package_(package), user_(user), bind_(bind) {}

  // The table, loading the library when this is the first success.
  absl::StatusOr<const Table*> Load() {
    if (const Table* table = loaded_.load(std::memory_order_acquire)) return table;
    absl::MutexLock lock(&mu_);
    if (const Table* table = loaded_.load(std::memory_order_relaxed)) return table;
    absl::StatusOr<SystemLibrary> library = SystemLibrary::Open(soname_, package_, user_);
    if (!library.ok()) return library.status();
    Table table;
    if (absl::Status bound = bind_(*library, &table); !bound.ok()) return bound;
    table_ = table;
    loaded_.store(&table_, std::memory_order_release);
    return &table_;
  }

  // The table; only after a Load succeeded (a connection exists).
  const Table& Get() const { return *loaded_.load(std::memory_order_acquire); }

 private:
  const char* const soname_;
  const char* const package_;
  const char* const user_;
  const Binder bind_;
  absl::Mutex mu_;
  Table table_ ABSL_GUARDED_BY(mu_){};
  std::atomic<const Table*> loaded_{nullptr};  // &table_ once filled; never changes after
};

}  // namespace weir::connectors
