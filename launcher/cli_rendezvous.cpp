// The rendezvous step of the command line's resolution (launcher/cli_steps.h): the backend, the
// endpoint, the run id, the node range, --rdzv-conf, --standalone and the static backend's
// legacy options, with torchrun's rules.
#include <random>

#include "launcher/cli_steps.h"
#include "launcher/rdzv_args.h"

namespace dtrun::launcher::steps {
namespace {

using agent::LaunchConfig;

std::string uuidIntString() {
  // torch's LaunchConfig fills an empty run id with str(uuid4().int).
  std::random_device rd;
  unsigned __int128 v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 32) | rd();
  v &= ~(static_cast<unsigned __int128>(0xf000) << 64);  // version nibble
  v |= static_cast<unsigned __int128>(0x4000) << 64;
  v &= ~(static_cast<unsigned __int128>(0xc000000000000000ull));  // variant bits
  v |= static_cast<unsigned __int128>(0x8000000000000000ull);
  std::string s;
  do {
    s.insert(s.begin(), static_cast<char>('0' + static_cast<int>(v % 10)));
    v /= 10;
  } while (v != 0);
  return s;
}

// --rdzv-backend. dtrun defaults to c10d; a command line in torchrun's legacy static form
// (--master-addr/--master-port/--node-rank without --rdzv-endpoint) keeps running static, as it
// does under newest torchrun, whose auto single-node switch needs none of them.
agent::RendezvousBackend chooseBackend(const ParsedOptions& t, bool haveEndpoint,
                                       bool staticByDefault) {
  using agent::RendezvousBackend;
  if (const auto* g = t.value("rdzv_backend")) {
    // torchrun's two etcd backends (etcd: v2 API, etcd-v2: the newer one, also v2) are one
    // here, speaking etcd's v3 API (docs/rendezvous.md, "The etcd backend").
    if (g->value == "etcd" || g->value == "etcd-v2") return RendezvousBackend::kEtcd;
    if (g->value == "c10d") return RendezvousBackend::kC10d;
    if (g->value == "static") return RendezvousBackend::kStatic;
    throw UsageError(g->source + ": invalid value '" + g->value +
                     "': expected c10d, static or etcd (etcd-v2)");
  }
  // torch.distributed.launch: get_args_parser's default
  if (staticByDefault) return RendezvousBackend::kStatic;
  bool legacy = t.given("master_addr") || t.given("master_port") || t.given("node_rank");
  return !haveEndpoint && legacy ? RendezvousBackend::kStatic : RendezvousBackend::kC10d;
}

// Port 0 asks the OS for a free port, which only the agent that binds it learns.
void rejectPortZeroForSeveralNodes(const Endpoint& ep, int maxNodes, const std::string& source) {
  if (ep.port == 0 && maxNodes > 1) {
    throw UsageError(source +
                     ": port 0 with several nodes: the other nodes cannot find it; expected a "
                     "port from 1 to 65535");
  }
}

// The static backend's endpoint and checks (torchrun's get_rdzv_endpoint and the static
// handler's): --rdzv-endpoint with a port, else master_addr:master_port.
void resolveStaticEndpoint(LaunchConfig& cfg, const ParsedOptions& t, const GivenValue* endpoint,
                           const InvocationRules& rules) {
  auto& r = cfg.rdzv;
  Endpoint ep;
  if (endpoint) {
    ep = parseEndpoint(endpoint->source, endpoint->value, std::nullopt);
  } else {
    // A single node needs no port that others know: torch.distributed.launch's 29500 becomes a
    // free one, so that two such jobs on one machine do not collide.
    const bool freePort = rules.staticByDefault && r.maxNodes == 1 && !r.masterPort;
    std::string port = std::to_string(freePort ? 0 : r.masterPort.value_or(29500));
    ep = parseEndpoint("--master-addr/--master-port", r.masterAddr + ":" + port, std::nullopt);
  }
  r.host = ep.host;
  r.port = ep.port;
  std::string nodes = std::to_string(r.minNodes) + ":" + std::to_string(r.maxNodes);
  if (r.nodeRank >= r.maxNodes) {
    const GivenValue* g = t.value("node_rank");
    throw UsageError((g ? g->source : std::string("--node-rank")) + ": invalid value '" +
                     std::to_string(r.nodeRank) + "': expected an integer from 0 to " +
                     std::to_string(r.maxNodes - 1) + " (below --nnodes, static backend)");
  }
  rejectPortZeroForSeveralNodes(ep, r.maxNodes,
                                endpoint ? endpoint->source : std::string("--master-port"));
  // torch uses max_nodes as the world size and never checks the rest; say what happens.
  if (r.minNodes != r.maxNodes) {
    cfg.warnings.push_back("the static rendezvous backend waits for all " +
                           std::to_string(r.maxNodes) + " nodes of --nnodes " + nodes);
  }
  if (r.maxNodes > 1 && !t.given("node_rank")) {
    cfg.warnings.push_back("--node-rank not given: this node is node 0 of " +
                           std::to_string(r.maxNodes) + " (static rendezvous backend)");
  }
}

}  // namespace

// --nnodes, the rendezvous options, --standalone and the static backend's legacy options.
void resolveRendezvous(LaunchConfig& cfg, const ParsedOptions& t, const InvocationRules& rules) {
  auto& r = cfg.rdzv;
  if (const auto* g = t.value("nnodes")) {
    NodeRange nodes = parseNodeRange(g->source, g->value);
    r.minNodes = nodes.min;
    r.maxNodes = nodes.max;
  }
  if (const auto* g = t.value("node_rank")) {
    r.nodeRank = static_cast<int>(parseInteger(g->source, g->value, 0, 1 << 24));
  }
  if (const auto* g = t.value("master_addr")) {
    if (g->value.empty()) throw UsageError(g->source + ": expected a host name or IP address");
    r.masterAddr = g->value;
  }
  if (const auto* g = t.value("master_port")) {
    r.masterPort = static_cast<std::uint16_t>(parseInteger(g->source, g->value, 0, 65535));
  }
  if (const auto* g = t.value("local_addr")) r.localAddr = g->value;
  if (const auto* g = t.value("rdzv_id")) {
    if (g->value.find('/') != std::string::npos) {
      throw UsageError(g->source + ": invalid value '" + g->value +
                       "': expected an id without '/' (it names the log directory)");
    }
    r.runId = g->value.empty() ? uuidIntString() : g->value;
  }
  if (const auto* g = t.value("rdzv_conf")) applyRendezvousConf(r, g->source, g->value);

  const GivenValue* endpoint = t.value("rdzv_endpoint");
  if (endpoint && endpoint->value.empty()) endpoint = nullptr;  // torch: "" = not given
  r.backend = chooseBackend(t, endpoint != nullptr, rules.staticByDefault);
  cfg.standalone = t.flag("standalone");
  if (cfg.standalone) {
    // torchrun's run(): standalone overrides whatever was given.
    if (t.given("rdzv_backend") || t.given("rdzv_endpoint") || t.given("rdzv_id")) {
      cfg.warnings.push_back("--standalone ignores --rdzv-backend, --rdzv-endpoint and --rdzv-id");
    }
    // The rendezvous listens on a free port that only this agent knows: nobody else can join.
    const std::string nnodes = std::to_string(r.minNodes) + ":" + std::to_string(r.maxNodes);
    if (r.minNodes > 1) {
      throw UsageError("--standalone with --nnodes " + nnodes +
                       ": a standalone job is one node (its rendezvous is on a free local port "
                       "no other agent can know), so it would wait for nodes that can never "
                       "join; give --rdzv-endpoint instead of --standalone");
    }
    if (r.maxNodes > 1) {
      cfg.warnings.push_back("--standalone with --nnodes " + nnodes +
                             ": the rendezvous listens on a free local port that no other agent "
                             "can know, so the job runs on this node alone");
    }
    r.backend = agent::RendezvousBackend::kC10d;
    r.host = "localhost";
    r.port = 0;
    r.runId = randomUuid4();
    return;
  }
  if (r.backend == agent::RendezvousBackend::kStatic) {
    resolveStaticEndpoint(cfg, t, endpoint, rules);
    return;
  }
  if (t.given("master_addr") || t.given("master_port") || t.given("node_rank")) {
    cfg.warnings.push_back(
        "--master-addr, --master-port and --node-rank are only used by the static rendezvous "
        "backend; ignored with " +
        std::string(agent::backendName(r.backend)));
  }
  if (r.backend == agent::RendezvousBackend::kEtcd) {
    if (!endpoint) {
      throw UsageError(
          "--rdzv-backend etcd needs --rdzv-endpoint: the etcd members, comma-separated "
          "(host:port or URLs), e.g. --rdzv-endpoint=etcd1:2379,etcd2:2379,etcd3:2379");
    }
    const auto eps = parseEtcdEndpoints(endpoint->source, endpoint->value, r.conf);
    r.etcdEndpoints = endpoint->value;
    r.host = eps.front().host;
    r.port = eps.front().port;
    return;
  }
  if (endpoint) {
    Endpoint ep = parseEndpoint(endpoint->source, endpoint->value, 29400);
    rejectPortZeroForSeveralNodes(ep, r.maxNodes, endpoint->source);
    r.host = ep.host;
    r.port = ep.port;
  } else if (r.maxNodes == 1) {
    // Newest torchrun's single-node mode: nobody else joins, so a free port and a fresh id.
    r.host = "localhost";
    r.port = 0;
    if (!t.given("rdzv_id")) r.runId = randomUuid4();
  } else {
    r.host = "localhost";  // torch's default for an empty endpoint; Slurm may fill it in
    r.port = 29400;
  }
}

}  // namespace dtrun::launcher::steps
