// The abort contract between the dtrun agent and worker_runtime.
//
// Before the agent stops the workers of round N (the round every worker sees as
// TORCHELASTIC_RESTART_COUNT=N) it sets abortKey(N) = "dtrun/abort/<N>" to a short UTF-8 reason
// ("worker rank 3 exited with code 1", "node lost") in the store it serves at
// MASTER_ADDR:MASTER_PORT. It writes through a TcpStore with the default "/" key prefix, so the
// wire key is "/dtrun/abort/<N>": NOT under the workers' "/worker/attempt_<N>" prefix. Each
// worker's runtime waits for that key on a connection of its own and, when it appears, calls
// ncclCommAbort on every live communicator, so a collective blocked on a dead peer returns at once.
// Losing the store (after a short reconnect grace) counts as an abort too.
//
// Both sides include it from common/, which the agent and worker_runtime may both use; it needs
// only the standard library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dtrun::worker {

/// Prefix of every abort key; the round number (TORCHELASTIC_RESTART_COUNT) follows.
inline constexpr std::string_view kAbortKeyPrefix = "dtrun/abort/";

/// Longest reason the runtime keeps (longer ones are cut); agents should stay far below it.
inline constexpr std::size_t kMaxAbortReasonBytes = 4096;

/// "dtrun/abort/<round>": the key, before the TcpStore's "/" prefix, that stops round `round`.
inline std::string abortKey(std::int64_t round) {
  return std::string(kAbortKeyPrefix) + std::to_string(round);
}

}  // namespace dtrun::worker
