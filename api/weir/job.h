// Everything a job binary needs: include this, write a build function, and
// export it with WEIR_JOB.
//
//   void BuildJob(weir::StreamEnvironment& env, const weir::JobArgs& args) {
//     auto in = weir::kafka::Source(env, {.brokers = args.Require("--brokers"), ...});
//     ...
//   }
//   WEIR_JOB(BuildJob)
//
// Build the job as a shared library against the same Weir headers and with
// the same compiler as the cluster (see docs/job-authoring.md). The build
// function runs on the client at submission and again on every TaskManager
// that runs a part of the job, so it must build the same graph for the same
// arguments and do nothing else (no I/O, no threads).
#pragma once

#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "weir/datastream.h"
#include "weir/job_graph.h"
#include "weir/kafka.h"
#include "weir/version.h"

namespace weir {

// The arguments after `--` on the weir submit command line.
// Flags take the forms `--name value`, `--name=value`, or bare `--name`.
class JobArgs {
 public:
  explicit JobArgs(std::vector<std::string> args) : args_(std::move(args)) {}

  // The value of `--name`, if given.
  std::optional<std::string> Get(std::string_view name) const {
    for (size_t i = 0; i < args_.size(); ++i) {
      const std::string& a = args_[i];
      if (a == name) {
        if (i + 1 < args_.size() && args_[i + 1].rfind("--", 0) != 0) return args_[i + 1];
        return std::string();
      }
      if (a.size() > name.size() && a.compare(0, name.size(), name) == 0 && a[name.size()] == '=') {
        return a.substr(name.size() + 1);
      }
    }
    return std::nullopt;
  }
  std::string Get(std::string_view name, std::string fallback) const {
    auto v = Get(name);
    return v.has_value() ? *v : fallback;
  }
  // The value of `--name`; throws a clear error when it is missing or empty.
  std::string Require(std::string_view name) const {
    auto v = Get(name);
    if (!v.has_value() || v->empty()) {
      throw std::invalid_argument("missing required job argument " + std::string(name) + " VALUE");
    }
    return *v;
  }
  // Whether bare `--name` (or `--name=true`) is present.
  bool Flag(std::string_view name) const {
    auto v = Get(name);
    return v.has_value() && (v->empty() || *v == "true");
  }
  const std::vector<std::string>& all() const { return args_; }

 private:
  std::vector<std::string> args_;
};

// The call a TaskManager or the client makes into a job binary.
struct JobBuildCall {
  JobGraph* graph;
  const std::vector<std::string>* args;
  std::string* error;
};

}  // namespace weir

// Exports `build_fn`, a void(weir::StreamEnvironment&, const weir::JobArgs&),
// as the job's entry point, together with the ABI it was built with.
#define WEIR_JOB(build_fn)                                                                   \
  extern "C" __attribute__((visibility("default"))) const char weir_job_abi[] = WEIR_JOB_ABI; \
  extern "C" __attribute__((visibility("default"))) int weir_job_build_v1(::weir::JobBuildCall* call) { \
    try {                                                                                    \
      ::weir::StreamEnvironment env(call->graph);                                            \
      ::weir::JobArgs args(*call->args);                                                     \
      build_fn(env, args);                                                                   \
      return 0;                                                                              \
    } catch (const std::exception& e) {                                                      \
      *call->error = e.what();                                                               \
      return 1;                                                                              \
    } catch (...) {                                                                          \
      *call->error = "the job's build function threw a non-standard exception";             \
      return 1;                                                                              \
    }                                                                                        \
  }
