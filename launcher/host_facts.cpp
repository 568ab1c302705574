#include "launcher/host_facts.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <unistd.h>

#include <algorithm>

#include "launcher/endpoint_check.h"

namespace dtrun::launcher {
namespace {

std::string hostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

std::string canonicalName(const std::string& name) {
  addrinfo hints{};
  hints.ai_flags = AI_CANONNAME;
  addrinfo* res = nullptr;
  if (::getaddrinfo(name.c_str(), nullptr, &hints, &res) != 0) return name;
  std::string canon = res && res->ai_canonname ? res->ai_canonname : name;
  ::freeaddrinfo(res);
  return canon;
}

std::set<std::string> interfaceAddresses() {
  std::set<std::string> out;
  ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) != 0) return out;
  for (ifaddrs* i = ifs; i; i = i->ifa_next) {
    if (!i->ifa_addr) continue;
    int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    char text[INET6_ADDRSTRLEN] = {};
    const void* a =
        family == AF_INET
            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr)
            : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr);
    if (::inet_ntop(family, a, text, sizeof(text))) out.insert(text);
  }
  ::freeifaddrs(ifs);
  return out;
}

}  // namespace

bool isAddressText(const std::string& text) {
  in_addr v4{};
  in6_addr v6{};
  return ::inet_pton(AF_INET, text.c_str(), &v4) == 1 ||
         ::inet_pton(AF_INET6, text.c_str(), &v6) == 1;
}

std::vector<std::string> HostFacts::addressesOf(const std::string& host) const {
  if (isAddressText(host)) return {host};
  auto it = resolved.find(host);
  return it == resolved.end() ? std::vector<std::string>{} : it->second;
}

bool matchesThisMachine(const HostFacts& facts, const std::string& host) {
  if (host == "localhost" || isLoopbackAddress(host)) return true;
  if (host == facts.hostName || host == facts.fqdn) return true;
  const auto addrs = facts.addressesOf(host);
  return std::any_of(addrs.begin(), addrs.end(), [&](const std::string& a) {
    return isLoopbackAddress(a) || facts.localAddresses.count(a) != 0;
  });
}

std::vector<std::string> namesToResolve(const agent::LaunchConfig& config) {
  const auto& r = config.rdzv;
  // A job of this node alone tells its workers about no name but its own loopback; etcd's
  // plan hosts nothing.
  if (r.backend == agent::RendezvousBackend::kEtcd) return {};
  if (r.backend == agent::RendezvousBackend::kC10d && r.port == 0) return {};
  std::vector<std::string> names{rendezvousHost(config)};
  if (names.front() != "localhost") names.push_back("localhost");
  return names;
}

HostFacts readHostFacts(const std::vector<std::string>& names) {
  HostFacts f;
  f.hostName = hostName();
  f.fqdn = canonicalName(f.hostName);
  f.pid = static_cast<int>(::getpid());
  if (names.empty()) return f;  // nothing to match against: no interface list either
  f.localAddresses = interfaceAddresses();
  for (const auto& n : names) {
    if (!isAddressText(n)) f.resolved[n] = resolveHost(n);
  }
  return f;
}

}  // namespace dtrun::launcher
