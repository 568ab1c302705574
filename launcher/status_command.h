// `dtrun status`: the job as it is now, read from its rendezvous without joining it or changing
// anything (docs/observe.md, "dtrun status"): the round, every agent's state and when it was
// last heard from, the restarts and their causes, the last failure, the world size of each
// round. Text for people (--watch redraws it in place), one JSON object for scripts (--json).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "rendezvous/job_status.h"

namespace dtrun::launcher {

/// Runs `dtrun status [options]` (argv without "dtrun status"). Returns the exit code: 0 shown,
/// 1 the job could not be read (no such job, the token refused, nothing listening: one line
/// says which), 2 a bad command line.
int runStatusCommand(const std::vector<std::string>& args,
                     const std::map<std::string, std::string>& env);

/// The status as text, about 100 columns wide: a few lines on the job, then one per agent.
/// `where` names the rendezvous ("store at host:port"), `nowMs` is the reader's clock. Pure.
std::string formatStatus(const rendezvous::JobStatus& status, const std::string& where,
                         std::int64_t nowMs);

}  // namespace dtrun::launcher
