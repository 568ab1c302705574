#include "rendezvous/dynamic_rendezvous.h"

#include <algorithm>
#include <ctime>
#include <nlohmann/json.hpp>

#include "common/decimal.h"
#include "common/error.h"
#include "common/log_text.h"
#include "common/node_id.h"
#include "rendezvous/job_record.h"
#include "rendezvous/key_values.h"
#include "rendezvous/store_core.h"

namespace dtrun::rendezvous {

using keys::roundKey;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

void to_json(nlohmann::json& j, const NodeInfo& n) {
  j = nlohmann::json{
      {"host", n.host}, {"addr", n.addr}, {"pid", n.pid}, {"nproc", n.nproc}, {"role", n.role}};
  if (!n.member.empty()) j["member"] = n.member;
}

void from_json(const nlohmann::json& j, NodeInfo& n) {
  n.host = j.value("host", "");
  n.addr = j.value("addr", "");
  n.pid = j.value("pid", 0);
  n.nproc = j.value("nproc", 1);
  n.role = j.value("role", "default");
  n.member = j.value("member", "");
}

namespace {

// How long a member's description may lag behind its join.
constexpr milliseconds kNodeInfoTimeout(10000);
// The waiting line names at most this many nodes (who came, who is missing); past that, counts.
constexpr int kRosterLimit = 16;

milliseconds until(Clock::time_point t) {
  return std::max(milliseconds(1), std::chrono::ceil<milliseconds>(t - Clock::now()));
}

std::string describe(const NodeInfo& n) {
  return n.host + " (pid " + std::to_string(n.pid) + ", " + std::to_string(n.nproc) + " procs)";
}

std::string joinNames(const std::vector<std::string>& names, std::size_t total) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  if (total > names.size()) {
    out += (out.empty() ? "" : " and ") + std::to_string(total - names.size()) + " more";
  }
  return out;
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
  // The member id tells apart two agents with the same host and pid (containers).
  if (me_.member.empty()) me_.member = nodeId(me_.host, me_.pid, makeNonce());
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
  if (!store_->check({keys::kFinal}) && !store_->check({keys::kSucceeded})) return;
  JobRecord over = readJobRecord(*store_);
  if (over.final) throw JobOverError("the job has already failed for good: " + *over.final, over);
  throw JobOverError("the job has already finished (round " + std::to_string(*over.succeeded) +
                         " succeeded); a new job needs a new --rdzv-id",
                     over);
}

RoundInfo DynamicRendezvous::join() {
  const auto deadline = Clock::now() + settings_.joinTimeout;
  std::int64_t round = counter(keys::kRound);
  for (;;) {
    checkCancelled();
    checkFinished();
    RoundInfo info;
    if (joinRound(round, deadline, &info) == Outcome::kJoined) return info;
    // Too late for `round`: say so (the running nodes restart into a bigger round when there
    // is room) and wait for the next one.
    store_->add(roundKey(round, keys::kWaiting), 1);
    store_->add(keys::kEpoch, 1);
    log_->info("rendezvous: round {} closed without this node; waiting for round {}", round,
               round + 1);
    waitForRound(round + 1, deadline);
    round = std::max(round + 1, counter(keys::kRound));
  }
}

DynamicRendezvous::Outcome DynamicRendezvous::joinRound(std::int64_t round,
                                                        Clock::time_point deadline,
                                                        RoundInfo* info) {
  // advance() writes r<R>/expect before it moves the round counter to R, so a round without it
  // was opened by a stranger's ADD or SET on "round": refused, so that nobody can force
  // restarts that --max-restarts would never count.
  if (round > 0 && !store_->check({roundKey(round, keys::kExpect)})) {
    const std::string writer = store_->writerOf(keys::kRound);
    throw ProtocolError("rendezvous key 'round' says round " + std::to_string(round) +
                        ", which no dtrun agent opened (" + roundKey(round, keys::kExpect) +
                        " is missing): a client other than a dtrun agent moved the round counter" +
                        (writer.empty() ? "" : " (its last write came from " + writer + ")"));
  }
  const std::string joinKey = roundKey(round, keys::kJoin);
  const std::string closedKey = roundKey(round, keys::kClosed);
  // Register first, so that a node which dies right after its ADD is never a silent member.
  if (registerMember_) registerMember_(round);
  // Roles, before the ADD: every member has done this by the time the round closes, so after
  // the close one CHECK says whether all nodes share a role (the usual case, where role ranks
  // are global ranks) without reading every node's description.
  if (store_->compareSet(roundKey(round, keys::kRole), "", me_.role) != me_.role) {
    store_->set(roundKey(round, keys::kMixedRoles), "1");
  }
  const std::int64_t mine = store_->add(joinKey, packJoin(1, me_.nproc));
  const int index = joinedNodes(mine) - 1;
  const int offset = joinedProcs(mine) - me_.nproc;
  if (store_->check({closedKey}) &&
      index >= joinedNodes(keyNumber(*store_, closedKey, store_->get(closedKey, kSlice)))) {
    return Outcome::kLate;
  }
  if (!settings_.fixedRank && index >= settings_.maxNodes) return Outcome::kLate;

  const int groupRank = settings_.fixedRank.value_or(index);
  if (settings_.fixedRank) {
    // Static: two agents given the same --node-rank would both believe they are rank k.
    const std::string id = nodeId(me_.host, me_.pid);
    Bytes owner = store_->compareSet(keys::rankKey(round, groupRank), "", id);
    if (owner != id) {
      throw ConfigError("static rendezvous: --node-rank " + std::to_string(groupRank) +
                        " is also used by " + owner);
    }
  }
  store_->set(keys::nodeKey(round, groupRank), nlohmann::json(me_).dump());

  // Only a round opened by advance() knows how many nodes to expect back.
  const std::int64_t expect = round > 0 ? counter(roundKey(round, keys::kExpect)) : 0;
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
      std::optional<Clock::time_point> closesAt;
      if (minSeen && !settings_.fixedRank) closesAt = *minSeen + settings_.lastCallTimeout;
      logWaiting(round, joined, deadline, closesAt);
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

  const std::int64_t closed = keyNumber(*store_, closedKey, store_->get(closedKey, kSlice));
  if (index >= joinedNodes(closed)) return Outcome::kLate;
  info->round = round;
  info->groupRank = groupRank;
  info->groupWorldSize = joinedNodes(closed);
  info->rankOffset = offset;
  info->worldSize = joinedProcs(closed);
  info->mixedRoles = store_->check({roundKey(round, keys::kMixedRoles)});
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
  for (int r = 0; r < count; ++r) keys.push_back(keys::nodeKey(round, r));
  std::vector<NodeInfo> nodes;
  auto values = store_->multiGet(keys, timeout);
  for (std::size_t i = 0; i < values.size(); ++i)
    nodes.push_back(keyNodeInfo(*store_, keys[i], values[i]));
  return nodes;
}

void DynamicRendezvous::waitForRound(std::int64_t round, Clock::time_point deadline) {
  const std::string opened = roundKey(round, keys::kOpened);
  auto lastProgress = Clock::now();
  bool opening = false;  // advance() tried once from here
  for (;;) {
    checkCancelled();
    checkFinished();
    if (Clock::now() - lastProgress >= settings_.progressInterval) {
      lastProgress = Clock::now();
      // Round round-1 closed without this node; it opens the next one when a member leaves or
      // fails, or restarts into it at once when the group has room (< max nodes).
      const std::string closed = roundKey(round - 1, keys::kClosed);
      const int running = store_->check({closed})
                              ? joinedNodes(keyNumber(*store_, closed, store_->get(closed, kSlice)))
                              : 0;
      log_->warn(
          "rendezvous: waiting until {} (join timeout) for round {} to open: round {} runs "
          "without this node ({} node(s), max {}); the next round opens when a node fails or "
          "leaves, or at once while there is room",
          wallClockText(deadline), round, round - 1, running, settings_.maxNodes);
    }
    // The running round's members open the next one; when every one of them is gone (killed,
    // or its lease lapsed) nobody will, and advance() may be run by any node: this one does.
    if (!opening && everyMemberGone(round - 1)) {
      opening = true;
      log_->warn("rendezvous: every node of round {} is gone; opening round {} from here",
                 round - 1, round);
      advance(round - 1, AdvanceReason::kMembership, settings_.maxRestarts);
      if (store_->check({opened})) return;
    }
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

bool DynamicRendezvous::everyMemberGone(std::int64_t round) {
  const std::string closed = roundKey(round, keys::kClosed);
  if (round < 0 || !store_->check({closed})) return false;
  const int members = joinedNodes(keyNumber(*store_, closed, store_->get(closed, kSlice)));
  return members > 0 && counter(keys::goneKey(round)) >= members;
}

std::vector<NodeInfo> DynamicRendezvous::roster(std::int64_t round, int count) {
  std::vector<NodeInfo> out;
  for (int r = 0; r < std::min(count, kRosterLimit); ++r) {
    const std::string key = keys::nodeKey(round, r);
    if (!store_->check({key})) continue;
    try {
      out.push_back(nlohmann::json::parse(store_->get(key, kSlice)).get<NodeInfo>());
    } catch (const nlohmann::json::exception&) {
      // A description this version cannot read: the line is informational, skip it.
    }
  }
  return out;
}

void DynamicRendezvous::logWaiting(std::int64_t round, int joined, Clock::time_point deadline,
                                   std::optional<Clock::time_point> closesAt) {
  // Who came, by name.
  const auto came = roster(round, joined);
  std::vector<std::string> cameNames;
  for (const auto& n : came) cameNames.push_back(n.host + " (pid " + std::to_string(n.pid) + ")");
  // Who is missing: by name, the previous round's members that have not come back; else how
  // many more the round needs (and may take).
  std::vector<std::string> missing;
  std::size_t missingCount = 0;
  if (settings_.fixedRank) {
    for (int g = 0; g < settings_.maxNodes; ++g) {
      if (store_->check({keys::rankKey(round, g)})) continue;
      ++missingCount;
      if (missing.size() < static_cast<std::size_t>(kRosterLimit)) {
        missing.push_back("--node-rank " + std::to_string(g));
      }
    }
  } else if (round > 0 && joined <= kRosterLimit &&
             store_->check({roundKey(round - 1, keys::kClosed)})) {
    const int before =
        joinedNodes(keyNumber(*store_, roundKey(round - 1, keys::kClosed),
                              store_->get(roundKey(round - 1, keys::kClosed), kSlice)));
    if (before <= kRosterLimit) {
      for (const auto& n : roster(round - 1, before)) {
        const bool back = std::any_of(came.begin(), came.end(), [&](const NodeInfo& c) {
          return c.host == n.host && c.pid == n.pid;
        });
        if (!back) missing.push_back(n.host + " (pid " + std::to_string(n.pid) + ")");
      }
      missingCount = missing.size();
    }
  }
  std::string need;
  if (joined < settings_.minNodes) {
    need = std::to_string(settings_.minNodes - joined) + " more for the minimum of " +
           std::to_string(settings_.minNodes);
  } else if (closesAt) {
    need = "closing at " + wallClockText(*closesAt) + " (last call) unless " +
           std::to_string(settings_.maxNodes - joined) + " more come first";
  }
  std::string line = "rendezvous: round " + std::to_string(round) + " is waiting for nodes until " +
                     wallClockText(deadline) + " (join timeout): " + std::to_string(joined) +
                     " came (min " + std::to_string(settings_.minNodes) + ", max " +
                     std::to_string(settings_.maxNodes) + ")";
  if (!cameNames.empty()) line += ": " + joinNames(cameNames, static_cast<std::size_t>(joined));
  if (missingCount > 0) {
    line += "; missing: " + joinNames(missing, missingCount);
    if (!settings_.fixedRank) line += " from round " + std::to_string(round - 1);
  }
  if (!need.empty()) line += "; " + need;
  log_->warn("{}", line);
}

void DynamicRendezvous::timedOut(std::int64_t round, int joined) {
  std::string who;
  for (int r = 0; r < joined; ++r) {
    const std::string key = keys::nodeKey(round, r);
    if (!store_->check({key})) continue;
    if (!who.empty()) who += ", ";
    who += describe(keyNodeInfo(*store_, key, store_->get(key, kSlice)));
  }
  throw TimeoutError("rendezvous: round " + std::to_string(round) + " timed out after " +
                     std::to_string(settings_.joinTimeout.count() / 1000) + " s with " +
                     std::to_string(joined) + " node(s) of min " +
                     std::to_string(settings_.minNodes) + ", max " +
                     std::to_string(settings_.maxNodes) + (who.empty() ? "" : ": " + who));
}

}  // namespace dtrun::rendezvous
