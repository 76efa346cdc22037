// What every `weir` command gets: the parsed global options, and helpers
// shared by the commands.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/rpc/rpc.h"
#include "grpcpp/grpcpp.h"

namespace weir::client {

struct Options {
  std::string jobmanager;
  bool json = false;
  std::string command;
  std::vector<std::string> command_args;
};

// A channel to the JobManager. A connection attempt that gets no answer
// within 5 s (an address that drops the packets, a hung process) fails
// UNAVAILABLE, which the user is told as "cannot reach", before the call's
// own deadline would say "did not answer in time".
inline std::shared_ptr<grpc::Channel> JobManagerChannel(const Options& options) {
  return rpc::CreateChannel(options.jobmanager, /*connect_timeout_ms=*/5000);
}

// Writes "weir: <message>" and returns the exit code `code`.
inline int Fail(std::ostream& err, const std::string& message, int code = 1) {
  err << "weir: " << message << "\n";
  return code;
}

// Turns an RPC failure into the one line the user sees.
inline std::string DescribeRpcError(const Options& options, const grpc::Status& status) {
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    return absl::StrCat("cannot reach the JobManager at ", options.jobmanager, " (", status.error_message(),
                        "); is it running? Pass --jobmanager HOST:PORT or set WEIR_JOBMANAGER");
  }
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return absl::StrCat("the JobManager at ", options.jobmanager, " did not answer in time (",
                        status.error_message(), ")");
  }
  if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
    return absl::StrCat("the JobManager at ", options.jobmanager, " refused the call: ", status.error_message());
  }
  if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
    return absl::StrCat("the server at ", options.jobmanager,
                        " does not serve this call: it is not a Weir JobManager of this version (a TaskManager's "
                        "port?); the JobManager listens on jobmanager.rpc.port, 6123 by default");
  }
  if (status.error_message().empty()) {
    return absl::StrCat("the call to the JobManager at ", options.jobmanager, " failed with gRPC status ",
                        static_cast<int>(status.error_code()));
  }
  return status.error_message();
}

inline void SetDeadline(grpc::ClientContext* context, std::chrono::seconds timeout = std::chrono::seconds(10)) {
  context->set_deadline(std::chrono::system_clock::now() + timeout);
}

}  // namespace weir::client
