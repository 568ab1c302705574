// How dtrun names an agent to the other agents: "host:pid", and "host:pid:nonce" where two
// incarnations must be told apart (a restarted container may get the same host name and pid).
// The rendezvous, the etcd backend's members and the store's writer records use these.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace dtrun {

/// `digits` random lowercase hex digits from std::random_device, new on every call. Any thread.
std::string randomHex(std::size_t digits);

/// An agent's nonce: 8 random hex digits (randomHex(8)). Any thread.
std::string makeNonce();

/// "host:pid", or "host:pid:nonce" when `nonce` is not empty. Pure.
std::string nodeId(std::string_view host, int pid, std::string_view nonce = {});

}  // namespace dtrun
