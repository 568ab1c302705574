#include "launcher/launch_plan.h"

#include <algorithm>

#include "common/error.h"
#include "launcher/args.h"
#include "launcher/endpoint_check.h"
#include "launcher/rdzv_args.h"
#include "launcher/rendezvous_access.h"
#include "launcher/store_command.h"

namespace dtrun::launcher {
namespace {

using agent::LaunchConfig;
using agent::RendezvousBackend;

// A job nobody else can join: --standalone, or one node on a free port only this agent knows.
bool isAlone(const LaunchConfig& config) {
  return config.rdzv.backend == RendezvousBackend::kC10d && config.rdzv.port == 0;
}

JobKind kindOf(const LaunchConfig& config) {
  if (isAlone(config)) return JobKind::kLocal;
  switch (config.rdzv.backend) {
    case RendezvousBackend::kStatic:
      return JobKind::kStatic;
    case RendezvousBackend::kEtcd:
      return JobKind::kEtcd;
    case RendezvousBackend::kC10d:
      break;
  }
  return JobKind::kC10d;
}

// Who serves the store: a local job itself (when its workers use the agent's store); static:
// node rank 0; c10d: the agent whose machine the endpoint names (or is_host says so), and of
// several agents there the first to listen.
StoreRole roleOf(const LaunchConfig& config, JobKind kind, const HostFacts& facts) {
  switch (kind) {
    case JobKind::kLocal:
      return config.agentStore ? StoreRole::kServe : StoreRole::kNone;
    case JobKind::kStatic:
      return config.rdzv.nodeRank == 0 ? StoreRole::kServe : StoreRole::kNone;
    case JobKind::kEtcd:
      return StoreRole::kNone;
    case JobKind::kC10d:
      break;
  }
  if (config.rdzv.isHost) return *config.rdzv.isHost ? StoreRole::kServe : StoreRole::kNone;
  return matchesThisMachine(facts, rendezvousHost(config)) ? StoreRole::kServeOrJoin
                                                           : StoreRole::kNone;
}

void addUnique(std::vector<std::string>& list, const std::string& item) {
  if (std::find(list.begin(), list.end(), item) == list.end()) list.push_back(item);
}

// Where a served store listens. A job of several nodes: every address, IPv6 and IPv4. One node:
// exactly what its workers are told and what the endpoint names (each address a name resolves
// to; a name that did not resolve is left to the store's own lookup, which then fails clearly),
// and nothing else: nobody else needs to reach it (docs/store.md, "Exposure").
std::vector<std::string> listenHosts(const LaunchConfig& config, const std::string& workersTold,
                                     const HostFacts& facts) {
  if (config.rdzv.maxNodes > 1) return {"::"};
  std::vector<std::string> hosts;
  std::vector<std::string> told{workersTold};
  // --standalone's endpoint is a placeholder (localhost:0) that nobody else connects to.
  if (!config.standalone) told.push_back(rendezvousHost(config));
  for (const std::string& host : told) {
    auto addrs = facts.addressesOf(host);
    if (addrs.empty()) addrs = {host};
    for (const auto& a : addrs) addUnique(hosts, a);
  }
  return hosts;
}

// The address of a served store this agent itself connects to: loopback for a wildcard, else
// the first address it listens on.
std::string ownConnectHost(const std::vector<std::string>& listen) {
  const std::string& first = listen.front();
  if (first == "::" || first == "0.0.0.0") return "127.0.0.1";
  return first;
}

rendezvous::NodeInfo nodeInfo(const LaunchConfig& config, const HostFacts& facts) {
  rendezvous::NodeInfo me;
  me.host = facts.fqdn;
  me.addr = config.rdzv.localAddr.empty() ? facts.fqdn : config.rdzv.localAddr;
  me.pid = facts.pid;
  me.nproc = config.nprocPerNode;
  me.role = config.role;
  return me;
}

rendezvous::RendezvousSettings rendezvousSettings(const LaunchConfig& config, JobKind kind,
                                                  std::chrono::milliseconds joinTimeout) {
  const auto& r = config.rdzv;
  rendezvous::RendezvousSettings s;
  s.minNodes = r.minNodes;
  s.maxNodes = r.maxNodes;
  if (kind == JobKind::kStatic) s.fixedRank = r.nodeRank;
  s.joinTimeout = joinTimeout;
  s.lastCallTimeout = r.lastCallTimeout;
  s.maxRestarts = config.maxRestarts;
  return s;
}

agent::C10dJobOptions c10dOptions(const LaunchConfig& config, const LaunchPlan& plan,
                                  const HostFacts& facts, const std::string& workersTold) {
  const auto& r = config.rdzv;
  agent::C10dJobOptions o;
  const bool serves = plan.storeRole != StoreRole::kNone;
  o.store.host = serves ? ownConnectHost(plan.store.hosts) : plan.endpointHost;
  o.store.port = serves ? plan.store.port : plan.endpointPort;
  o.store.connectTimeout = plan.joinTimeout;
  o.store.timeout = r.readTimeout;
  o.store.token = r.token;
  o.runId = r.runId;
  o.me = nodeInfo(config, facts);
  o.rendezvous = rendezvousSettings(config, plan.kind, plan.joinTimeout);
  o.keepAliveInterval = r.keepAliveInterval;
  o.keepAliveMaxAttempt = r.keepAliveMaxAttempt;
  o.heartbeatTimeout = r.heartbeatTimeout;
  o.agentStore = config.agentStore;
  o.workerStore = {workersTold, o.store.port};
  o.localAddr = o.me.addr;
  o.hostsStore = serves;
  return o;
}

agent::LocalJobOptions localOptions(const LaunchConfig& config, const HostFacts& facts,
                                    const std::string& workersTold) {
  agent::LocalJobOptions o;
  o.nproc = config.nprocPerNode;
  o.role = config.role;
  o.agentStore = config.agentStore;
  o.workerStore = {workersTold, 0};
  o.localAddr = nodeInfo(config, facts).addr;
  return o;
}

// --rdzv-backend etcd: the client's settings from --rdzv-endpoint and --rdzv-conf (torch's etcd
// backends' key names, both spellings; docs/rendezvous.md, "The etcd backend"), the rest as the
// c10d backend's.
agent::EtcdJobOptions etcdOptions(const LaunchConfig& config, const LaunchPlan& plan,
                                  const HostFacts& facts) {
  const auto& r = config.rdzv;
  agent::EtcdJobOptions o;
  o.client = etcdClientOptions(r);  // what `dtrun status` reaches etcd with too
  o.runId = r.runId;
  o.me = nodeInfo(config, facts);
  o.rendezvous = rendezvousSettings(config, plan.kind, plan.joinTimeout);
  o.keepAliveInterval = r.keepAliveInterval;
  o.keepAliveMaxAttempt = r.keepAliveMaxAttempt;
  if (const std::string q = confValue(r.conf, {"quorum_timeout"}); !q.empty()) {
    o.quorumTimeout = parseSeconds("--rdzv-conf quorum_timeout", q);
  }
  o.connectTimeout = r.heartbeatTimeout;
  o.localAddr = o.me.addr;
  o.closeTimeout = r.closeTimeout;
  return o;
}

// The options of the store this agent serves: its addresses, the port, the secret, and the
// store_* limits of --rdzv-conf (checked when the command line was parsed).
rendezvous::StoreServerOptions storeOptions(const LaunchConfig& config,
                                            std::vector<std::string> hosts) {
  rendezvous::StoreServerOptions o;
  o.hosts = std::move(hosts);
  o.port = config.rdzv.port;
  o.token = config.rdzv.token;
  for (const auto& [key, value] : config.rdzv.conf) {
    applyStoreConfKey(o, "--rdzv-conf " + key, key, value);
  }
  return o;
}

}  // namespace

LaunchPlan planLaunch(const LaunchConfig& config, const HostFacts& facts) {
  const auto& r = config.rdzv;
  LaunchPlan plan;
  plan.kind = kindOf(config);
  plan.storeRole = roleOf(config, plan.kind, facts);
  plan.endpointHost = rendezvousHost(config);
  plan.endpointPort = r.port;
  // torch's static rendezvous waits for its nodes as long as its store's `timeout` (600 s), and
  // reads no join_timeout; dtrun's static backend does the same unless join_timeout is given.
  plan.joinTimeout = plan.kind == JobKind::kStatic && !r.conf.count("join_timeout") ? r.storeTimeout
                                                                                    : r.joinTimeout;
  plan.checkEndpointResolves = plan.storeRole == StoreRole::kNone &&
                               (plan.kind == JobKind::kC10d || plan.kind == JobKind::kStatic);
  if (plan.kind != JobKind::kEtcd) {
    plan.loopbackWarning = loopbackEndpointWarning(config, facts.addressesOf(plan.endpointHost));
  }
  // What the workers are told in agent-store mode: the endpoint, or loopback for --standalone
  // (whose endpoint is the placeholder localhost:0).
  const std::string workersTold = config.standalone ? "127.0.0.1" : plan.endpointHost;
  if (plan.storeRole != StoreRole::kNone) {
    plan.store = storeOptions(config, listenHosts(config, workersTold, facts));
  }
  switch (plan.kind) {
    case JobKind::kLocal:
      plan.job = localOptions(config, facts, workersTold);
      break;
    case JobKind::kEtcd:
      plan.job = etcdOptions(config, plan, facts);
      break;
    case JobKind::kC10d:
    case JobKind::kStatic:
      plan.job = c10dOptions(config, plan, facts, workersTold);
      break;
  }
  return plan;
}

void LaunchPlan::served(std::uint16_t port) {
  store.port = port;
  if (auto* c = std::get_if<agent::C10dJobOptions>(&job)) {
    c->store.port = port;
    c->workerStore.port = port;
  } else if (auto* l = std::get_if<agent::LocalJobOptions>(&job)) {
    l->workerStore.port = port;
  }
}

void LaunchPlan::joinInstead() {
  storeRole = StoreRole::kNone;
  if (auto* c = std::get_if<agent::C10dJobOptions>(&job)) {
    c->store.host = endpointHost;
    c->store.port = endpointPort;
    c->workerStore.port = endpointPort;
    c->hostsStore = false;
  }
}

std::optional<agent::WorkerStore> LaunchPlan::agentConnects() const {
  if (const auto* c = std::get_if<agent::C10dJobOptions>(&job)) {
    return agent::WorkerStore{c->store.host, c->store.port};
  }
  return std::nullopt;
}

std::optional<agent::WorkerStore> LaunchPlan::workersConnect() const {
  if (const auto* c = std::get_if<agent::C10dJobOptions>(&job)) {
    if (c->agentStore) return c->workerStore;
  } else if (const auto* l = std::get_if<agent::LocalJobOptions>(&job)) {
    if (l->agentStore) return l->workerStore;
  }
  return std::nullopt;
}

bool listensFor(const std::vector<std::string>& listen, const std::string& host,
                const HostFacts& facts) {
  auto isLocal = [&](const std::string& a) {
    return isLoopbackAddress(a) || facts.localAddresses.count(a) != 0;
  };
  auto covered = [&](const std::string& a) {
    for (const auto& l : listen) {
      if (l == a) return true;
      if (l == "::" && isLocal(a)) return true;
      if (l == "0.0.0.0" && isLocal(a) && a.find(':') == std::string::npos) return true;
      // A name listened on stands for what it resolves to.
      if (!isAddressText(l)) {
        const auto addrs = facts.addressesOf(l);
        if (std::find(addrs.begin(), addrs.end(), a) != addrs.end()) return true;
      }
    }
    return false;
  };
  if (std::find(listen.begin(), listen.end(), host) != listen.end()) return true;
  const auto addrs = facts.addressesOf(host);
  if (addrs.empty()) return false;
  return std::all_of(addrs.begin(), addrs.end(), covered);
}

}  // namespace dtrun::launcher
