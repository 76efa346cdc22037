// weir: the command-line client of a Weir cluster.
#include <iostream>

#include "client/cli.h"
#include "common/logging/logging.h"

int main(int argc, char** argv) {
  weir::logging::DropGrpcLogs();
  std::vector<std::string> args(argv + 1, argv + argc);
  return weir::client::RunCli(args, std::cout, std::cerr);
}
