#include "common/process/code_pages.h"

#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/process/proc_status.h"

namespace weir::process {
namespace {

struct Range {
  uintptr_t begin;
  uintptr_t end;
};

struct Collected {
  uintptr_t page_size;
  std::vector<Range> ranges;
  int objects = 0;
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

int CollectObject(dl_phdr_info* info, size_t, void* data) {
  auto* collected = static_cast<Collected*>(data);
  const std::string_view name = info->dlpi_name == nullptr ? "" : info->dlpi_name;
  // The vDSO is the kernel's own mapping, not a file.
  if (name.find("linux-vdso") != std::string_view::npos || name.find("linux-gate") != std::string_view::npos) {
    return 0;
  }
  if (HasTextRelocations(*info)) return 0;
  bool any = false;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& phdr = info->dlpi_phdr[i];
    if (phdr.p_type != PT_LOAD || (phdr.p_flags & PF_W) != 0 || phdr.p_memsz == 0) continue;
    // Whole pages inside the segment only: a page it shares with a
    // writable neighbour is left alone.
    const uintptr_t mask = collected->page_size - 1;
    const uintptr_t begin = (info->dlpi_addr + phdr.p_vaddr + mask) & ~mask;
    const uintptr_t end = (info->dlpi_addr + phdr.p_vaddr + phdr.p_memsz) & ~mask;
    if (end <= begin) continue;
    collected->ranges.push_back({begin, end});
    any = true;
  }
  if (any) ++collected->objects;
  return 0;
}

}  // namespace

absl::StatusOr<ReleasedCodePages> ReleaseCodePages() {
  Collected collected{.page_size = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE))};
  dl_iterate_phdr(&CollectObject, &collected);
  ReleasedCodePages released;
  released.objects = collected.objects;
  released.rss_file_before_kib = ProcStatusField(0, "RssFile");
  absl::Status first_refusal;
  for (const Range& range : collected.ranges) {
    if (madvise(reinterpret_cast<void*>(range.begin), range.end - range.begin, MADV_DONTNEED) == 0) {
      released.bytes_advised += static_cast<int64_t>(range.end - range.begin);
    } else if (first_refusal.ok()) {
      const int error = errno;
      first_refusal = absl::InternalError(absl::StrCat("madvise(MADV_DONTNEED) of ", range.end - range.begin,
                                                       " bytes of code pages: ", std::strerror(error)));
    }
  }
  released.rss_file_after_kib = ProcStatusField(0, "RssFile");
  if (released.bytes_advised == 0 && !first_refusal.ok()) return first_refusal;
  return released;
}

}  // namespace weir::process
