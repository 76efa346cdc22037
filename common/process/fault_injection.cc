#include "common/process/fault_injection.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>

#include "common/logging/logging.h"

namespace weir::fault {
namespace {

std::atomic<Point> configured_point{Point::kNone};
std::atomic<int64_t> configured_checkpoint{1};

const char* Name(Point p) {
  switch (p) {
    case Point::kTaskManagerAfterPreCommit: return "taskmanager-after-pre-commit";
    case Point::kTaskManagerBeforeCommit: return "taskmanager-before-commit";
    case Point::kJobManagerBeforeNotify: return "jobmanager-before-notify";
    case Point::kTaskManagerMidWriteAheadBatch: return "taskmanager-mid-write-ahead-batch";
    case Point::kTaskManagerDropNotify: return "taskmanager-drop-notify";
    case Point::kJobManagerStopBeforeStoreWrite: return "jobmanager-stop-before-store-write";
    case Point::kNone: break;
  }
  return "none";
}

}  // namespace

absl::Status Configure(const config::Configuration& config, const char* daemon) {
  namespace k = config::keys;
  const std::string point = config.GetString(k::kFaultInjectionPoint);
  Point p = Point::kNone;
  for (Point candidate : {Point::kTaskManagerAfterPreCommit, Point::kTaskManagerBeforeCommit,
                          Point::kJobManagerBeforeNotify, Point::kTaskManagerMidWriteAheadBatch,
                          Point::kTaskManagerDropNotify, Point::kJobManagerStopBeforeStoreWrite}) {
    if (point == Name(candidate)) p = candidate;
  }
  configured_point.store(p);
  configured_checkpoint.store(config.GetInt(k::kFaultInjectionCheckpoint));
  if (p == Point::kTaskManagerDropNotify) {
    logging::Get("fault")->warn(
        "FAULT INJECTION IS ON: this {} will drop the completion notifications of checkpoint {} and later "
        "('{}'), so its sinks never commit them. It is for tests only; remove test.fault-injection.point from "
        "the configuration",
        daemon, configured_checkpoint.load(), Name(p));
  } else if (p == Point::kJobManagerStopBeforeStoreWrite) {
    logging::Get("fault")->warn(
        "FAULT INJECTION IS ON: this {} will stop itself (SIGSTOP) in its first job-store write of an attempt "
        "('{}'). It is for tests only; remove test.fault-injection.point from the configuration",
        daemon, Name(p));
  } else if (p != Point::kNone) {
    logging::Get("fault")->warn(
        "FAULT INJECTION IS ON: this {} will SIGKILL itself at '{}' for checkpoint {} or later. It is for tests "
        "only; remove test.fault-injection.point from the configuration",
        daemon, Name(p), configured_checkpoint.load());
  }
  return absl::OkStatus();
}

void MaybeCrash(Point at, int64_t checkpoint_id) {
  if (at == Point::kNone || configured_point.load() != at || checkpoint_id < configured_checkpoint.load()) return;
  logging::Get("fault")->error("FAULT INJECTION: killing this process at '{}', checkpoint {}", Name(at),
                               checkpoint_id);
  logging::Get("fault")->flush();
  raise(SIGKILL);
}

void MaybeStop(Point at) {
  static std::atomic<bool> stopped{false};
  if (at == Point::kNone || configured_point.load() != at || stopped.exchange(true)) return;
  logging::Get("fault")->error("FAULT INJECTION: stopping this process at '{}' (SIGSTOP); SIGCONT resumes it",
                               Name(at));
  logging::Get("fault")->flush();
  raise(SIGSTOP);
}

bool ShouldDrop(Point at, int64_t checkpoint_id) {
  if (at == Point::kNone || configured_point.load() != at || checkpoint_id < configured_checkpoint.load()) {
    return false;
  }
  logging::Get("fault")->warn("FAULT INJECTION: dropping the completion of checkpoint {}", checkpoint_id);
  return true;
}

}  // namespace weir::fault
