#include "launcher/launch.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <csignal>
#include <functional>
#include <memory>
#include <optional>
#include <variant>

#include "agent/agent.h"
#include "agent/c10d_job.h"
#include "agent/etcd_job.h"
#include "agent/hosted_store.h"
#include "agent/local_job.h"
#include "common/error.h"
#include "common/host_port.h"
#include "common/log_text.h"
#include "launcher/cli.h"
#include "launcher/endpoint_check.h"
#include "launcher/host_facts.h"
#include "launcher/launch_plan.h"
#include "launcher/logging.h"
#include "launcher/torch_probe.h"

namespace dtrun::launcher {
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

// The job link the plan names. A waiting agent says every few seconds why it cannot reach its
// store (the endpoint, the error, until when), as the rendezvous does while waiting for nodes.
std::unique_ptr<agent::JobLink> makeJob(boost::asio::io_context& io, LaunchPlan& plan,
                                        agent::HostedStore* hosted, const std::string& logLevel,
                                        const std::shared_ptr<spdlog::logger>& log) {
  if (auto* local = std::get_if<agent::LocalJobOptions>(&plan.job)) {
    if (hosted) {
      local->setKey = [&io, hosted](std::string key, std::string value,
                                    std::function<void()> done) {
        hosted->set(std::move(key), std::move(value),
                    [&io, done = std::move(done)] { boost::asio::post(io, done); });
      };
    }
    return std::make_unique<agent::LocalJob>(io, std::move(*local));
  }
  if (auto* etcd = std::get_if<agent::EtcdJobOptions>(&plan.job)) {
    return std::make_unique<agent::EtcdJob>(io, std::move(*etcd), makeLogger("rdzv", logLevel));
  }
  auto& c10d = std::get<agent::C10dJobOptions>(plan.job);
  const std::string where = hostPortText(c10d.store.host, c10d.store.port);
  c10d.store.onWaiting = [log, where](const std::string& error,
                                      std::chrono::steady_clock::time_point until) {
    log->warn("cannot reach the rendezvous store at {} yet ({}); retrying until {}", where, error,
              wallClockText(until));
  };
  return std::make_unique<agent::C10dJob>(io, std::move(c10d), makeLogger("rdzv", logLevel));
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
  // Not for workers that get none of torchrun's variables (--worker-variables none).
  if (config.workerVariables != agent::WorkerVariables::kNone) {
    std::optional<std::string> torchVersion;
    if (config.runPath || !config.noPython) {
      torchVersion = probeTorchVersion(config.python, config.baseEnv);
      agentLog->debug("workers' torch: {}", torchVersion.value_or("not found"));
    }
    addNcclAsyncErrorHandling(config.baseEnv, torchVersion);
  }
  auto storeLog = makeLogger("store", config.logLevel);
  for (const auto& w : config.warnings) agentLog->warn("{}", w);
  if (config.ompNumThreadsSet) agentLog->warn("{}", kOmpNumThreadsNotice);

  // Every decision, from the command line and this machine's facts (launcher/launch_plan.h).
  const HostFacts facts = readHostFacts(namesToResolve(config));
  LaunchPlan plan;
  try {
    plan = planLaunch(config, facts);
  } catch (const std::exception& e) {
    agentLog->error("{}", e.what());
    return agent::endBeforeAgent(config, agent::outcomeOf(e));
  }
  if (plan.loopbackWarning) agentLog->warn("{}", *plan.loopbackWarning);

  // The agent's io_context outlives the hosted store, whose thread may still post to it.
  boost::asio::io_context io(1);
  std::unique_ptr<agent::HostedStore> hosted;
  if (plan.storeRole != StoreRole::kNone) {
    try {
      hosted = std::make_unique<agent::HostedStore>(plan.store, storeLog);
      plan.served(hosted->port());
    } catch (const ConnectionError& e) {
      if (plan.storeRole != StoreRole::kServeOrJoin) {
        agentLog->error("{}", e.what());
        return agent::endBeforeAgent(config, agent::outcomeOf(e));
      }
      // Another agent on this machine was first: be its client.
      agentLog->info("rendezvous store already served on this machine ({}); joining it", e.what());
      plan.joinInstead();
    }
  }
  if (plan.checkEndpointResolves) {
    warnIfEndpointDoesNotResolve(plan.endpointHost, plan.endpointPort, plan.joinTimeout, *agentLog);
  }

  agent::AgentContext context;
  context.hostname = facts.fqdn;
  context.guard = &guard;
  context.userFds = userFds;
  if (hosted) {
    context.storeStats = [store = hosted.get()](std::function<void(agent::StoreSample)> done) {
      store->stats(std::move(done));
    };
  }

  try {
    std::optional<StdinWatch> stdinWatch;
    if (config.stopOnStdinClose) stdinWatch.emplace(io, *agentLog);
    std::unique_ptr<agent::JobLink> job =
        makeJob(io, plan, hosted.get(), config.logLevel, agentLog);
    agent::Agent agent(io, config, *job, context, agentLog);
    return agent.run();
  } catch (const std::exception& e) {
    agentLog->error("{}", e.what());
    return agent::endBeforeAgent(config, agent::outcomeOf(e));
  }
}

}  // namespace dtrun::launcher
