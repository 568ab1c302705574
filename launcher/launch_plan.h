// LaunchPlan: every decision a node's launch takes before anything starts, as a pure function of
// the resolved command line (LaunchConfig) and what the machine says about itself (HostFacts):
// which job link the agent uses, whether this agent serves the job's store, every address the
// store listens on, the address the agent and its workers are told to connect to, and the job
// link's options. runLaunch (launcher/launch.h) only carries the plan out.
//
// The plan keeps one invariant, which its tests check over every configuration: every address
// anyone is told to connect to is one the store listens on. A job of one node listens on exactly
// the loopback or local addresses its workers are told (127.0.0.2, ::1, the addresses a name
// resolves to), never more; a job of several nodes listens on every address, IPv6 and IPv4.
//
//   kind      store role                         listens on             agent / workers told
//   local     serve (agent-store mode) or none   127.0.0.1              127.0.0.1 / as before
//   c10d 1    serve-or-join when the endpoint    the endpoint's         the first listen addr
//   static 1  is this machine (static: rank 0)   addresses                / the endpoint
//   c10d N    the same                           "::" (dual stack)      127.0.0.1 / the endpoint
//   etcd      none (the round's rank 0 hosts     -                      etcd / per round
//             the workers' store itself)
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "agent/c10d_job.h"
#include "agent/etcd_job.h"
#include "agent/launch_config.h"
#include "agent/local_job.h"
#include "launcher/host_facts.h"
#include "rendezvous/store_server.h"

namespace dtrun::launcher {

/// Which job link the agent runs.
enum class JobKind {
  kLocal,   ///< this node alone: --standalone, or one node on a free port (agent/local_job.h)
  kC10d,    ///< dtrun's store, elastic rounds (agent/c10d_job.h)
  kStatic,  ///< dtrun's store, fixed node ranks (C10dJob with a fixed rank)
  kEtcd,    ///< an etcd cluster (agent/etcd_job.h)
};

/// Whether this agent serves the job's store.
enum class StoreRole {
  kNone,         ///< no: it is a client of the store at the endpoint (or there is none)
  kServe,        ///< yes; failing to listen ends the launch
  kServeOrJoin,  ///< yes, unless another agent on this machine listens there already: its client
};

struct LaunchPlan {
  JobKind kind = JobKind::kC10d;
  StoreRole storeRole = StoreRole::kNone;
  /// The store this agent serves (storeRole != kNone): its hosts, port, secret and limits.
  rendezvous::StoreServerOptions store;
  /// The endpoint as the command line names it (host brackets removed) and its port.
  std::string endpointHost;
  std::uint16_t endpointPort = 0;
  /// Join timeout (the static backend waits for its nodes as long as the store's `timeout`).
  std::chrono::milliseconds joinTimeout{0};
  /// Warn before joining when the endpoint does not resolve (an agent of another's store).
  bool checkEndpointResolves = false;
  /// The loopback warning for a multi-host job (launcher/endpoint_check.h), when it applies.
  std::optional<std::string> loopbackWarning;
  /// The job link's options. For a store this agent serves on a free port, the ports in them are
  /// 0 until served() says which.
  std::variant<agent::LocalJobOptions, agent::C10dJobOptions, agent::EtcdJobOptions> job;

  /// The store this agent serves listens on `port`: the agent and its workers are told it.
  void served(std::uint16_t port);
  /// Another agent on this machine serves the store already (storeRole kServeOrJoin): this
  /// agent is its client at the endpoint, as are its workers.
  void joinInstead();

  /// Where this agent connects to the job's store, and where its workers do (agent-store
  /// mode); nullopt where the job has no such store (etcd, a local job without the agent
  /// store).
  std::optional<agent::WorkerStore> agentConnects() const;
  std::optional<agent::WorkerStore> workersConnect() const;
};

/// The plan for `config` on the machine `facts` describes. Pure; throws ConfigError for what
/// only the two together can tell (an etcd endpoint list that does not parse, TLS files with
/// plain http).
LaunchPlan planLaunch(const agent::LaunchConfig& config, const HostFacts& facts);

/// True when a store listening on `listen` (StoreServerOptions::hosts) accepts a connection to
/// `host` on this machine: "::" every local address, "0.0.0.0" every local IPv4 address, an
/// address itself; a name stands for every address it resolves to, all of which must be
/// covered. Pure (what the plan's invariant means; the tests check it with this).
bool listensFor(const std::vector<std::string>& listen, const std::string& host,
                const HostFacts& facts);

}  // namespace dtrun::launcher
