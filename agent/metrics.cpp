#include "agent/metrics.h"

#include <dirent.h>
#include <unistd.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "agent/process_tree.h"

namespace dtrun::agent {

void MetricsText::family(std::string_view name, std::string_view type, std::string_view help) {
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  out_ += escapeHelp(help);
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += ' ';
  out_ += type;
  out_ += '\n';
}

void MetricsText::sample(std::string_view name, const Labels& labels, double value) {
  out_ += name;
  if (!labels.empty()) {
    out_ += '{';
    for (std::size_t i = 0; i < labels.size(); ++i) {
      if (i) out_ += ',';
      out_ += labels[i].first;
      out_ += "=\"";
      out_ += escapeLabel(labels[i].second);
      out_ += '"';
    }
    out_ += '}';
  }
  out_ += ' ';
  out_ += formatValue(value);
  out_ += '\n';
}

namespace {

// The format's escapes: backslash and newline always, the double quote in label values.
std::string escaped(std::string_view v, bool quote) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || (quote && c == '"')) {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string MetricsText::escapeLabel(std::string_view v) { return escaped(v, true); }

std::string MetricsText::escapeHelp(std::string_view v) { return escaped(v, false); }

std::string MetricsText::formatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[40];
  if (v == std::floor(v) && std::fabs(v) < 9.007199254740992e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  // The shortest text that reads back as the same double.
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

ProcessSample readProcessSample() {
  ProcessSample p;
  const double tick = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
  if (auto s = readProcStat(::getpid())) {
    p.cpuSeconds = static_cast<double>(s->utimeTicks + s->stimeTicks) / tick;
    p.residentBytes = static_cast<double>(s->rssPages) * page;
    p.virtualBytes = static_cast<double>(s->vsizeBytes);
    p.threads = static_cast<double>(s->threads);
    // Start time is in ticks since boot; /proc/stat's btime is the boot in epoch seconds.
    std::ifstream stat("/proc/stat");
    std::string key;
    long long value = 0;
    while (stat >> key) {
      if (key == "btime" && stat >> value) {
        p.startTimeSeconds = static_cast<double>(value) + static_cast<double>(s->startTicks) / tick;
        break;
      }
      stat.ignore(1 << 20, '\n');
    }
  }
  if (DIR* d = ::opendir("/proc/self/fd")) {
    int n = 0;
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] != '.') ++n;
    }
    ::closedir(d);
    p.openFds = n - 1;  // not the descriptor of this listing
  }
  return p;
}

std::string renderMetrics(const RunHistory& h, const MetricsSnapshot& now) {
  MetricsText m;
  using L = MetricsText::Labels;
  m.family("dtrun_agent_info", "gauge", "The agent: its job, host and state (value 1).");
  m.sample("dtrun_agent_info", L{{"run_id", now.runId}, {"host", now.host}, {"state", now.state}},
           1);
  m.family("dtrun_round", "gauge", "The round this node is in (TORCHELASTIC_RESTART_COUNT).");
  m.sample("dtrun_round", static_cast<double>(now.round));
  m.family("dtrun_world_size", "gauge", "Workers in the job in this node's round.");
  m.sample("dtrun_world_size", now.worldSize);
  m.family("dtrun_group_rank", "gauge", "This node's group rank in its round (-1: none yet).");
  m.sample("dtrun_group_rank", now.groupRank);
  m.family("dtrun_rounds_total", "counter", "Rounds this node joined.");
  m.sample("dtrun_rounds_total", static_cast<double>(h.rounds().size()));
  m.family("dtrun_restarts_total", "counter",
           "Restarts this node went through, by cause: worker_failure, worker_hung, node_left, "
           "node_joined.");
  for (const char* cause : {"worker_failure", "worker_hung", "node_left", "node_joined"}) {
    auto it = h.restartsByCause().find(cause);
    m.sample("dtrun_restarts_total", L{{"cause", cause}},
             static_cast<double>(it == h.restartsByCause().end() ? 0 : it->second));
  }
  m.family("dtrun_rendezvous_duration_seconds", "summary",
           "Time from asking to join a round until it closed with this node in it.");
  m.sample("dtrun_rendezvous_duration_seconds_sum", h.rendezvousSecondsSum());
  m.sample("dtrun_rendezvous_duration_seconds_count", static_cast<double>(h.rendezvousCount()));
  m.family("dtrun_last_rendezvous_duration_seconds", "gauge", "The last rendezvous' duration.");
  m.sample("dtrun_last_rendezvous_duration_seconds", h.lastRendezvousSeconds().value_or(NAN));
  m.family("dtrun_workers_running", "gauge", "This node's workers running now.");
  m.sample("dtrun_workers_running", h.workersRunning());
  m.family("dtrun_workers_started_total", "counter", "Workers this node started.");
  m.sample("dtrun_workers_started_total", static_cast<double>(h.workersStarted()));
  m.family("dtrun_workers_exited_total", "counter",
           "Workers that exited, by outcome: succeeded, failed, hung (killed by dtrun as hung), "
           "stopped (stopped by dtrun).");
  for (const char* outcome : {"succeeded", "failed", "hung", "stopped"}) {
    auto it = h.exitsByOutcome().find(outcome);
    m.sample("dtrun_workers_exited_total", L{{"outcome", outcome}},
             static_cast<double>(it == h.exitsByOutcome().end() ? 0 : it->second));
  }
  m.family("dtrun_hangs_total", "counter",
           "Hung workers dtrun ended, by kind: timer (file-timer deadline), stall "
           "(--stall-timeout).");
  for (const char* kind : {"timer", "stall"}) {
    auto it = h.hangsByKind().find(kind);
    m.sample("dtrun_hangs_total", L{{"kind", kind}},
             static_cast<double>(it == h.hangsByKind().end() ? 0 : it->second));
  }
  m.family("dtrun_seconds_since_worker_progress", "gauge",
           "Seconds since the workers' last output or file-timer request (or their start); NaN "
           "while none run.");
  m.sample("dtrun_seconds_since_worker_progress", now.secondsSinceProgress.value_or(NAN));
  // The process families keep the names every Prometheus client library uses.
  m.family("process_cpu_seconds_total", "counter", "The agent's user and system CPU time.");
  m.sample("process_cpu_seconds_total", now.process.cpuSeconds);
  m.family("process_resident_memory_bytes", "gauge", "The agent's resident memory.");
  m.sample("process_resident_memory_bytes", now.process.residentBytes);
  m.family("process_virtual_memory_bytes", "gauge", "The agent's virtual memory.");
  m.sample("process_virtual_memory_bytes", now.process.virtualBytes);
  m.family("process_start_time_seconds", "gauge", "When the agent started, since the epoch.");
  m.sample("process_start_time_seconds", now.process.startTimeSeconds);
  m.family("process_open_fds", "gauge", "The agent's open descriptors.");
  m.sample("process_open_fds", now.process.openFds);
  m.family("process_threads", "gauge", "The agent's threads.");
  m.sample("process_threads", now.process.threads);
  if (now.store) {
    const StoreSample& s = *now.store;
    m.family("dtrun_store_connections", "gauge", "Open connections to the store this node serves.");
    m.sample("dtrun_store_connections", static_cast<double>(s.connections));
    m.family("dtrun_store_keys", "gauge", "Keys in the store this node serves.");
    m.sample("dtrun_store_keys", static_cast<double>(s.keys));
    m.family("dtrun_store_bytes", "gauge", "Bytes of keys, values and queues the store holds.");
    m.sample("dtrun_store_bytes", static_cast<double>(s.bytes));
    m.family("dtrun_store_requests_total", "counter", "Requests the store served, by operation.");
    for (const auto& [op, n] : s.requestsByOp) {
      m.sample("dtrun_store_requests_total", L{{"op", op}}, static_cast<double>(n));
    }
  }
  return m.text();
}

}  // namespace dtrun::agent
