// hostlist_probe EXPRESSION: prints dtrun's expansion of a Slurm hostlist, one host per line, or
// "error: <why>" when dtrun refuses it. run_case.sh hostlist_oracle compares it with
// `scontrol show hostnames`.
#include <cstdio>

#include "launcher/slurm.h"
#include "common/error.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: hostlist_probe EXPRESSION\n");
    return 2;
  }
  try {
    for (const auto& host : dtrun::launcher::expandHostlist(argv[1])) {
      std::printf("%s\n", host.c_str());
    }
  } catch (const dtrun::ConfigError& e) {
    std::printf("error: %s\n", e.what());
  }
  return 0;
}
