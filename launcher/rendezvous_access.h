// How a command reaches a job's rendezvous: what the agent (launcher/launch.cpp) and `dtrun
// status` (launcher/status_command.h) both need from --rdzv-backend, --rdzv-endpoint and
// --rdzv-conf: the etcd client's settings and the store's shared secret.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "agent/launch_config.h"
#include "rendezvous/etcd/etcd_client.h"

namespace dtrun::launcher {

/// --rdzv-backend etcd: the client's members, TLS and user from r.etcdEndpoints and r.conf
/// (torch's etcd backends' key names, both spellings; docs/rendezvous.md), with
/// r.heartbeatTimeout as the request timeout. Throws ConfigError for TLS files given without
/// protocol=https, UsageError for bad endpoints.
rendezvous::etcd::ClientOptions etcdClientOptions(const agent::RendezvousConfig& r);

/// The store's shared secret (docs/store.md, "Shared secret"): --rdzv-conf token_file, else
/// DTRUN_RDZV_TOKEN_FILE, read now so that a missing or unsafe file is a usage error before
/// anything starts. The etcd backend has none: token_file is then a UsageError and the variable
/// a warning (appended to `warnings`). Returns "" when none is given.
std::string resolveStoreToken(const agent::RendezvousConfig& r,
                              const std::map<std::string, std::string>& env,
                              std::vector<std::string>& warnings);

}  // namespace dtrun::launcher
