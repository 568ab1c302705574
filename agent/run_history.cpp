#include "agent/run_history.h"

#include <cstdio>

namespace dtrun::agent {
namespace {

double seconds(std::chrono::system_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

std::string fixed1(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

template <typename T>
T field(const nlohmann::json& j, const char* name, T fallback) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    return fallback;
  }
}

}  // namespace

void RunHistory::onRecord(std::string_view event, const nlohmann::json& f, Time when) {
  if (event == "rendezvous_started") {
    rdzvStart_ = when;
  } else if (event == "rendezvous_done") {
    Round r;
    r.round = field<std::int64_t>(f, "round", 0);
    r.worldSize = field<int>(f, "world_size", 0);
    r.groupWorldSize = field<int>(f, "group_world_size", 0);
    r.groupRank = field<int>(f, "group_rank", 0);
    r.at = when;
    rounds_.push_back(r);
    if (rdzvStart_) {
      const double d = std::max(0.0, seconds(when - *rdzvStart_));
      rdzvSum_ += d;
      ++rdzvCount_;
      rdzvLast_ = d;
      rdzvStart_.reset();
    }
    running_ = 0;
  } else if (event == "worker_started") {
    ++started_workers_;
    ++running_;
    lastStart_ = when;
  } else if (event == "worker_exited") {
    if (running_ > 0) --running_;
    ++exits_[field<std::string>(f, "outcome", "unknown")];
  } else if (event == "restart_decided") {
    // The failing node also records its report (reason, decided_here) before it knows whether
    // the job restarts; only the record naming the next round is a restart.
    if (!f.contains("next_round")) return;
    Restart r;
    r.round = field<std::int64_t>(f, "round", 0);
    r.nextRound = field<std::int64_t>(f, "next_round", r.round + 1);
    r.cause = field<std::string>(f, "reason", "unknown");
    restarts_.push_back(r);
    ++restartCauses_[r.cause];
  } else if (event == "worker_hung") {
    ++hangs_["timer"];
  } else if (event == "worker_group_stalled") {
    ++hangs_["stall"];
  }
}

std::string RunHistory::summary(const std::string& runId, const JobOutcome& outcome, Time now,
                                bool withWhy) const {
  std::string line = "dtrun: job " + runId + " ";
  line += outcome.kind == Outcome::kFinishedWithoutThisNode
              ? "finished without this node"
              : std::string(outcomeName(outcome.kind));
  if (outcome.kind == Outcome::kSignaled && outcome.signal > 0) {
    line += " (signal " + std::to_string(outcome.signal) + ")";
  }
  line += " after " + fixed1(seconds(now - started_)) + " s: ";
  if (rounds_.empty()) {
    line += "no round with this node";
  } else {
    line += std::to_string(rounds_.size()) + (rounds_.size() == 1 ? " round" : " rounds") +
            " (world size";
    line += rounds_.size() == 1 ? " " : "s ";
    for (std::size_t i = 0; i < rounds_.size(); ++i) {
      if (i) line += ", ";
      line += std::to_string(rounds_[i].worldSize);
    }
    line += ")";
  }
  line +=
      "; " + std::to_string(restarts_.size()) + (restarts_.size() == 1 ? " restart" : " restarts");
  if (!restarts_.empty()) {
    line += " (";
    for (std::size_t i = 0; i < restarts_.size(); ++i) {
      if (i) line += ", ";
      line += restarts_[i].cause + " after round " + std::to_string(restarts_[i].round);
    }
    line += ")";
  }
  if (withWhy && !outcome.why.empty()) line += "; " + outcome.why;
  return line;
}

nlohmann::json RunHistory::summaryJson(const JobOutcome& outcome, int exitCode, Time now) const {
  nlohmann::json rounds = nlohmann::json::array();
  for (const auto& r : rounds_) {
    rounds.push_back({{"round", r.round},
                      {"world_size", r.worldSize},
                      {"group_world_size", r.groupWorldSize},
                      {"group_rank", r.groupRank}});
  }
  nlohmann::json restarts = nlohmann::json::array();
  for (const auto& r : restarts_) {
    restarts.push_back({{"round", r.round}, {"next_round", r.nextRound}, {"cause", r.cause}});
  }
  nlohmann::json j = {{"outcome", std::string(outcomeName(outcome.kind))},
                      {"exit_code", exitCode},
                      {"wall_s", seconds(now - started_)},
                      {"rounds", rounds},
                      {"restarts", restarts},
                      {"why", outcome.why}};
  if (outcome.kind == Outcome::kSignaled) j["signal"] = outcome.signal;
  return j;
}

}  // namespace dtrun::agent
