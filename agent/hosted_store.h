// HostedStore: a StoreServer on a thread of its own, for as long as the object lives. The
// launcher hosts the job's store with it (c10d backend); the etcd backend's group rank 0 hosts
// its round's worker store with it.
#pragma once

#include <spdlog/logger.h>

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "agent/metrics.h"
#include "rendezvous/store_server.h"

namespace dtrun::agent {

class HostedStore {
 public:
  /// Binds (throws ConnectionError naming host:port) and starts serving.
  HostedStore(rendezvous::StoreServerOptions options, std::shared_ptr<spdlog::logger> log);
  /// Stops the server and joins its thread.
  ~HostedStore();
  HostedStore(const HostedStore&) = delete;
  HostedStore& operator=(const HostedStore&) = delete;

  std::uint16_t port() const { return server_.endpoint().port(); }
  /// Sets `key` in the store (its thread does it), then runs `done` on that thread.
  void set(std::string key, std::string value, std::function<void()> done);
  /// The store's counters (its metrics), read on its thread and given to `done` there.
  void stats(std::function<void(StoreSample)> done);

 private:
  boost::asio::io_context io_{1};
  std::shared_ptr<spdlog::logger> log_;
  rendezvous::StoreServer server_;
  std::thread thread_;
};

}  // namespace dtrun::agent
