// dtrun: the launcher executable. Subcommand `store` runs a standalone store; everything else is
// torchrun's command line.
#include <cstring>

#include "launcher/store_command.h"

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "store") == 0) {
    return dtrun::launcher::runStoreCommand(argc - 2, argv + 2);
  }
  return dtrun::launcher::runStoreCommand(0, nullptr);
}
