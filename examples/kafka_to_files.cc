// kafka_to_files: writes every record of a Kafka topic into files, exactly
// once, through the two-phase-commit file sink (weir/file.h). One line per
// record: "<partition> <offset> <value>". Files become visible in DIR when
// the checkpoint that covers them completes, so the job needs checkpoints:
//
//   weir submit kafka_to_files.so -p 2 -Dexecution.checkpointing.interval=1s --
//       --brokers HOST:PORT --input-topic in --directory DIR [--bounded]
//
// With TaskManagers on more than one host, DIR must be on a file system
// they all share; one sink per directory.
#include <string>

#include "weir/file.h"
#include "weir/job.h"

namespace {

void BuildJob(weir::StreamEnvironment& env, const weir::JobArgs& args) {
  env.SetJobName("kafka_to_files");
  auto input = weir::kafka::Source(env, {.brokers = args.Require("--brokers"),
                                         .topics = {args.Require("--input-topic")},
                                         .bounded = args.Flag("--bounded")});
  input.SinkTo("Files", weir::file::ExactlyOnceFiles<weir::kafka::Record>(
                            {.directory = args.Require("--directory")}, [](const weir::kafka::Record& r) {
                              return std::to_string(r.partition) + " " + std::to_string(r.offset) + " " + r.value;
                            }));
}

}  // namespace

WEIR_JOB(BuildJob)
