#include "launcher/rendezvous_access.h"

#include "common/error.h"
#include "launcher/args.h"
#include "launcher/rdzv_args.h"
#include "launcher/store_command.h"

namespace dtrun::launcher {

rendezvous::etcd::ClientOptions etcdClientOptions(const agent::RendezvousConfig& r) {
  rendezvous::etcd::ClientOptions o;
  const std::string protocol = confValue(r.conf, {"protocol"});
  o.endpoints = parseEtcdEndpoints("--rdzv-endpoint", r.etcdEndpoints, r.conf);
  o.tls = protocol == "https";
  o.cacert = confValue(r.conf, {"cacert", "ca_cert"});
  o.cert = confValue(r.conf, {"cert", "ssl_cert"});
  o.key = confValue(r.conf, {"key", "ssl_cert_key"});
  if (!o.tls && !(o.cacert + o.cert + o.key).empty()) {
    throw ConfigError(
        "--rdzv-conf: TLS files (cacert, cert, key) are given but protocol is http: add "
        "protocol=https");
  }
  o.user = confValue(r.conf, {"user", "username"});
  o.password = confValue(r.conf, {"password"});
  o.requestTimeout = r.heartbeatTimeout;
  return o;
}

std::string resolveStoreToken(const agent::RendezvousConfig& r,
                              const std::map<std::string, std::string>& env,
                              std::vector<std::string>& warnings) {
  std::string source = "--rdzv-conf token_file";
  std::string path = confValue(r.conf, {"token_file"});
  if (path.empty()) {
    auto it = env.find("DTRUN_RDZV_TOKEN_FILE");
    if (it == env.end() || it->second.empty()) return "";
    source = "DTRUN_RDZV_TOKEN_FILE";
    path = it->second;
  }
  if (r.backend == agent::RendezvousBackend::kEtcd) {
    // etcd is the store there, and has its own authentication.
    if (source == "DTRUN_RDZV_TOKEN_FILE") {
      warnings.push_back(source +
                         " is ignored by the etcd backend, which has no dtrun store: etcd has "
                         "its own authentication (--rdzv-conf user=,password=)");
      return "";
    }
    throw UsageError(source +
                     ": the etcd backend has no dtrun store to guard; etcd has its own "
                     "authentication (--rdzv-conf user=...,password=...) and TLS");
  }
  return readToken(source, path);
}

}  // namespace dtrun::launcher
