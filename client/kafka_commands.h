// `weir kafka`: the few Kafka chores a Weir user has around a job, without
// Kafka's own tools — create a topic, write lines to it, read it back as a
// read_committed consumer sees it. They talk to the brokers only, not to the
// JobManager.
//
//   weir kafka create-topic --brokers B TOPIC [--partitions N] [--replication-factor R]
//   weir kafka produce --brokers B TOPIC [--keyed]     stdin lines are values ("KEY<TAB>VALUE" with --keyed)
//   weir kafka consume --brokers B TOPIC [--keyed] [--max N]
//                      everything committed up to now, from the beginning, then exits
#pragma once

#include <istream>
#include <ostream>

#include "client/options.h"

namespace weir::client {

int RunKafka(const Options& options, std::istream& in, std::ostream& out, std::ostream& err);

}  // namespace weir::client
