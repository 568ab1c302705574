// `dtrun timeline EVENT_LOG... -o FILE.html`: draws --event-log files on one time axis
// (launcher/timeline.h).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace dtrun::launcher {

/// Runs `dtrun timeline [options] EVENT_LOG...` (argv without "dtrun timeline"). Returns the exit
/// code: 0 written, 1 a file could not be read or written, 2 a bad command line.
int runTimelineCommand(const std::vector<std::string>& args,
                       const std::map<std::string, std::string>& env);

}  // namespace dtrun::launcher
