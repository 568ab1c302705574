// `dtrun store`: a standalone store server, for users who want it on a dedicated host.
#pragma once

namespace dtrun::launcher {

/// Runs `dtrun store [options]` (argv without "dtrun store") until SIGINT or SIGTERM.
/// Returns the process exit code: 0 after a signal, 1 on failure, 2 on a usage error.
int runStoreCommand(int argc, char** argv);

}  // namespace dtrun::launcher
