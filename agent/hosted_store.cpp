#include "agent/hosted_store.h"

#include <boost/asio/post.hpp>

namespace dtrun::agent {

HostedStore::HostedStore(rendezvous::StoreServerOptions options,
                         std::shared_ptr<spdlog::logger> log)
    : log_(log), server_(io_, std::move(options), std::move(log)) {
  server_.start();
  thread_ = std::thread([this] { rendezvous::runServing(io_, *log_); });
}

HostedStore::~HostedStore() {
  boost::asio::post(io_, [this] { server_.stop(); });
  thread_.join();
}

void HostedStore::set(std::string key, std::string value, std::function<void()> done) {
  boost::asio::post(io_, [this, key = std::move(key), value = std::move(value),
                          done = std::move(done)]() mutable {
    server_.set(key, std::move(value));
    done();
  });
}

}  // namespace dtrun::agent

namespace dtrun::agent {

void HostedStore::stats(std::function<void(StoreSample)> done) {
  boost::asio::post(io_, [this, done = std::move(done)] {
    StoreSample s;
    s.connections = server_.connectionCount();
    s.keys = static_cast<std::uint64_t>(server_.keyCount());
    s.bytes = server_.storedBytes();
    const auto& byOp = server_.requests().byOp;
    for (std::size_t i = 0; i < byOp.size(); ++i) {
      if (byOp[i] != 0) {
        s.requestsByOp[rendezvous::wire::opName(static_cast<rendezvous::wire::Op>(i))] = byOp[i];
      }
    }
    done(std::move(s));
  });
}

}  // namespace dtrun::agent
