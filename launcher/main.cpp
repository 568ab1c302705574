// dtrun: the launcher executable. `dtrun store ...` runs a standalone store; everything else is
// torchrun's command line (launcher/cli.h), run by launcher/launch.h.
#include <signal.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "common/spawn.h"
#include "launcher/cli.h"
#include "launcher/launch.h"
#include "launcher/slurm.h"
#include "launcher/store_command.h"

extern char** environ;

int main(int argc, char** argv) {
  // Before dtrun opens anything: what the user handed us is passed on to the workers, and
  // nothing else (common/spawn.h).
  const std::vector<int> userFds = dtrun::inheritedDescriptors();
  // Writes to a closed pipe (a worker's log reader gone) must fail, not kill the agent.
  ::signal(SIGPIPE, SIG_IGN);
  if (argc >= 2 && std::strcmp(argv[1], "store") == 0) {
    return dtrun::launcher::runStoreCommand(argc - 2, argv + 2);
  }
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq) env.emplace(std::string(*e, static_cast<std::size_t>(eq - *e)), std::string(eq + 1));
  }
  dtrun::agent::LaunchConfig config;
  const std::vector<std::string> args(argv + 1, argv + argc);
  try {
    // Slurm (issue 6): under srun, PET_* defaults for what args and env leave out (slurm.h).
    dtrun::launcher::applySlurmDefaults(args, env);
    config = dtrun::launcher::parseCommandLine(args, env);
  } catch (const dtrun::launcher::HelpRequested& help) {
    std::fputs(help.text().c_str(), stdout);
    return 0;
  } catch (const dtrun::launcher::UsageError& e) {
    std::fprintf(stderr, "%s\ndtrun: error: %s\n", dtrun::launcher::usageText().c_str(), e.what());
    return 2;
  }
  return dtrun::launcher::runLaunch(config, userFds);
}
