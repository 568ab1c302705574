// The rendezvous options' values: --nnodes, --rdzv-endpoint (--master-addr/--master-port),
// --rdzv-conf and etcd's member list, read with torch's rules, each error one UsageError line
// naming the option (launcher/args.h's convention).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/launch_config.h"
#include "launcher/args.h"
#include "rendezvous/etcd/http_connection.h"

namespace dtrun::launcher {

/// Node counts of --nnodes.
struct NodeRange {
  int min = 1;
  int max = 1;
};

/// Parses --nnodes: "N" or "MIN:MAX" with 0 < MIN <= MAX.
NodeRange parseNodeRange(const std::string& option, const std::string& text);

/// A rendezvous endpoint after torch's parse_rendezvous_endpoint: brackets of [v6] removed.
struct Endpoint {
  std::string host;
  std::uint16_t port = 0;
};

/// Parses host[:port] or [v6][:port] with torch's rules (parse_rendezvous_endpoint in
/// torch/distributed/elastic/rendezvous/utils.py): surrounding blanks ignored;
/// "" -> localhost; the port is 1-5 digits below 65536; the host matches ^[A-Za-z0-9_.:-]+$.
/// Without a port, `defaultPort` is used, or a UsageError is thrown when there is none.
Endpoint parseEndpoint(const std::string& option, const std::string& text,
                       std::optional<std::uint16_t> defaultPort);

/// Parses --rdzv-conf as torch's _parse_rendezvous_config: "k1=v1,k2=v2", blanks around keys and
/// values dropped, values kept as strings; an empty key or value is an error.
std::map<std::string, std::string> parseKeyValueList(const std::string& option,
                                                     const std::string& text);

/// --rdzv-backend etcd: the members listed in --rdzv-endpoint (`option` names it), whose URL
/// schemes must agree with --rdzv-conf protocol (`conf`, default http). Throws UsageError.
std::vector<rendezvous::etcd::Endpoint> parseEtcdEndpoints(
    const std::string& option, const std::string& text,
    const std::map<std::string, std::string>& conf);

/// The value of the first of `keys` given in --rdzv-conf (torch's etcd backends spell some
/// keys two ways: cacert/ca_cert, cert/ssl_cert, key/ssl_cert_key), or "".
std::string confValue(const std::map<std::string, std::string>& conf,
                      std::initializer_list<const char*> keys);

/// Parses --rdzv-conf into `r`: every key goes to r.conf as given, and torch's keys (those of
/// torch/distributed/elastic/rendezvous/dynamic_rendezvous.py and c10d_rendezvous_backend.py:
/// *_timeout and keep_alive_interval in seconds, keep_alive_max_attempt >= 1, is_host, use_libuv,
/// store_type=tcp) set the typed fields. Errors name "<option> <key>".
void applyRendezvousConf(agent::RendezvousConfig& r, const std::string& option,
                         const std::string& text);

}  // namespace dtrun::launcher
