#include "launcher/store_command.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "launcher/args.h"
#include "launcher/logging.h"
#include "rendezvous/store_server.h"

namespace dtrun::launcher {
namespace {

constexpr const char* kUsage = R"(usage: dtrun store [--host HOST] [--port PORT] [options]

Runs a TCPStore-compatible key-value store (torch 1.13 and 2.x clients) until SIGINT or SIGTERM.
The first line on stdout is the bound address as host:port.

options:
  --host HOST             address or name to bind (default 0.0.0.0; "::" for IPv6 and IPv4)
  --port PORT             port to bind; 0 picks a free one (default 29400)
  --max-key-size SIZE     longest key accepted, e.g. 64K (default 64K)
  --max-value-size SIZE   largest value accepted, e.g. 64M (default 64M)
  --max-keys N            most keys in one CHECK/WAIT/MULTI_* request (default 131072)
  --max-connections N     open connections allowed; 0: as many as RLIMIT_NOFILE allows (default 0)
  --backlog N             listen backlog (default 16384)
  --log-level LEVEL       trace, debug, info, warn, error, critical or off (default info, or
                          $DTRUN_LOG_LEVEL)
  -h, --help              show this message
)";

struct StoreArgs {
  rendezvous::StoreServerOptions server;
  std::string logLevel = logLevelFromEnv("info");
};

StoreArgs parse(int argc, char** argv) {
  StoreArgs a;
  a.server.port = 29400;
  std::vector<std::string> args(argv, argv + argc);
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i];
    std::string value;
    bool inlineValue = false;
    if (auto eq = name.find('='); name.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inlineValue = true;
    }
    auto next = [&]() -> std::string {
      if (inlineValue) return value;
      if (i + 1 >= args.size()) throw UsageError(name + ": expected a value");
      return args[++i];
    };
    if (name == "--host") {
      a.server.host = next();
      if (a.server.host.empty()) throw UsageError("--host: expected an address or host name");
    } else if (name == "--port") {
      a.server.port = static_cast<std::uint16_t>(parseInteger(name, next(), 0, 65535));
    } else if (name == "--max-key-size") {
      a.server.limits.maxKeySize = parseSize(name, next());
    } else if (name == "--max-value-size") {
      a.server.limits.maxValueSize = parseSize(name, next());
    } else if (name == "--max-keys") {
      a.server.limits.maxKeysPerRequest = parseInteger(name, next(), 1, 1 << 30);
    } else if (name == "--max-connections") {
      a.server.maxConnections = parseInteger(name, next(), 0, 1 << 30);
    } else if (name == "--backlog") {
      a.server.backlog = static_cast<int>(parseInteger(name, next(), 1, 1 << 30));
    } else if (name == "--log-level") {
      a.logLevel = next();
    } else if (name == "-h" || name == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else {
      throw UsageError("unrecognized argument '" + args[i] + "' (see dtrun store --help)");
    }
  }
  return a;
}

}  // namespace

int runStoreCommand(int argc, char** argv) {
  StoreArgs args;
  std::shared_ptr<spdlog::logger> log;
  try {
    args = parse(argc, argv);
    log = makeLogger("store", args.logLevel);
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "dtrun store: error: %s\n", e.what());
    return 2;
  }
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
    io.run();
    return 0;
  } catch (const std::exception& e) {
    log->error("{}", e.what());
    return 1;
  }
}

}  // namespace dtrun::launcher
