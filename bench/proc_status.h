// Readings of another process from /proc, for the benchmarks that sample the
// daemons they start (the reader is the daemons' own, common/process).
#pragma once

#include "common/process/proc_status.h"

namespace weir::bench {

using weir::process::ProcStatusField;

}  // namespace weir::bench
