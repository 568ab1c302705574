// `dtrun store`: a standalone store server, for users who want it on a dedicated host; and the
// store's limits, which the agent-hosted store takes from --rdzv-conf store_* keys.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "rendezvous/store_server.h"

namespace dtrun::launcher {

/// Runs `dtrun store [options]` (argv without "dtrun store") until SIGINT or SIGTERM.
/// Returns the process exit code: 0 after a signal, 1 on failure, 2 on a usage error.
int runStoreCommand(const std::vector<std::string>& args,
                    const std::map<std::string, std::string>& env);

/// Applies one --rdzv-conf key naming a store limit (store_max_key_size, store_max_value_size,
/// store_max_keys, store_max_request_size, store_max_reply_size, store_memory_quota,
/// store_frame_timeout, store_max_connections) to `options`. False for any other key;
/// UsageError naming `label` for a bad value.
bool applyStoreConfKey(rendezvous::StoreServerOptions& options, const std::string& label,
                       const std::string& key, const std::string& value);

/// The store's shared secret, read from the file at `path` (docs/store.md, "Shared secret");
/// UsageError naming `source` (the option or environment variable that gave the path) when the
/// file is missing, unsafe or too short.
std::string readToken(const std::string& source, const std::string& path);

}  // namespace dtrun::launcher
