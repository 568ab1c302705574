#include "rendezvous/job_status.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/decimal.h"
#include "rendezvous/rendezvous_keys.h"

namespace dtrun::rendezvous {

using Kind = keys::ParsedKey::Kind;

void to_json(nlohmann::json& j, const AgentStatus& s) {
  j = nlohmann::json{{"host", s.host},
                     {"pid", s.pid},
                     {"nproc", s.nproc},
                     {"role", s.role},
                     {"state", s.state},
                     {"round", s.round},
                     {"group_rank", s.groupRank},
                     {"since_ms", s.sinceMs},
                     {"max_restarts", s.maxRestarts},
                     {"keep_alive_ms", s.keepAliveMs}};
  if (!s.metrics.empty()) j["metrics"] = s.metrics;
  if (!s.outcome.empty()) j["outcome"] = s.outcome;
}

void from_json(const nlohmann::json& j, AgentStatus& s) {
  s.host = j.value("host", "");
  s.pid = j.value("pid", 0);
  s.nproc = j.value("nproc", 0);
  s.role = j.value("role", "default");
  s.state = j.value("state", "");
  s.round = j.value("round", std::int64_t{-1});
  s.groupRank = j.value("group_rank", -1);
  s.sinceMs = j.value("since_ms", std::int64_t{0});
  s.maxRestarts = j.value("max_restarts", 0);
  s.keepAliveMs = j.value("keep_alive_ms", std::int64_t{0});
  s.metrics = j.value("metrics", "");
  s.outcome = j.value("outcome", "");
}

std::vector<std::string> keysToRead(const std::vector<std::string>& listed) {
  std::vector<std::string> out;
  for (const auto& key : listed) {
    const auto k = keys::parseKey(key);
    if (!k) continue;
    const bool wanted =
        k->kind == Kind::kJob || k->kind == Kind::kAgent ||
        (k->kind == Kind::kRound &&
         (k->name == keys::kClosed || k->name == keys::kJoin || k->name == keys::kAdvance ||
          k->name == keys::kOpened || k->name == keys::kDone || k->name == keys::kGone ||
          k->name == keys::kWaiting || k->name == keys::kFailures));
    if (wanted) out.push_back(key);
  }
  return out;
}

namespace {

// Published states that say how the agent ended: its connection closing is then expected.
bool finalState(const std::string& s) {
  return s == "done" || s == "failed" || s == "left" || s == "lost";
}

struct Reader {
  const JobSnapshot& snap;
  std::optional<std::string> get(const std::string& key) const {
    auto it = snap.values.find(key);
    if (it == snap.values.end() || it->second.empty()) return std::nullopt;
    return it->second;
  }
  std::int64_t counter(const std::string& key) const {
    auto v = get(key);
    return v ? parseDecimal(*v).value_or(0) : 0;
  }
};

// Every failure of a round, as recorded (one JSON document per line).
std::vector<nlohmann::json> failuresOf(const Reader& r, std::int64_t round) {
  std::vector<nlohmann::json> out;
  const auto all = r.get(keys::roundKey(round, keys::kFailures));
  if (!all) return out;
  std::size_t start = 0;
  while (start < all->size()) {
    auto end = all->find('\n', start);
    if (end == std::string::npos) end = all->size();
    try {
      auto j = nlohmann::json::parse(all->substr(start, end - start));
      if (j.is_object()) out.push_back(std::move(j));
    } catch (const nlohmann::json::exception&) {
      // A record this version cannot read says nothing here.
    }
    start = end + 1;
  }
  return out;
}

std::string lastLine(const std::string& text) {
  const auto end = text.find_last_not_of(" \n\r\t");
  if (end == std::string::npos) return "";
  const auto nl = text.rfind('\n', end);
  const auto start = nl == std::string::npos ? 0 : nl + 1;
  return text.substr(start, end + 1 - start);
}

// The root cause of a round's failures: the earliest.
std::optional<JobStatus::Failure> rootCause(const Reader& r, std::int64_t round) {
  const auto all = failuresOf(r, round);
  if (all.empty()) return std::nullopt;
  const auto root = std::min_element(all.begin(), all.end(), [](const auto& a, const auto& b) {
    return a.value("timestampMs", std::int64_t{0}) < b.value("timestampMs", std::int64_t{0});
  });
  JobStatus::Failure f;
  f.round = round;
  f.rank = root->value("rank", 0);
  f.localRank = root->value("localRank", 0);
  f.pid = root->value("pid", 0);
  f.host = root->value("host", "");
  const int code = root->value("exitCode", 0);
  if (code < 0) {
    f.signal = -code;
  } else {
    f.exitCode = code;
  }
  if (auto h = root->find("hang"); h != root->end() && h->is_object())
    f.hang = h->value("kind", "");
  std::string clue =
      root->value("fromErrorFile", false) ? lastLine(root->value("message", "")) : "";
  if (clue.empty()) {
    if (auto tail = root->find("stderrTail");
        tail != root->end() && tail->is_array() && !tail->empty() && tail->back().is_string()) {
      clue = lastLine(tail->back().get<std::string>());
    }
  }
  f.message = clue;
  return f;
}

std::string describe(const JobStatus::Failure& f) {
  std::string s = "rank " + std::to_string(f.rank) + " on " + f.host + ": " +
                  (f.signal ? "signal " + std::to_string(*f.signal)
                            : "exit code " + std::to_string(f.exitCode.value_or(0)));
  if (!f.hang.empty()) s += " (hung: " + f.hang + ")";
  return s;
}

}  // namespace

JobStatus describeJob(const std::string& runId, const JobSnapshot& snap) {
  const Reader r{snap};
  JobStatus st;
  st.runId = runId;
  st.round = r.counter(keys::kRound);
  st.restartsUsed = r.counter(keys::kRestarts);
  if (auto final = r.get(keys::kFinal)) {
    st.phase = "failed";
    try {
      st.finalReason = nlohmann::json::parse(*final).value("reason", "");
    } catch (const nlohmann::json::exception&) {
    }
  } else if (r.get(keys::kSucceeded)) {
    st.phase = "succeeded";
  } else {
    st.phase = r.get(keys::roundKey(st.round, keys::kClosed)) ? "running" : "rendezvous";
  }
  for (std::int64_t k = 0; k <= st.round; ++k) {
    JobStatus::Round round;
    round.round = k;
    if (auto closed = r.get(keys::roundKey(k, keys::kClosed))) {
      const auto packed = parseDecimal(*closed).value_or(0);
      round.closed = true;
      round.nodes = keys::joinedNodes(packed);
      round.worldSize = keys::joinedProcs(packed);
    } else {
      round.nodes = keys::joinedNodes(r.counter(keys::roundKey(k, keys::kJoin)));
    }
    const auto claim = keys::parseClaim(r.get(keys::roundKey(k, keys::kAdvance)).value_or(""));
    if (claim)
      round.endedBy = claim->reason == keys::AdvanceReason::kFailure ? "failure" : "membership";
    st.rounds.push_back(round);
    if (claim && k < st.round) {
      JobStatus::Restart restart;
      restart.round = k;
      if (claim->reason == keys::AdvanceReason::kFailure) {
        const auto root = rootCause(r, k);
        restart.cause = root && !root->hang.empty() ? "worker_hung" : "worker_failure";
        if (root) restart.detail = describe(*root);
      } else {
        const auto gone = r.counter(keys::goneKey(k));
        const auto waiting = r.counter(keys::roundKey(k, keys::kWaiting));
        restart.cause = gone > 0 ? "node_left" : "node_joined";
        restart.detail = gone > 0 ? std::to_string(gone) + " node(s) left"
                                  : std::to_string(waiting) + " node(s) came to join";
      }
      st.restarts.push_back(restart);
    }
  }
  for (std::int64_t k = st.round; k >= 0 && !st.lastFailure; --k) st.lastFailure = rootCause(r, k);

  for (const auto& [key, value] : snap.values) {
    const auto k = keys::parseKey(key);
    if (!k || k->kind != Kind::kAgent || k->name != "status") continue;
    AgentStatus a;
    try {
      a = nlohmann::json::parse(value).get<AgentStatus>();
    } catch (const nlohmann::json::exception&) {
      continue;
    }
    JobStatus::Node n;
    n.member = k->member;
    n.host = a.host;
    n.pid = a.pid;
    n.nproc = a.nproc;
    n.groupRank = a.groupRank;
    n.round = a.round;
    n.published = a.state;
    n.sinceMs = a.sinceMs;
    n.metrics = a.metrics;
    n.outcome = a.outcome;
    if (auto h = snap.heard.find(k->member); h != snap.heard.end() && h->second) {
      n.heardMs = h->second->count();
    }
    const auto gone = snap.disconnected.find(k->member);
    const bool disconnected = gone != snap.disconnected.end() && gone->second;
    const std::int64_t silence = std::max<std::int64_t>(2 * a.keepAliveMs, 2000);
    n.state = a.state;
    if (!finalState(a.state) &&
        (disconnected || (n.heardMs && a.keepAliveMs > 0 && *n.heardMs > silence))) {
      n.state = "stopped answering";
    }
    if (!st.maxRestarts || a.maxRestarts > *st.maxRestarts) st.maxRestarts = a.maxRestarts;
    st.nodes.push_back(std::move(n));
  }
  // The current round's members by group rank, then the rest, newest round first.
  std::sort(st.nodes.begin(), st.nodes.end(), [&](const auto& a, const auto& b) {
    const bool am = a.round == st.round && a.groupRank >= 0,
               bm = b.round == st.round && b.groupRank >= 0;
    if (am != bm) return am;
    if (a.round != b.round) return a.round > b.round;
    if (a.groupRank != b.groupRank) return a.groupRank < b.groupRank;
    return a.member < b.member;
  });
  return st;
}

nlohmann::json toJson(const JobStatus& st) {
  using nlohmann::json;
  json nodes = json::array();
  json counts = json::object();
  for (const auto& n : st.nodes) {
    json j = {{"member", n.member},    {"host", n.host},
              {"pid", n.pid},          {"group_rank", n.groupRank},
              {"round", n.round},      {"local_world_size", n.nproc},
              {"state", n.state},      {"published_state", n.published},
              {"since_ms", n.sinceMs}, {"heard_ms", n.heardMs ? json(*n.heardMs) : json(nullptr)},
              {"metrics", n.metrics},  {"outcome", n.outcome}};
    nodes.push_back(std::move(j));
    counts[n.state] = counts.value(n.state, 0) + 1;
  }
  json rounds = json::array();
  for (const auto& r : st.rounds) {
    rounds.push_back({{"round", r.round},
                      {"closed", r.closed},
                      {"nodes", r.nodes},
                      {"world_size", r.worldSize},
                      {"ended_by", r.endedBy}});
  }
  json restarts = json::array();
  for (const auto& r : st.restarts) {
    restarts.push_back({{"round", r.round}, {"cause", r.cause}, {"detail", r.detail}});
  }
  json failure = nullptr;
  if (st.lastFailure) {
    const auto& f = *st.lastFailure;
    failure = {{"round", f.round},
               {"rank", f.rank},
               {"local_rank", f.localRank},
               {"pid", f.pid},
               {"host", f.host},
               {"exit_code", f.exitCode ? json(*f.exitCode) : json(nullptr)},
               {"signal", f.signal ? json(*f.signal) : json(nullptr)},
               {"hang", f.hang},
               {"message", f.message}};
  }
  return json{{"run_id", st.runId},
              {"phase", st.phase},
              {"round", st.round},
              {"restarts",
               {{"used", st.restartsUsed},
                {"max", st.maxRestarts ? json(*st.maxRestarts) : json(nullptr)},
                {"list", restarts}}},
              {"final_reason", st.finalReason},
              {"nodes", nodes},
              {"counts", counts},
              {"rounds", rounds},
              {"last_failure", failure}};
}

}  // namespace dtrun::rendezvous
