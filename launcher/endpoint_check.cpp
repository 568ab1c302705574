#include "launcher/endpoint_check.h"

#include <arpa/inet.h>
#include <netdb.h>

#include <charconv>

#include "common/error.h"
#include "launcher/slurm.h"

namespace dtrun::launcher {
namespace {

using Env = std::map<std::string, std::string>;

}  // namespace

bool isLoopbackAddress(const std::string& addr) {
  in_addr v4{};
  if (::inet_pton(AF_INET, addr.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, addr.c_str(), &v6) == 1) {
    // ::1, and IPv4 loopback mapped into IPv6 (::ffff:127.x.y.z).
    return IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
  }
  return false;
}

namespace {

std::optional<int> positive(const Env& env, const char* name) {
  auto it = env.find(name);
  if (it == env.end()) return std::nullopt;
  int v = 0;
  auto [end, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
  if (ec != std::errc() || end != it->second.data() + it->second.size() || v < 1) {
    return std::nullopt;
  }
  return v;
}

}  // namespace

std::string rendezvousHost(const agent::LaunchConfig& config) {
  const auto& r = config.rdzv;
  return r.host.empty() ? "localhost" : r.host;
}

std::optional<int> slurmHostCount(const Env& env) {
  if (!env.count("SLURM_JOB_ID") && !env.count("SLURM_JOBID")) return std::nullopt;
  // Inside a step the step's own counts; in the batch script the job's.
  for (const char* name : {"SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"}) {
    if (auto n = positive(env, name)) return n;
  }
  for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
    auto it = env.find(name);
    if (it == env.end()) continue;
    try {
      auto hosts = expandHostlist(it->second);
      if (!hosts.empty()) return static_cast<int>(hosts.size());
    } catch (const ConfigError&) {
      // Unreadable: try the next variable.
    }
  }
  return std::nullopt;
}

std::optional<std::string> loopbackEndpointWarning(const agent::LaunchConfig& config,
                                                   const std::vector<std::string>& addresses) {
  if (config.standalone || config.rdzv.maxNodes <= 1) return std::nullopt;
  std::string loopback;
  for (const auto& a : addresses) {
    if (isLoopbackAddress(a)) {
      loopback = a;
      break;
    }
  }
  if (loopback.empty()) return std::nullopt;

  const std::string host = rendezvousHost(config);
  const std::string option = config.rdzv.backend == agent::RendezvousBackend::kStatic
                                 ? "--master-addr"
                                 : "--rdzv-endpoint";
  std::string what = host == loopback ? "rendezvous host " + host + " is a loopback address"
                                      : "rendezvous host " + host + " resolves to " + loopback +
                                            " (loopback) on this host";
  std::string agents = "--nnodes allows " + std::to_string(config.rdzv.maxNodes) + " agents";
  auto slurmHosts = slurmHostCount(config.baseEnv);
  if (slurmHosts) {
    if (*slurmHosts <= 1) return std::nullopt;  // every agent of this job runs on this host
    return what + ", but this Slurm job spans " + std::to_string(*slurmHosts) + " hosts and " +
           agents +
           ": agents on other hosts cannot reach a loopback address, and an agent whose "
           "resolver maps the name to itself starts a store of its own and waits alone until "
           "the join timeout (harmless only when all these hosts are this one machine). Give " +
           option +
           " a name or address that every host resolves to the rendezvous host; under srun "
           "dtrun's own choice is the first node's name, or its NodeAddr when the name does not "
           "resolve (see scontrol show node)";
  }
  // Outside Slurm nothing says how many hosts the job spans. A literal loopback address or
  // "localhost" means "this machine" on purpose; a name that resolves to loopback is the trap.
  if (host == "localhost" || isLoopbackAddress(host)) return std::nullopt;
  return what + " and " + agents +
         ": fine when every agent runs on this machine, but agents on other machines cannot "
         "reach a loopback address, and one whose resolver maps the name to itself starts a "
         "store of its own and waits alone until the join timeout. Give " +
         option + " a name or address that every machine resolves to the rendezvous host";
}

std::vector<std::string> resolveHost(const std::string& host) {
  std::vector<std::string> out;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return out;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    const void* a =
        ai->ai_family == AF_INET
            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(ai->ai_addr)->sin_addr)
            : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(ai->ai_addr)->sin6_addr);
    if (::inet_ntop(ai->ai_family, a, text, sizeof(text))) out.push_back(text);
  }
  ::freeaddrinfo(res);
  return out;
}

void warnIfEndpointDoesNotResolve(const std::string& host, std::uint16_t port,
                                  std::chrono::milliseconds timeout, spdlog::logger& log) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int gai = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (gai == 0) {
    ::freeaddrinfo(res);
    return;
  }
  log.warn(
      "rendezvous host '{}' does not resolve on this machine ({}); dtrun keeps trying to reach "
      "{}:{} until the join timeout ({} s): check the name, or give an address",
      host, ::gai_strerror(gai), host, port,
      std::chrono::ceil<std::chrono::seconds>(timeout).count());
}

void warnIfEndpointIsLoopback(const agent::LaunchConfig& config, spdlog::logger& log) {
  // Cheap checks first: no resolver call for single-agent jobs.
  if (config.standalone || config.rdzv.maxNodes <= 1) return;
  if (auto w = loopbackEndpointWarning(config, resolveHost(rendezvousHost(config)))) {
    log.warn("{}", *w);
  }
}

}  // namespace dtrun::launcher
