// HostFacts: what the launch plan needs to know about this machine (launcher/launch_plan.h),
// read once before anything starts, so that the plan itself is a pure function tests can feed
// with any machine: its names, its interface addresses, and what the rendezvous host resolves to.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "agent/launch_config.h"

namespace dtrun::launcher {

struct HostFacts {
  std::string hostName;  ///< gethostname()
  std::string fqdn;      ///< the canonical name (Python's socket.getfqdn()), else hostName
  int pid = 0;           ///< this agent's process id
  /// Every address of this machine's interfaces, as text ("10.0.0.5", "::1", ...).
  std::set<std::string> localAddresses;
  /// What the names the plan looks at resolve to here, as text; a name that does not resolve
  /// maps to an empty list, a name not looked up is absent.
  std::map<std::string, std::vector<std::string>> resolved;

  /// The addresses `host` stands for: itself when it is an address, else what it resolved to.
  std::vector<std::string> addressesOf(const std::string& host) const;
};

/// torch's _matches_machine_hostname over `facts`: localhost, a loopback address, this
/// machine's host name or canonical name, or a name or address that resolves to one of this
/// machine's addresses (or to loopback). Pure.
bool matchesThisMachine(const HostFacts& facts, const std::string& host);

/// The names the plan of `config` looks at: the rendezvous host and "localhost" (none for a
/// job of this node alone, or etcd, whose plans resolve nothing). Pure.
std::vector<std::string> namesToResolve(const agent::LaunchConfig& config);

/// Reads this machine's facts (gethostname, getaddrinfo for the canonical name, getifaddrs)
/// and resolves `names`. Blocks on the resolver.
HostFacts readHostFacts(const std::vector<std::string>& names);

/// True when `text` is a numeric IPv4 or IPv6 address (no brackets). Pure.
bool isAddressText(const std::string& text);

}  // namespace dtrun::launcher
