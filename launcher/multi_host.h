// dtrun --hostfile, running: one ssh per host, each starting that host's agent (the command of
// launcher/multi_host_plan.h), supervised from the launching shell on one io_context thread with
// the agent's own pieces: each ssh is an agent::WorkerProcess (its exit watched through a pidfd,
// its process group stopped with SIGTERM, a grace, SIGKILL), its output goes through the agent's
// LogForwarder, its exit status is common/exit_status.h's and the signals that stop the job are
// common/signals.h's terminating set.
//
//   1. check: every host at once, `ssh HOST 'cd CWD || exit 3; test -x DTRUN || exit 4'`. A host
//      that cannot be reached (or lacks the directory or dtrun) is named in one line, and nothing
//      starts anywhere (exit code 1).
//   2. run: every host's agent at once. Each line a host prints comes back on the same stream
//      (stdout or stderr) prefixed "HOST: ", whole lines (and "\r" progress updates) in one write
//      each; a full console is waited for, not dropped.
//   3. stop: SIGINT, SIGTERM, SIGHUP or SIGQUIT to the launching dtrun close every ssh's standard
//      input; each agent runs with --stop-on-stdin-close, so it stops its workers as on SIGTERM
//      and exits, and ssh with it. The same happens to the others when a host fails, after a
//      grace that lets them finish on their own. A second signal, or agents that outlive their
//      shutdown timeout by 30 s, end the ssh processes (their agents then see their standard
//      input close just the same).
//
// The ssh processes run in their own process group, so a terminal's Ctrl-C reaches only the
// launching dtrun, which stops the job in order instead of cutting the connections. If the
// launching dtrun is killed outright, its ssh processes die with it (parent-death SIGKILL, as
// workers do), and every agent sees its standard input close all the same.
//
// The exit code is the job's: 0 when every host's agent succeeded, else the code of the first
// host that failed (an ssh failure, code 255, counts as 1).
#pragma once

#include <string>

#include "launcher/multi_host_plan.h"

namespace dtrun::launcher {

/// Runs `plan` to the end (see the file comment). Blocks; returns dtrun's exit code. Logs as
/// "[dtrun hosts]" at `logLevel`.
int runMultiHost(const MultiHostPlan& plan, const std::string& logLevel);

}  // namespace dtrun::launcher
