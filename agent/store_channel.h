// StoreChannel: one connection to dtrun's store, driven on the agent's io_context, so that the
// agent's heartbeat and its watch on the job never queue behind the blocking rendezvous thread
// (docs/agent.md, "Threads").
//
// It takes over a socket that a TcpStore connected and authenticated (TcpStore::detachSocket),
// and speaks the torch 2.x protocol on it. Requests go out one at a time, each with its own
// deadline; a reply completes its handler. Every handler runs on the io thread, once: with the
// result, or with an error when the deadline passed, the connection broke or close() was called.
// After the first error the channel is closed for good.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "rendezvous/store.h"
#include "rendezvous/wire.h"

namespace dtrun::agent {

class StoreChannel {
 public:
  /// "" on success, else why the request failed (the channel is closed then).
  using Done = std::function<void(const std::string& error)>;

  /// Owns `fd` (a connected, handshaken socket). Keys are sent as keyPrefix + key, as TcpStore
  /// does. `address` names the store in messages.
  StoreChannel(boost::asio::io_context& io, int fd, std::string address, std::string keyPrefix);
  /// close().
  ~StoreChannel();
  StoreChannel(const StoreChannel&) = delete;
  StoreChannel& operator=(const StoreChannel&) = delete;

  /// PING round trip within `timeout`.
  void ping(std::chrono::milliseconds timeout, Done done);
  /// ADD_ON_CLOSE(key, delta), confirmed by a PING within `timeout`.
  void addOnClose(const std::string& key, std::int64_t delta, std::chrono::milliseconds timeout,
                  Done done);
  /// SET(key, value), confirmed by a PING within `timeout`.
  void set(const std::string& key, const rendezvous::Bytes& value,
           std::chrono::milliseconds timeout, Done done);
  /// ADD(key, 0): the counter's value as text ("0" when absent), within `timeout`.
  void read(const std::string& key, std::chrono::milliseconds timeout,
            std::function<void(const std::string& error, rendezvous::Bytes value)> done);
  /// Waits (no deadline) until `key` holds something other than `old`, then GETs it.
  void waitChange(const std::string& key, const rendezvous::Bytes& old,
                  std::function<void(const std::string& error, rendezvous::Bytes value)> done);
  /// Closes the socket; every pending handler runs now with an error. Io thread.
  void close();

 private:
  struct State;
  std::shared_ptr<State> state_;  // shared with the handlers in flight
};

}  // namespace dtrun::agent
