#include "launcher/status_command.h"

#include <array>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "launcher/args.h"
#include "launcher/option_parser.h"
#include "launcher/rdzv_args.h"
#include "launcher/rendezvous_access.h"
#include "rendezvous/job_reader.h"

namespace dtrun::launcher {
namespace {

constexpr std::string_view kPet = "PET";

constexpr std::array<OptionSpec, 8> kStatusOptions{{
    {"help", "-h", OptionKind::kHelp, "", "", "show this help message and exit"},
    {"rdzv_backend", "", OptionKind::kValue, "", kPet,
     "c10d (dtrun's store; static jobs use it too) or etcd (etcd-v2). (default: c10d)"},
    {"rdzv_endpoint", "", OptionKind::kValue, "", kPet,
     "The job's --rdzv-endpoint: HOST[:PORT] of its store (port 29400 by default), or the etcd "
     "members, comma-separated. (default: localhost:29400)"},
    {"rdzv_id", "", OptionKind::kValue, "", kPet, "The job's --rdzv-id."},
    {"rdzv_conf", "", OptionKind::kValue, "", kPet,
     "The job's --rdzv-conf keys that reach it: token_file (also DTRUN_RDZV_TOKEN_FILE), "
     "heartbeat_timeout (how long to try to connect, 5 s), read_timeout; etcd: protocol, "
     "cacert, cert, key, user, password."},
    {"json", "", OptionKind::kFlag, "", "", "Print one JSON object (one per line with --watch)."},
    {"watch", "", OptionKind::kFlag, "", "",
     "Redraw every --interval seconds in place until interrupted or the job cannot be read."},
    {"interval", "", OptionKind::kValue, "", "", "Seconds between redraws. (default: 1)",
     "SECONDS"},
}};

const OptionParser& statusParser() {
  static const OptionParser parser(CommandSpec{
      "dtrun status",
      "[-h] [options]",
      {kStatusOptions},
      false,
      {"Shows a running job as it is now: the round, every agent (host, pid, group rank, "
       "workers, state, how long since the store last heard from it), the restarts used and "
       "why each happened, the last failure, the world size of each round. It joins nothing "
       "and changes nothing."},
      {},
      {"Agent states: joining, running, stopping, waiting (for the next round), done, "
       "finishing, failed, left, lost; stopped answering: its connection closed, or the store "
       "has not heard from it for two heartbeats.",
       "Exit codes: 0 shown, 1 the job could not be read (no such job, the store refused the "
       "token, nothing listening: one line says which), 2 a bad command line."}});
  return parser;
}

struct StatusArgs {
  agent::RendezvousConfig rdzv;
  bool json = false;
  bool watch = false;
  std::chrono::milliseconds interval = std::chrono::seconds(1);
};

StatusArgs parse(const std::vector<std::string>& argv,
                 const std::map<std::string, std::string>& env) {
  const OptionParser& parser = statusParser();
  ParsedOptions p = parser.parse(argv);
  parser.applyEnvironment(p, env);
  StatusArgs a;
  auto& r = a.rdzv;
  if (const auto* g = p.value("rdzv_conf")) applyRendezvousConf(r, g->source, g->value);
  if (const auto* g = p.value("rdzv_backend")) {
    if (g->value == "etcd" || g->value == "etcd-v2") {
      r.backend = agent::RendezvousBackend::kEtcd;
    } else if (g->value == "c10d" || g->value == "static") {
      r.backend = agent::RendezvousBackend::kC10d;
    } else {
      throw UsageError(g->source + ": invalid value '" + g->value +
                       "': expected c10d, static or etcd (etcd-v2)");
    }
  }
  const GivenValue* endpoint = p.value("rdzv_endpoint");
  if (r.backend == agent::RendezvousBackend::kEtcd) {
    if (!endpoint || endpoint->value.empty()) {
      throw UsageError("--rdzv-backend etcd needs --rdzv-endpoint: the etcd members");
    }
    parseEtcdEndpoints(endpoint->source, endpoint->value, r.conf);
    r.etcdEndpoints = endpoint->value;
  } else {
    const Endpoint ep = endpoint ? parseEndpoint(endpoint->source, endpoint->value, 29400)
                                 : Endpoint{"localhost", 29400};
    r.host = ep.host;
    r.port = ep.port;
  }
  const GivenValue* id = p.value("rdzv_id");
  if (!id || id->value.empty()) throw UsageError("--rdzv-id: the job's id is required");
  r.runId = id->value;
  std::vector<std::string> warnings;
  r.token = resolveStoreToken(r, env, warnings);
  for (const auto& w : warnings) std::fprintf(stderr, "dtrun status: %s\n", w.c_str());
  a.json = p.flag("json");
  a.watch = p.flag("watch");
  if (auto s = p.seconds("interval")) a.interval = *s;
  return a;
}

std::int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// One way to read the job, connected once and read again on every redraw.
class JobReader {
 public:
  explicit JobReader(const agent::RendezvousConfig& r) : r_(r) {
    if (r.backend == agent::RendezvousBackend::kEtcd) {
      auto o = etcdClientOptions(r);
      o.retryFor = r.heartbeatTimeout;
      etcd_ = std::make_unique<rendezvous::etcd::EtcdClient>(o);
      where_ = etcd_->describe();
      return;
    }
    rendezvous::TcpStoreOptions o;
    o.host = r.host;
    o.port = r.port;
    o.connectTimeout = r.heartbeatTimeout;
    o.timeout = r.readTimeout;
    o.token = r.token;
    where_ = "store at " + r.host + ":" + std::to_string(r.port);
    try {
      store_ = std::make_unique<rendezvous::TcpStore>(o);
    } catch (const ConnectionError& e) {
      throw ConnectionError("nothing answers at " + r.host + ":" + std::to_string(r.port) +
                            " (is the job's store there?): " + e.what());
    }
  }
  rendezvous::JobSnapshot read() {
    return store_ ? rendezvous::readJob(*store_, r_.runId) : rendezvous::readJob(*etcd_, r_.runId);
  }
  const std::string& where() const { return where_; }

 private:
  const agent::RendezvousConfig& r_;
  std::unique_ptr<rendezvous::TcpStore> store_;
  std::unique_ptr<rendezvous::etcd::EtcdClient> etcd_;
  std::string where_;
};

std::string seconds(std::int64_t ms) {
  char buf[32];
  if (ms < 10000) {
    std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(ms) / 1000.0);
  } else {
    std::snprintf(buf, sizeof buf, "%lld s", static_cast<long long>(ms / 1000));
  }
  return buf;
}

}  // namespace

std::string formatStatus(const rendezvous::JobStatus& st, const std::string& where,
                         std::int64_t now) {
  std::string out =
      "job " + st.runId + " (" + where + "): " + st.phase + ", round " + std::to_string(st.round);
  if (!st.rounds.empty() && st.rounds.back().closed) {
    out += ", world size " + std::to_string(st.rounds.back().worldSize) + " on " +
           std::to_string(st.rounds.back().nodes) + " node(s)";
  }
  if (!st.finalReason.empty()) out += " (" + st.finalReason + ")";
  out += "\nrestarts: " + std::to_string(st.restartsUsed) + " of " +
         (st.maxRestarts ? std::to_string(*st.maxRestarts) : std::string("?")) + " used";
  for (std::size_t i = 0; i < st.restarts.size(); ++i) {
    const auto& r = st.restarts[i];
    out += (i ? "; " : ": ") + r.cause + " after round " + std::to_string(r.round);
    if (!r.detail.empty()) out += " (" + r.detail + ")";
  }
  out += "\nlast failure: ";
  if (!st.lastFailure) {
    out += "none";
  } else {
    const auto& f = *st.lastFailure;
    out += "round " + std::to_string(f.round) + ", rank " + std::to_string(f.rank) +
           " (local_rank " + std::to_string(f.localRank) + ", pid " + std::to_string(f.pid) +
           ") on " + f.host + ": " +
           (f.signal ? "signal " + std::to_string(*f.signal)
                     : "exit code " + std::to_string(f.exitCode.value_or(0)));
    if (!f.hang.empty()) out += ", hung (" + f.hang + ")";
    if (!f.message.empty()) out += ": " + f.message.substr(0, 200);
  }
  out += "\nrounds:";
  for (const auto& r : st.rounds) {
    out += " " + std::to_string(r.round) + ": ";
    out += r.closed ? std::to_string(r.worldSize) + " workers on " + std::to_string(r.nodes)
                    : "forming, " + std::to_string(r.nodes) + " joined";
    if (!r.endedBy.empty()) out += " (ended: " + r.endedBy + ")";
    out += ";";
  }
  if (!st.rounds.empty()) out.pop_back();
  char line[256];
  std::snprintf(line, sizeof line, "\n\n%-28s %8s %5s %5s %7s %-18s %8s %8s\n", "HOST", "PID",
                "ROUND", "RANK", "WORKERS", "STATE", "HEARD", "SINCE");
  out += line;
  for (const auto& n : st.nodes) {
    const std::string rank = n.groupRank >= 0 ? std::to_string(n.groupRank) : "-";
    const std::string heard = n.heardMs ? seconds(*n.heardMs) : "-";
    const std::string since =
        n.sinceMs > 0 ? seconds(std::max<std::int64_t>(0, now - n.sinceMs)) : "-";
    std::snprintf(line, sizeof line, "%-28.28s %8d %5lld %5s %7d %-18s %8s %8s\n", n.host.c_str(),
                  n.pid, static_cast<long long>(n.round), rank.c_str(), n.nproc, n.state.c_str(),
                  heard.c_str(), since.c_str());
    out += line;
  }
  if (st.nodes.empty()) out += "(no agent has published its status)\n";
  return out;
}

int runStatusCommand(const std::vector<std::string>& argv,
                     const std::map<std::string, std::string>& env) {
  StatusArgs args;
  if (auto code = handleUsage(statusParser(), [&] { args = parse(argv, env); })) return *code;
  try {
    JobReader reader(args.rdzv);
    for (bool first = true;; first = false) {
      const auto status = rendezvous::describeJob(args.rdzv.runId, reader.read());
      std::string frame = args.json ? rendezvous::toJson(status).dump() + "\n"
                                    : formatStatus(status, reader.where(), nowMs());
      // In place: home, the frame with each line's rest cleared, then the rest of the screen.
      if (args.watch && !args.json) {
        std::string redraw = first ? "\x1b[2J\x1b[H" : "\x1b[H";
        for (std::size_t start = 0; start < frame.size();) {
          const auto nl = frame.find('\n', start);
          redraw += frame.substr(start, nl - start) + "\x1b[K\n";
          start = nl == std::string::npos ? frame.size() : nl + 1;
        }
        frame = redraw + "\x1b[J";
      }
      std::fwrite(frame.data(), 1, frame.size(), stdout);
      std::fflush(stdout);
      if (!args.watch) return 0;
      std::this_thread::sleep_for(args.interval);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtrun status: %s\n", e.what());
    return 1;
  }
}

}  // namespace dtrun::launcher
