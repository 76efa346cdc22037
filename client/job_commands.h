// The job commands of `weir`: submit, list, status, cancel. Each returns the
// process exit code (0 ok, 1 failed, 2 bad usage) and writes errors to `err`
// as one line starting with "weir: ".
#pragma once

#include <ostream>

#include "client/options.h"

namespace weir::client {

int RunSubmit(const Options& options, std::ostream& out, std::ostream& err);
int RunList(const Options& options, std::ostream& out, std::ostream& err);
int RunStatus(const Options& options, std::ostream& out, std::ostream& err);
int RunCancel(const Options& options, std::ostream& out, std::ostream& err);
// weir savepoint JOB_ID [DIR]: prints the savepoint's path once written.
int RunSavepoint(const Options& options, std::ostream& out, std::ostream& err);
int RunStop(const Options& options, std::ostream& out, std::ostream& err);
// weir checkpoints JOB_ID: recent checkpoints, newest first; the one the
// current attempt restored from is marked.
int RunCheckpoints(const Options& options, std::ostream& out, std::ostream& err);

}  // namespace weir::client
