#include "agent/local_job.h"

#include <spdlog/sinks/null_sink.h>
#include <unistd.h>

#include <boost/asio/post.hpp>

#include "common/abort_key.h"
#include "common/free_port.h"
#include "rendezvous/job_record.h"

namespace dtrun::agent {

namespace {

rendezvous::NodeInfo thisNode(const LocalJobOptions& o) {
  rendezvous::NodeInfo n;
  n.host = "localhost";
  n.addr = o.localAddr;
  n.pid = static_cast<int>(::getpid());
  n.nproc = o.nproc;
  n.role = o.role;
  return n;
}

rendezvous::RendezvousSettings oneNode() {
  rendezvous::RendezvousSettings s;
  s.minNodes = 1;
  s.maxNodes = 1;
  return s;
}

}  // namespace

LocalJob::LocalJob(boost::asio::io_context& io, LocalJobOptions options)
    // Its log lines would only repeat what the agent says of a one-node job.
    : RendezvousJob(io, std::make_shared<spdlog::logger>(
                            "local-rendezvous", std::make_shared<spdlog::sinks::null_sink_mt>())),
      options_(std::move(options)),
      store_(std::make_shared<rendezvous::InMemoryStore>()) {
  startRendezvous(store_, thisNode(options_), oneNode(), Runner::kIoThread);
}

void LocalJob::workerStore(const rendezvous::RoundInfo&,
                           std::function<void(Result<WorkerStore>)> done) {
  run<WorkerStore>(
      [this] {
        return options_.agentStore ? options_.workerStore
                                   : WorkerStore{options_.localAddr, pickFreePort()};
      },
      std::move(done));
}

void LocalJob::readRecord(std::function<void(Result<rendezvous::JobRecord>)> done) {
  run<rendezvous::JobRecord>([this] { return rendezvous::readJobRecord(*store_); },
                             std::move(done));
}

void LocalJob::abortWorkers(std::int64_t round, std::string reason, std::function<void()> done) {
  if (!options_.setKey) {
    deliver(std::move(done));
    return;
  }
  // The key as a TcpStore client writes it (its "/" prefix), which worker_runtime watches.
  options_.setKey("/" + worker::abortKey(round), reason.substr(0, worker::kMaxAbortReasonBytes),
                  [this, done = std::move(done)] { deliver(done); });
}

}  // namespace dtrun::agent
