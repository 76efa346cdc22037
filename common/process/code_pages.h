// ReleaseCodePages: takes this process's read-only pages of code and
// constants (the binary's and every loaded shared library's) out of its
// resident set, so that what stays resident is what runs afterwards.
//
// Start-up touches code that never runs again: static initialisers of gRPC,
// protobuf and RocksDB, configuration parsing, a job's set-up. Those pages
// stay mapped, and counted in VmRSS, until the process exits, although they
// are clean copies of the files on disk. madvise(MADV_DONTNEED) on a private
// file mapping that was never written drops the process's mappings of them;
// the pages stay in the page cache (shared with every other process mapping
// the file, reclaimable by the kernel), and a later access maps them back in
// with a minor fault (no I/O while the page cache holds them).
//
// Only segments the loader maps without write permission are touched, and
// only of objects without text relocations: no page the process ever wrote
// can be dropped (that would lose the write). The vDSO is skipped.
//
// A released page is read back from its file: a binary or library
// overwritten in place (cp over it, rather than a new file renamed into
// place, as package managers do) then crashes the process at its next
// fault, as it would any process whose cold pages were evicted; and
// breakpoints a debugger wrote into released pages are gone.
//
// Thread-safety: callable from any thread at any time; other threads that
// run code in a released page fault it back in.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"

namespace weir::process {

struct ReleasedCodePages {
  int objects = 0;            // objects (binary, libraries) whose segments were released
  int64_t bytes_advised = 0;  // size of the released address ranges
  // RssFile of /proc/self/status, KiB, before and after (-1: unreadable).
  int64_t rss_file_before_kib = -1;
  int64_t rss_file_after_kib = -1;
};

// Fails only when no range could be released at all (madvise refused
// every one); the error names the first refusal.
absl::StatusOr<ReleasedCodePages> ReleaseCodePages();

}  // namespace weir::process
