#include "common/process/code_pages.h"

#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/process/proc_status.h"

namespace weir::process {
namespace {

// What one pass over the loaded objects released.
struct Releasing {
  uintptr_t page_size;
  int objects = 0;
  int64_t bytes_advised = 0;
  absl::Status first_refusal;
};

// True when the object's dynamic section asks the loader to relocate text
// (DT_TEXTREL, or DF_TEXTREL in DT_FLAGS): its read-only segments may hold
// written pages.
bool HasTextRelocations(const dl_phdr_info& info) {
  for (int i = 0; i < info.dlpi_phnum; ++i) {
    const ElfW(Phdr)& phdr = info.dlpi_phdr[i];
    if (phdr.p_type != PT_DYNAMIC) continue;
    const auto* dyn = reinterpret_cast<const ElfW(Dyn)*>(info.dlpi_addr + phdr.p_vaddr);
    for (; dyn->d_tag != DT_NULL; ++dyn) {
      if (dyn->d_tag == DT_TEXTREL) return true;
      if (dyn->d_tag == DT_FLAGS && (dyn->d_un.d_val & DF_TEXTREL) != 0) return true;
    }
  }
  return false;
}

// Releases one object's read-only segments. dl_iterate_phdr calls this with
// the loader's lock held, and dlclose takes an object off the list under
// that lock before unmapping it: the ranges are still the object's when
// madvise runs (released after the lock, an unloaded library's addresses
// could already hold someone's heap, and MADV_DONTNEED would zero it).
int ReleaseObject(dl_phdr_info* info, size_t, void* data) {
  auto* releasing = static_cast<Releasing*>(data);
  const std::string_view name = info->dlpi_name == nullptr ? "" : info->dlpi_name;
  // The vDSO is the kernel's own mapping, not a file.
  if (name.find("linux-vdso") != std::string_view::npos || name.find("linux-gate") != std::string_view::npos) {
    return 0;
  }
  if (HasTextRelocations(*info)) return 0;
  bool any = false;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& phdr = info->dlpi_phdr[i];
    if (phdr.p_type != PT_LOAD || (phdr.p_flags & PF_W) != 0 || phdr.p_filesz == 0) continue;
    // Whole pages inside the segment's file bytes only: a page it shares
    // with a writable neighbour, or one the loader zeroed a tail of
    // (p_memsz beyond p_filesz), is left alone.
    const uintptr_t mask = releasing->page_size - 1;
    const uintptr_t begin = (info->dlpi_addr + phdr.p_vaddr + mask) & ~mask;
    const uintptr_t end = (info->dlpi_addr + phdr.p_vaddr + std::min(phdr.p_filesz, phdr.p_memsz)) & ~mask;
    if (end <= begin) continue;
    if (madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED) == 0) {
      releasing->bytes_advised += static_cast<int64_t>(end - begin);
      any = true;
    } else if (releasing->first_refusal.ok()) {
      const int error = errno;
      releasing->first_refusal =
          absl::InternalError(absl::StrCat("madvise(MADV_DONTNEED) of ", end - begin, " bytes of code pages of '",
                                           name.empty() ? std::string("the binary") : std::string(name), "': ", std::strerror(error)));
    }
  }
  if (any) ++releasing->objects;
  return 0;
}

}  // namespace

absl::StatusOr<ReleasedCodePages> ReleaseCodePages() {
  Releasing releasing{.page_size = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE))};
  ReleasedCodePages released;
  released.rss_file_before_kib = ProcStatusField(0, "RssFile");
  dl_iterate_phdr(&ReleaseObject, &releasing);
  released.rss_file_after_kib = ProcStatusField(0, "RssFile");
  released.objects = releasing.objects;
  released.bytes_advised = releasing.bytes_advised;
  if (released.bytes_advised == 0 && !releasing.first_refusal.ok()) return releasing.first_refusal;
  return released;
}

}  // namespace weir::process
