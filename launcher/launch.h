// The main job: plan the launch (launcher/launch_plan.h), serve the store when the plan says so,
// then run the agent with the job link the plan names.
#pragma once

#include <string>
#include <vector>

#include "agent/launch_config.h"

namespace dtrun::launcher {

/// Runs the whole launch for this node; returns dtrun's exit code (0 success, 1 failure).
/// `userFds`: the descriptors the user handed dtrun (common/spawn.h inheritedDescriptors()),
/// passed on to every worker. Blocks until the job ends on this node.
int runLaunch(const agent::LaunchConfig& config, const std::vector<int>& userFds);

}  // namespace dtrun::launcher
