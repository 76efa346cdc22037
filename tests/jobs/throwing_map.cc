// Test job: copies a topic like kafka_copy, but its map throws on a record
// whose value is "poison". Exercises: an exception in user code fails the
// task with its message and leaves the TaskManager running. On a record
// "unrecoverable" it throws weir::UnrecoverableError: the job fails without
// a restart, whatever its restart strategy.
#include <stdexcept>

#include "weir/job.h"

namespace {

void BuildJob(weir::StreamEnvironment& env, const weir::JobArgs& args) {
  std::string brokers = args.Require("--brokers");
  auto in = weir::kafka::Source(env, {.brokers = brokers, .topics = {args.Require("--input-topic")}, .bounded = true});
  auto checked = in.Map([](weir::kafka::Record r) {
    if (r.value == "unrecoverable") {
      throw weir::UnrecoverableError("record 'unrecoverable' at offset " + std::to_string(r.offset) +
                                     " cannot be handled by any attempt");
    }
    if (r.value == "poison") throw std::runtime_error("cannot handle record 'poison' at offset " + std::to_string(r.offset));
    return r;
  });
  weir::kafka::Sink(checked.Name("Check"), {.brokers = brokers, .topic = args.Require("--output-topic")});
}

}  // namespace

WEIR_JOB(BuildJob)
