#include "launcher/launch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <unistd.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <csignal>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <thread>

#include "agent/agent.h"
#include "agent/c10d_job.h"
#include "agent/etcd_job.h"
#include "agent/hosted_store.h"
#include "agent/local_job.h"
#include "common/error.h"
#include "launcher/args.h"
#include "launcher/cli.h"
#include "launcher/endpoint_check.h"
#include "launcher/logging.h"
#include "launcher/rdzv_args.h"
#include "launcher/store_command.h"
#include "launcher/torch_probe.h"
#include "rendezvous/store_server.h"

namespace dtrun::launcher {
namespace {

std::string hostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

std::set<std::string> localAddresses() {
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

std::string fullyQualifiedHostName() {
  const std::string name = hostName();
  addrinfo hints{};
  hints.ai_flags = AI_CANONNAME;
  addrinfo* res = nullptr;
  if (::getaddrinfo(name.c_str(), nullptr, &hints, &res) != 0) return name;
  std::string canon = res && res->ai_canonname ? res->ai_canonname : name;
  ::freeaddrinfo(res);
  return canon;
}

bool matchesThisMachine(const std::string& host) {
  if (host == "localhost" || isLoopbackAddress(host)) return true;
  const std::string name = hostName();
  if (host == name || host == fullyQualifiedHostName()) return true;
  const auto mine = localAddresses();
  for (const auto& addr : resolveHost(host)) {
    if (isLoopbackAddress(addr) || mine.count(addr)) return true;
  }
  return false;
}

namespace {

// --stop-on-stdin-close: the read that sees the end of standard input raises SIGTERM, which the
// agent handles like any other SIGTERM (workers stopped, exit code reported). Lives on `io`.
class StdinWatch {
 public:
  StdinWatch(boost::asio::io_context& io, spdlog::logger& log) : in_(io), log_(log) {
    int fd = ::fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3);
    boost::system::error_code ec;
    if (fd >= 0) in_.assign(fd, ec);
    if (fd < 0 || ec) {
      if (fd >= 0) ::close(fd);
      throw ConfigError(
          "--stop-on-stdin-close: standard input cannot be watched (it must be a pipe, a socket "
          "or a terminal)");
    }
    read();
  }

 private:
  void read() {
    in_.async_read_some(
        boost::asio::buffer(buf_), [this](boost::system::error_code ec, std::size_t) {
          if (ec == boost::asio::error::operation_aborted) return;
          if (!ec) return read();
          log_.warn("standard input closed (--stop-on-stdin-close): stopping the job");
          ::kill(::getpid(), SIGTERM);
        });
  }

  boost::asio::posix::stream_descriptor in_;
  spdlog::logger& log_;
  std::array<char, 256> buf_{};
};

}  // namespace

namespace {

// --rdzv-backend etcd: the client's settings from --rdzv-endpoint and --rdzv-conf (torch's etcd
// backends' key names, both spellings; docs/rendezvous.md, "The etcd backend"), the rest as the
// c10d backend's.
agent::EtcdJobOptions etcdJobOptions(const agent::LaunchConfig& config,
                                     const agent::C10dJobOptions& jc) {
  const auto& r = config.rdzv;
  agent::EtcdJobOptions o;
  const std::string protocol = confValue(r.conf, {"protocol"});
  o.client.endpoints = parseEtcdEndpoints("--rdzv-endpoint", r.etcdEndpoints, r.conf);
  o.client.tls = protocol == "https";
  o.client.cacert = confValue(r.conf, {"cacert", "ca_cert"});
  o.client.cert = confValue(r.conf, {"cert", "ssl_cert"});
  o.client.key = confValue(r.conf, {"key", "ssl_cert_key"});
  if (!o.client.tls && !(o.client.cacert + o.client.cert + o.client.key).empty()) {
    throw ConfigError(
        "--rdzv-conf: TLS files (cacert, cert, key) are given but protocol is http: add "
        "protocol=https");
  }
  o.client.user = confValue(r.conf, {"user", "username"});
  o.client.password = confValue(r.conf, {"password"});
  o.client.requestTimeout = r.heartbeatTimeout;
  o.runId = r.runId;
  o.me = jc.me;
  o.rendezvous = jc.rendezvous;
  o.keepAliveInterval = r.keepAliveInterval;
  o.keepAliveMaxAttempt = r.keepAliveMaxAttempt;
  if (const std::string q = confValue(r.conf, {"quorum_timeout"}); !q.empty()) {
    o.quorumTimeout = parseSeconds("--rdzv-conf quorum_timeout", q);
  }
  o.connectTimeout = r.heartbeatTimeout;
  o.localAddr = jc.localAddr;
  return o;
}

}  // namespace

int runLaunch(const agent::LaunchConfig& parsedConfig, const std::vector<int>& userFds) {
  // First, while this process has one thread and no sockets: the guard that kills the workers'
  // process groups if dtrun itself is killed.
  agent::OrphanGuard guard = agent::OrphanGuard::start();
  agent::LaunchConfig config = parsedConfig;
  auto agentLog = makeLogger("agent", config.logLevel);
  // The NCCL async error handling variable the workers' torch reads (launcher/torch_probe.h):
  // Python workers' interpreter is asked which torch it would import.
  std::optional<std::string> torchVersion;
  if (config.runPath || !config.noPython) {
    torchVersion = probeTorchVersion(config.python, config.baseEnv);
    agentLog->debug("workers' torch: {}", torchVersion.value_or("not found"));
  }
  addNcclAsyncErrorHandling(config.baseEnv, torchVersion);
  auto storeLog = makeLogger("store", config.logLevel);
  for (const auto& w : config.warnings) agentLog->warn("{}", w);
  if (config.ompNumThreadsSet) agentLog->warn("{}", kOmpNumThreadsNotice);
  const auto& rdzv = config.rdzv;
  const bool isStatic = rdzv.backend == "static";
  // etcd: the job lives in etcd, whose members the user runs; no agent hosts the job's store.
  const bool isEtcd = rdzv.backend == "etcd";
  // Before joining, warn when the endpoint is loopback for a multi-host job (docs/slurm.md,
  // "The loopback check").
  if (!isEtcd) warnIfEndpointIsLoopback(config, *agentLog);
  // The CLI resolved the endpoint for both backends (static: --rdzv-endpoint, else
  // --master-addr:--master-port, as torchrun's get_rdzv_endpoint).
  std::string storeHost = rendezvousHost(config);
  std::uint16_t storePort = rdzv.port;

  // The agent's io_context outlives the hosted store, whose thread may still post to it.
  boost::asio::io_context io(1);

  // A job nobody else can join (--standalone, or one node on a free port only this agent
  // knows) has a local rendezvous: no store round trip (agent/local_job.h). The store is then
  // there for the workers only, and not at all when they serve their own (--no-agent-store).
  const bool alone = !isStatic && !isEtcd && rdzv.port == 0;
  // Who serves the store: such a job itself; static: node rank 0; c10d: the agent whose
  // machine the endpoint names (or is_host), and of several agents there the first to bind.
  bool inferred = !rdzv.isHost.has_value();
  bool host = isEtcd     ? false
              : alone    ? config.agentStore
              : isStatic ? rdzv.nodeRank == 0
                         : rdzv.isHost.value_or(matchesThisMachine(storeHost));
  // Where the store listens: only a job of several nodes needs every interface. A single-node
  // job binds loopback, or the one address its endpoint names (docs/store.md, "Exposure").
  std::string storeBindHost = "0.0.0.0";
  if (alone || (rdzv.maxNodes == 1 && (storeHost == "localhost" || isLoopbackAddress(storeHost)))) {
    storeBindHost = "127.0.0.1";
  } else if (rdzv.maxNodes == 1) {
    storeBindHost = storeHost;
  }
  std::unique_ptr<agent::HostedStore> hosted;
  if (host) {
    rendezvous::StoreServerOptions options;
    options.host = storeBindHost;
    options.port = storePort;
    options.token = rdzv.token;
    for (const auto& [key, value] : rdzv.conf) {
      applyStoreConfKey(options, "--rdzv-conf " + key, key, value);  // checked when parsed
    }
    try {
      hosted = std::make_unique<agent::HostedStore>(options, storeLog);
      storePort = hosted->port();
    } catch (const ConnectionError& e) {
      if (!inferred || alone || isStatic) {
        agentLog->error("{}", e.what());
        return 1;
      }
      // Another agent on this machine was first: be its client.
      agentLog->info("rendezvous store already served on this machine ({}); joining it", e.what());
    }
  }

  // torch's static rendezvous waits for its nodes as long as its store's `timeout` (600 s), and
  // reads no join_timeout; dtrun's static backend does the same unless join_timeout is given.
  const auto joinTimeout =
      isStatic && !rdzv.conf.count("join_timeout") ? rdzv.storeTimeout : rdzv.joinTimeout;
  if (!hosted && !alone && !isEtcd)
    warnIfEndpointDoesNotResolve(storeHost, storePort, joinTimeout, *agentLog);

  agent::C10dJobOptions jc;
  jc.store.host = !hosted ? storeHost : storeBindHost == "0.0.0.0" ? "127.0.0.1" : storeBindHost;
  jc.store.port = storePort;
  jc.store.connectTimeout = joinTimeout;
  jc.store.timeout = rdzv.readTimeout;
  jc.store.token = rdzv.token;
  jc.runId = rdzv.runId;
  jc.me.host = fullyQualifiedHostName();
  jc.me.addr = rdzv.localAddr.empty() ? jc.me.host : rdzv.localAddr;
  jc.me.pid = static_cast<int>(::getpid());
  jc.me.nproc = config.nprocPerNode;
  jc.me.role = config.role;
  jc.rendezvous.minNodes = rdzv.minNodes;
  jc.rendezvous.maxNodes = rdzv.maxNodes;
  if (isStatic) jc.rendezvous.fixedRank = rdzv.nodeRank;
  jc.rendezvous.joinTimeout = joinTimeout;
  jc.rendezvous.lastCallTimeout = rdzv.lastCallTimeout;
  jc.keepAliveInterval = rdzv.keepAliveInterval;
  jc.keepAliveMaxAttempt = rdzv.keepAliveMaxAttempt;
  jc.heartbeatTimeout = rdzv.heartbeatTimeout;
  jc.agentStore = config.agentStore;
  jc.workerStore = {config.standalone ? "127.0.0.1" : storeHost, storePort};
  jc.localAddr = jc.me.addr;
  jc.hostsStore = hosted != nullptr;

  agent::AgentContext context;
  context.hostname = jc.me.host;
  context.guard = &guard;
  context.userFds = userFds;

  try {
    std::optional<StdinWatch> stdinWatch;
    if (config.stopOnStdinClose) stdinWatch.emplace(io, *agentLog);
    std::unique_ptr<agent::JobLink> job;
    if (alone) {
      agent::LocalJobOptions local;
      local.nproc = config.nprocPerNode;
      local.role = config.role;
      local.agentStore = config.agentStore;
      local.workerStore = jc.workerStore;
      local.localAddr = jc.me.addr;
      if (hosted) {
        local.setKey = [&io, store = hosted.get()](std::string key, std::string value,
                                                   std::function<void()> done) {
          store->set(std::move(key), std::move(value),
                     [&io, done = std::move(done)] { boost::asio::post(io, done); });
        };
      }
      job = std::make_unique<agent::LocalJob>(io, std::move(local));
    } else if (isEtcd) {
      job = std::make_unique<agent::EtcdJob>(io, etcdJobOptions(config, jc),
                                             makeLogger("rdzv", config.logLevel));
    } else {
      job = std::make_unique<agent::C10dJob>(io, jc, makeLogger("rdzv", config.logLevel));
    }
    agent::Agent agent(io, config, *job, context, agentLog);
    return agent.run();
  } catch (const std::exception& e) {
    agentLog->error("{}", e.what());
    return 1;
  }
}

}  // namespace dtrun::launcher
