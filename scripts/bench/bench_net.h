// Shared set-up of the epoll load generators (store_storm, rendezvous_sim): enough descriptors
// for N connections, and the store's IPv4 address. Benchmark tools, not tests.
#pragma once

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>
#include <string>

#include "rendezvous/store_server.h"

namespace dtrun::bench {

/// Raises RLIMIT_NOFILE to its hard limit; an error message when `connections` still do not fit,
/// else "".
inline std::string reserveDescriptors(long connections, const char* what) {
  const std::uint64_t limit = rendezvous::raiseFileLimit();
  if (limit < static_cast<std::uint64_t>(connections) + 16) {
    return "RLIMIT_NOFILE " + std::to_string(limit) + " is too low for " +
           std::to_string(connections) + " " + what;
  }
  return "";
}

/// The IPv4 address of host:port; false when it does not resolve.
inline bool resolveIPv4(const std::string& host, int port, sockaddr_in* out) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res) {
    return false;
  }
  std::memcpy(out, res->ai_addr, sizeof(*out));
  ::freeaddrinfo(res);
  return true;
}

}  // namespace dtrun::bench
