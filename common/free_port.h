// pickFreePort: torchrun's get_free_port(), for the one place dtrun needs a port it does not
// listen on itself (--no-agent-store: worker rank 0 serves the store there).
#pragma once

#include <cstdint>

namespace dtrun {

/// Binds port 0 on all IPv4 addresses, reads the port back and closes. Another process may take
/// the port before it is used: torch's race too, and why agent-store mode is the default.
/// Throws dtrun::Error when no socket can be bound.
std::uint16_t pickFreePort();

}  // namespace dtrun
