// The agent's metrics in Prometheus' text exposition format (version 0.0.4), written by dtrun
// itself: Debian's prometheus-cpp ships shared libraries only, and dtrun is one static binary
// (docs/observe.md, "Why dtrun writes the format itself").
//
// What is counted comes from the event log's records (agent/run_history.h); what is measured at
// the scrape (the agent's CPU and memory, the time since the workers' last sign of progress,
// the hosted store's counters) is handed in as a Snapshot. Pure but for readProcessSample().
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "agent/run_history.h"

namespace dtrun::agent {

/// Writes the text format: one # HELP and # TYPE per family, then its samples.
class MetricsText {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;
  /// Starts a family; `type` is counter, gauge, summary or untyped.
  void family(std::string_view name, std::string_view type, std::string_view help);
  /// One sample of the family begun last (`name` may add _sum, _count, _total ...).
  void sample(std::string_view name, const Labels& labels, double value);
  void sample(std::string_view name, double value) { sample(name, {}, value); }
  const std::string& text() const { return out_; }

  /// A label value with \, " and newline escaped, as the format wants.
  static std::string escapeLabel(std::string_view v);
  /// HELP text with \ and newline escaped.
  static std::string escapeHelp(std::string_view v);
  /// A sample value: integers exactly, others as the shortest text that reads back the same;
  /// NaN, +Inf, -Inf.
  static std::string formatValue(double v);

 private:
  std::string out_;
};

/// The agent's own process, read from /proc/self at the scrape.
struct ProcessSample {
  double cpuSeconds = 0;  ///< user + system
  double residentBytes = 0;
  double virtualBytes = 0;
  double startTimeSeconds = 0;  ///< since the epoch
  double openFds = 0;
  double threads = 0;
};
/// /proc/self/stat, /proc/stat's boot time and /proc/self/fd. Blocking (procfs), cheap.
ProcessSample readProcessSample();

/// The hosted store's counters (only on the node that serves the job's store).
struct StoreSample {
  std::uint64_t connections = 0;
  std::uint64_t keys = 0;
  std::uint64_t bytes = 0;
  std::map<std::string, std::uint64_t> requestsByOp;  ///< "SET", "GET", ...
};

/// What the scrape measures besides the history.
struct MetricsSnapshot {
  std::string runId;
  std::string host;
  std::string state;  ///< the policy's state (joining, running, ...)
  std::int64_t round = -1;
  int worldSize = 0;
  int groupRank = -1;
  /// Seconds since the workers' last output or timer request (or their start); nullopt while
  /// no workers run.
  std::optional<double> secondsSinceProgress;
  ProcessSample process;
  std::optional<StoreSample> store;
};

/// Every family, in the text format.
std::string renderMetrics(const RunHistory& history, const MetricsSnapshot& now);

}  // namespace dtrun::agent
