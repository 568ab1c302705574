#include "rendezvous/dynamic_rendezvous.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/error.h"

namespace dtrun::rendezvous {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

void to_json(nlohmann::json& j, const NodeInfo& n) {
  j = nlohmann::json{
      {"host", n.host}, {"addr", n.addr}, {"pid", n.pid}, {"nproc", n.nproc}, {"role", n.role}};
}

void from_json(const nlohmann::json& j, NodeInfo& n) {
  n.host = j.value("host", "");
  n.addr = j.value("addr", "");
  n.pid = j.value("pid", 0);
  n.nproc = j.value("nproc", 1);
  n.role = j.value("role", "default");
}

namespace {

// Waits are cut into slices so that cancellation, progress lines and the last-call deadline are
// looked at regularly; a slice ends early whenever the awaited key appears.
constexpr milliseconds kSlice(1000);
// How long a member's description may lag behind its join.
constexpr milliseconds kNodeInfoTimeout(10000);

milliseconds until(Clock::time_point t) {
  return std::max(milliseconds(1), std::chrono::ceil<milliseconds>(t - Clock::now()));
}

std::string describe(const NodeInfo& n) {
  return n.host + " (pid " + std::to_string(n.pid) + ", " + std::to_string(n.nproc) + " procs)";
}

}  // namespace

DynamicRendezvous::DynamicRendezvous(std::shared_ptr<Store> store, NodeInfo me,
                                     RendezvousSettings settings,
                                     std::function<void(std::int64_t)> registerMember,
                                     std::shared_ptr<spdlog::logger> log,
                                     std::function<bool()> cancelled)
    : store_(std::move(store)),
      me_(std::move(me)),
      settings_(settings),
      registerMember_(std::move(registerMember)),
      log_(std::move(log)),
      cancelled_(std::move(cancelled)) {
  if (settings_.minNodes < 1 || settings_.minNodes > settings_.maxNodes) {
    throw ConfigError("rendezvous: need 0 < min nodes <= max nodes, got " +
                      std::to_string(settings_.minNodes) + ":" +
                      std::to_string(settings_.maxNodes));
  }
  if (settings_.fixedRank &&
      (settings_.minNodes != settings_.maxNodes || *settings_.fixedRank < 0 ||
       *settings_.fixedRank >= settings_.maxNodes)) {
    throw ConfigError("static rendezvous: --node-rank " + std::to_string(*settings_.fixedRank) +
                      " needs a fixed --nnodes greater than it");
  }
}

void DynamicRendezvous::checkCancelled() {
  if (cancelled_()) throw Error("rendezvous cancelled");
}

void DynamicRendezvous::checkFinished() {
  if (store_->check({"final"})) {
    throw Error("the job has already failed for good: " + store_->get("final", kSlice));
  }
  if (store_->check({"succeeded"})) {
    throw Error("the job has already finished (round " + store_->get("succeeded", kSlice) +
                " succeeded); a new job needs a new --rdzv-id");
  }
}

RoundInfo DynamicRendezvous::join() {
  const auto deadline = Clock::now() + settings_.joinTimeout;
  std::int64_t round = counter("round");
  for (;;) {
    checkCancelled();
    checkFinished();
    RoundInfo info;
    if (joinRound(round, deadline, &info) == Outcome::kJoined) return info;
    // Too late for `round`: say so (the running nodes restart into a bigger round when there
    // is room) and wait for the next one.
    store_->add(roundKey(round, "waiting"), 1);
    store_->add(epochKey(), 1);
    log_->info("rendezvous: round {} closed without this node; waiting for round {}", round,
               round + 1);
    waitForRound(round + 1, deadline);
    round = std::max(round + 1, counter("round"));
  }
}

DynamicRendezvous::Outcome DynamicRendezvous::joinRound(std::int64_t round,
                                                        Clock::time_point deadline,
                                                        RoundInfo* info) {
  const std::string joinKey = roundKey(round, "join");
  const std::string closedKey = roundKey(round, "closed");
  // Register first, so that a node which dies right after its ADD is never a silent member.
  if (registerMember_) registerMember_(round);
  // Roles, before the ADD: every member has done this by the time the round closes, so after
  // the close one CHECK says whether all nodes share a role (the usual case, where role ranks
  // are global ranks) without reading every node's description.
  if (store_->compareSet(roundKey(round, "role"), "", me_.role) != me_.role) {
    store_->set(roundKey(round, "mixed_roles"), "1");
  }
  const std::int64_t mine = store_->add(joinKey, packJoin(1, me_.nproc));
  const int index = joinedNodes(mine) - 1;
  const int offset = joinedProcs(mine) - me_.nproc;
  if (store_->check({closedKey}) &&
      index >= joinedNodes(std::stoll(store_->get(closedKey, kSlice)))) {
    return Outcome::kLate;
  }
  if (!settings_.fixedRank && index >= settings_.maxNodes) return Outcome::kLate;

  const int groupRank = settings_.fixedRank.value_or(index);
  if (settings_.fixedRank) {
    // Static: two agents given the same --node-rank would both believe they are rank k.
    const std::string id = me_.host + ":" + std::to_string(me_.pid);
    Bytes owner = store_->compareSet(roundKey(round, "rank/" + std::to_string(groupRank)), "", id);
    if (owner != id) {
      throw ConfigError("static rendezvous: --node-rank " + std::to_string(groupRank) +
                        " is also used by " + owner);
    }
  }
  store_->set(roundKey(round, "node/" + std::to_string(groupRank)), nlohmann::json(me_).dump());

  // Only a round opened by advance() knows how many nodes to expect back.
  const std::int64_t expect = round > 0 ? counter(roundKey(round, "expect")) : 0;
  const int wanted = settings_.maxNodes;
  int joined = index + 1;
  std::optional<Clock::time_point> minSeen;
  auto lastProgress = Clock::now();
  for (;;) {
    checkCancelled();
    if (joined >= settings_.minNodes && !minSeen) minSeen = Clock::now();
    // Close at once when full, or when every node expected back has joined; otherwise last
    // call runs from the moment this node saw the minimum (torch's rule, seen per node).
    bool close =
        joined >= wanted ||
        (!settings_.fixedRank && expect > 0 && joined >= expect && joined >= settings_.minNodes) ||
        (!settings_.fixedRank && minSeen && Clock::now() - *minSeen >= settings_.lastCallTimeout);
    if (close) {
      const std::int64_t snapshot = store_->add(joinKey, 0);
      store_->compareSet(closedKey, "", std::to_string(snapshot));
      break;
    }
    // The WAIT below returns at once when the round is closed; past the deadline, look first.
    if (Clock::now() >= deadline) {
      if (store_->check({closedKey})) break;
      timedOut(round, joined);
    }
    if (Clock::now() - lastProgress >= settings_.progressInterval) {
      lastProgress = Clock::now();
      log_->warn("rendezvous: waiting for nodes in round {}: {} joined (min {}, max {}); {} s left",
                 round, joined, settings_.minNodes, settings_.maxNodes,
                 std::chrono::duration_cast<std::chrono::seconds>(deadline - Clock::now()).count());
    }
    auto slice = std::min(kSlice, until(deadline));
    if (minSeen && !settings_.fixedRank) {
      slice = std::min(slice, until(*minSeen + settings_.lastCallTimeout));
    }
    try {
      store_->wait({closedKey}, slice);
      break;
    } catch (const TimeoutError&) {
    }
    joined = joinedNodes(store_->add(joinKey, 0));
  }

  const std::int64_t closed = std::stoll(store_->get(closedKey, kSlice));
  if (index >= joinedNodes(closed)) return Outcome::kLate;
  info->round = round;
  info->groupRank = groupRank;
  info->groupWorldSize = joinedNodes(closed);
  info->rankOffset = offset;
  info->worldSize = joinedProcs(closed);
  info->mixedRoles = store_->check({roundKey(round, "mixed_roles")});
  if (settings_.fixedRank) {
    // Arrival order is not rank order: every node's size is needed for the offsets.
    info->nodes = nodesOf(round, info->groupWorldSize, settings_.joinTimeout);
    info->rankOffset = 0;
    for (int r = 0; r < groupRank; ++r) info->rankOffset += info->nodes[r].nproc;
  } else if (info->mixedRoles) {
    // Rare: role ranks need every node's role and size. One MULTI_GET; a node that died
    // between its ADD and its description leaves the list empty (the round restarts anyway).
    try {
      info->nodes = nodesOf(round, info->groupWorldSize, kNodeInfoTimeout);
    } catch (const TimeoutError&) {
      log_->warn(
          "rendezvous: round {}: some node descriptions are missing; role ranks fall back "
          "to global ranks",
          round);
    }
  }
  log_->info("rendezvous: round {} complete: group rank {} of {}, ranks {}..{} of {}", round,
             info->groupRank, info->groupWorldSize, info->rankOffset,
             info->rankOffset + me_.nproc - 1, info->worldSize);
  return Outcome::kJoined;
}

std::vector<NodeInfo> DynamicRendezvous::nodesOf(std::int64_t round, int count,
                                                 milliseconds timeout) {
  std::vector<std::string> keys;
  for (int r = 0; r < count; ++r) keys.push_back(roundKey(round, "node/" + std::to_string(r)));
  std::vector<NodeInfo> nodes;
  for (const auto& v : store_->multiGet(keys, timeout)) {
    nodes.push_back(nlohmann::json::parse(v).get<NodeInfo>());
  }
  return nodes;
}

void DynamicRendezvous::waitForRound(std::int64_t round, Clock::time_point deadline) {
  const std::string opened = roundKey(round, "opened");
  for (;;) {
    checkCancelled();
    checkFinished();
    if (Clock::now() >= deadline) {
      throw TimeoutError("rendezvous: waited " +
                         std::to_string(settings_.joinTimeout.count() / 1000) + " s for round " +
                         std::to_string(round) + " to open");
    }
    try {
      store_->wait({opened}, std::min(kSlice, until(deadline)));
      return;
    } catch (const TimeoutError&) {
    }
  }
}

void DynamicRendezvous::timedOut(std::int64_t round, int joined) {
  std::string who;
  for (int r = 0; r < joined; ++r) {
    const std::string key = roundKey(round, "node/" + std::to_string(r));
    if (!store_->check({key})) continue;
    if (!who.empty()) who += ", ";
    who += describe(nlohmann::json::parse(store_->get(key, kSlice)).get<NodeInfo>());
  }
  throw TimeoutError("rendezvous: round " + std::to_string(round) + " timed out after " +
                     std::to_string(settings_.joinTimeout.count() / 1000) + " s with " +
                     std::to_string(joined) + " node(s) of min " +
                     std::to_string(settings_.minNodes) + ", max " +
                     std::to_string(settings_.maxNodes) + (who.empty() ? "" : ": " + who));
}

JobState DynamicRendezvous::state(std::int64_t round) {
  JobState s;
  s.round = counter("round");
  if (store_->check({"final"})) s.final = store_->get("final", kSlice);
  s.gone = counter(goneKey(round));
  s.waiting = counter(roundKey(round, "waiting"));
  s.done = counter(roundKey(round, "done"));
  s.restarts = counter("restarts");
  return s;
}

bool DynamicRendezvous::advance(std::int64_t round, AdvanceReason reason, int maxRestarts) {
  if (store_->add(roundKey(round, "advance"), 1) != 1) return false;
  const bool failure = reason == AdvanceReason::kFailure;
  // Who will be back: the members still connected plus the nodes that came too late.
  const std::int64_t closed = store_->check({roundKey(round, "closed")})
                                  ? std::stoll(store_->get(roundKey(round, "closed"), kSlice))
                                  : 0;
  const std::int64_t back =
      joinedNodes(closed) - counter(goneKey(round)) + counter(roundKey(round, "waiting"));
  if (failure) {
    const std::int64_t restarts = store_->add("restarts", 1);
    if (restarts > maxRestarts) {
      nlohmann::json final = {{"reason", "max_restarts"},
                              {"round", round},
                              {"restarts", restarts - 1},
                              {"max_restarts", maxRestarts}};
      store_->set("final", final.dump());
      store_->add(epochKey(), 1);
      log_->warn("rendezvous: round {} failed and the {} restart(s) allowed are used up", round,
                 maxRestarts);
      return true;
    }
  }
  store_->set(roundKey(round + 1, "expect"),
              std::to_string(std::clamp<std::int64_t>(back, 1, settings_.maxNodes)));
  store_->add("round", 1);
  store_->set(roundKey(round + 1, "opened"), failure ? "failure" : "membership");
  store_->add(epochKey(), 1);
  log_->info("rendezvous: round {} ends ({}); round {} is open", round,
             failure ? "worker failure" : "membership change", round + 1);
  return true;
}

void DynamicRendezvous::reportFailure(std::int64_t round, const std::string& failureJson) {
  store_->append(roundKey(round, "failures"), failureJson + "\n");
  store_->add(epochKey(), 1);
}

std::vector<std::string> DynamicRendezvous::failures(std::int64_t round) {
  std::vector<std::string> out;
  const std::string key = roundKey(round, "failures");
  if (!store_->check({key})) return out;
  const Bytes all = store_->get(key, kSlice);
  std::size_t start = 0;
  while (start < all.size()) {
    auto end = all.find('\n', start);
    if (end == std::string::npos) end = all.size();
    if (end > start) out.push_back(all.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::int64_t DynamicRendezvous::markDone(std::int64_t round, int groupWorldSize) {
  std::int64_t done = store_->add(roundKey(round, "done"), 1);
  // Only the last one wakes everybody: N nodes finishing must not cost N x N state reads.
  if (done >= groupWorldSize) {
    store_->set("succeeded", std::to_string(round));
    store_->add(epochKey(), 1);
  }
  return done;
}

}  // namespace dtrun::rendezvous
