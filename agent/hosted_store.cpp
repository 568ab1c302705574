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
