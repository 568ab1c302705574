// The main job: host the store when this node is the rendezvous host, then run the agent.
#pragma once

#include <string>
#include <vector>

#include "agent/launch_config.h"

namespace dtrun::launcher {

/// Runs the whole launch for this node; returns dtrun's exit code (0 success, 1 failure).
/// `userFds`: the descriptors the user handed dtrun (common/spawn.h inheritedDescriptors()),
/// passed on to every worker. Blocks until the job ends on this node.
int runLaunch(const agent::LaunchConfig& config, const std::vector<int>& userFds);

/// torch's _matches_machine_hostname: localhost, a loopback address, this machine's host name
/// or canonical name, or a name or address that resolves to one of this machine's addresses.
bool matchesThisMachine(const std::string& host);

/// This machine's fully qualified name (Python's socket.getfqdn()), else its host name.
std::string fullyQualifiedHostName();

}  // namespace dtrun::launcher
