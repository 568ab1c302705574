#include "launcher/store_command.h"

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "common/secret_file.h"
#include "launcher/args.h"
#include "launcher/logging.h"
#include "launcher/option_parser.h"

namespace dtrun::launcher {
namespace {

constexpr const char* kLimits = "limits (docs/store.md)";

// Sizes take binary units (64K, 8M, 2G); the defaults are StoreServerOptions'.
constexpr std::array<OptionSpec, 15> kStoreOptions{{
    {"help", "-h", OptionKind::kHelp, "", "", "show this help message and exit"},
    {"host", "", OptionKind::kValue, "", "",
     "Address or name to listen on: \"::\" is every IPv6 and IPv4 address (IPv4 only where "
     "the machine has no IPv6), 0.0.0.0 every IPv4 address. (default: ::)"},
    {"port", "", OptionKind::kValue, "", "", "Port to bind; 0 picks a free one. (default: 29400)"},
    {"max_key_size", "", OptionKind::kValue, kLimits, "", "Longest key accepted. (default: 64K)",
     "SIZE"},
    {"max_value_size", "", OptionKind::kValue, kLimits, "",
     "Largest value any write may leave, APPEND's result included. (default: 64M)", "SIZE"},
    {"max_keys", "", OptionKind::kValue, kLimits, "",
     "Most keys in one CHECK, WAIT, MULTI_GET or MULTI_SET. (default: 131072)", "N"},
    {"max_request_size", "", OptionKind::kValue, kLimits, "",
     "Bytes one request may take while it arrives: what a connection may buffer. (default: "
     "128M)",
     "SIZE"},
    {"max_reply_size", "", OptionKind::kValue, kLimits, "",
     "Largest reply; a request that needs a larger one is refused before it is built. "
     "(default: 128M)",
     "SIZE"},
    {"memory_quota", "", OptionKind::kValue, kLimits, "",
     "Bytes of keys, values and connection buffers the store may hold; a write past it is "
     "refused and changes nothing. (default: 2G)",
     "SIZE"},
    {"frame_timeout", "", OptionKind::kValue, kLimits, "",
     "Seconds a client may take to finish a request it began; then its connection is closed "
     "(0: never). (default: 30)",
     "SECONDS"},
    {"max_connections", "", OptionKind::kValue, kLimits, "",
     "Open connections allowed; past it a new one is refused at once. 0: as many as "
     "RLIMIT_NOFILE allows. (default: 0)",
     "N"},
    {"backlog", "", OptionKind::kValue, "", "",
     "Listen backlog (the kernel caps it at net.core.somaxconn). (default: 16384)", "N"},
    {"token_file", "", OptionKind::kValue, "", "DTRUN_RDZV_TOKEN_FILE",
     "File holding the store's shared secret (at least 16 bytes, mode 0600). Clients that present "
     "it reach every key; others reach all but the rendezvous' keys under /dtrun/, which torch "
     "workers never use (docs/store.md, \"Shared secret\"). (default: none)",
     "PATH"},
    {"log_level", "", OptionKind::kValue, "", "DTRUN_LOG_LEVEL",
     "trace, debug, info, warn, error, critical or off. (default: info)", "LEVEL"},
    {"warning_burst", "", OptionKind::kValue, "", "",
     "Warning lines of one kind per 5 s; the rest are counted in one line. (default: 5)", "N"},
}};

const OptionParser& storeParser() {
  static const OptionParser parser(CommandSpec{
      "dtrun store",
      "[-h] [options]",
      {kStoreOptions},
      false,
      {"Runs a TCPStore-compatible key-value store (torch 1.13 and 2.x clients) until SIGINT or "
       "SIGTERM. The first line on stdout is the bound address as host:port."},
      {},
      {"Exit codes: 0 after SIGINT or SIGTERM, 1 when the store cannot start, 2 for a bad "
       "command line."}});
  return parser;
}

struct StoreArgs {
  rendezvous::StoreServerOptions server;
  std::string logLevel = "info";
};

StoreArgs parse(const std::vector<std::string>& args,
                const std::map<std::string, std::string>& env) {
  const OptionParser& parser = storeParser();
  ParsedOptions p = parser.parse(args);
  parser.applyEnvironment(p, env);
  StoreArgs a;
  a.server.port = 29400;
  if (auto host = p.text("host")) {
    if (host->empty()) throw UsageError("--host: expected an address or host name");
    a.server.hosts = {*host};
  }
  if (auto port = p.integer("port", 0, 65535)) a.server.port = static_cast<std::uint16_t>(*port);
  for (const char* dest : {"max_key_size", "max_value_size", "max_keys", "max_request_size",
                           "max_reply_size", "memory_quota", "frame_timeout", "max_connections"}) {
    if (const auto* g = p.value(dest)) applyStoreConfKey(a.server, g->source, dest, g->value);
  }
  if (const auto* g = p.value("token_file")) a.server.token = readToken(g->source, g->value);
  if (auto backlog = p.integer("backlog", 1, 1 << 30))
    a.server.backlog = static_cast<int>(*backlog);
  if (auto burst = p.integer("warning_burst", 1, 1 << 20)) {
    a.server.warningBurst = static_cast<std::size_t>(*burst);
  }
  if (const auto* g = p.value("log_level")) {
    auto level = normalizeLogLevel(g->value);
    if (!level) {
      throw UsageError(g->source + ": invalid level '" + g->value +
                       "' (trace, debug, info, warn, error, critical or off)");
    }
    a.logLevel = *level;
  }
  return a;
}

}  // namespace

bool applyStoreConfKey(rendezvous::StoreServerOptions& o, const std::string& label,
                       const std::string& key, const std::string& value) {
  std::string k = key.rfind("store_", 0) == 0 ? key.substr(6) : key;
  auto size = [&] {
    std::uint64_t n = parseSize(label, value);
    if (n == 0) throw UsageError(label + ": must be more than 0");
    return static_cast<std::size_t>(n);
  };
  if (k == "max_key_size") {
    o.limits.maxKeySize = size();
  } else if (k == "max_value_size") {
    o.limits.maxValueSize = size();
  } else if (k == "max_keys") {
    o.limits.maxKeysPerRequest = static_cast<std::size_t>(parseInteger(label, value, 1, 1 << 30));
  } else if (k == "max_request_size") {
    o.limits.maxRequestBytes = size();
  } else if (k == "max_reply_size") {
    o.maxReplyBytes = size();
  } else if (k == "memory_quota") {
    o.memoryQuota = size();
  } else if (k == "frame_timeout") {
    o.frameTimeout = parseSeconds(label, value, /*allowZero=*/true);
  } else if (k == "max_connections") {
    o.maxConnections = static_cast<std::size_t>(parseInteger(label, value, 0, 1 << 30));
  } else {
    return false;
  }
  return true;
}

std::string readToken(const std::string& source, const std::string& path) {
  try {
    return readSecretFile(path, source);
  } catch (const ConfigError& e) {
    throw UsageError(e.what());
  }
}

int runStoreCommand(const std::vector<std::string>& argv,
                    const std::map<std::string, std::string>& env) {
  StoreArgs args;
  if (auto code = handleUsage(storeParser(), [&] { args = parse(argv, env); })) return *code;
  auto log = makeLogger("store", args.logLevel);
  try {
    boost::asio::io_context io(1);
    rendezvous::StoreServer server(io, args.server, log);
    server.start();
    auto ep = server.endpoint();
    std::string host = ep.address().to_string();
    if (ep.address().is_v6()) host = "[" + host + "]";
    std::printf("%s:%u\n", host.c_str(), static_cast<unsigned>(ep.port()));
    std::fflush(stdout);
    boost::asio::signal_set signals(io, SIGINT, SIGTERM);
    signals.async_wait([&](boost::system::error_code ec, int signo) {
      if (ec) return;
      log->info("store: signal {} received; shutting down", signo);
      server.stop();
    });
    rendezvous::runServing(io, *log);
    return 0;
  } catch (const std::exception& e) {
    log->error("{}", e.what());
    return 1;
  }
}

}  // namespace dtrun::launcher
