// DynamicRendezvous: dtrun's c10d-style rendezvous, plus the job-wide state every agent shares.
//
// Joining costs O(1) store round trips per node (docs/design.md, decision 2): one ADD on the
// round's counter, which packs `nodes << 32 | procs`, hands each node its group rank and its global
// rank offset at once; the round closes with one COMPARE_SET of its `closed` key, whose value is
// the counter as it stood then. A node whose index is past the closed count waits for the next
// round. Keys (their names: rendezvous/rendezvous_keys.h), all under the job's PrefixStore
// ("dtrun/<run id>"):
//
//   round              the open round (a counter; moved only by the winner of `advance`)
//   epoch              bumped by every event an agent must look at (watchers WAIT_CHANGE it)
//   restarts           failure restarts so far, job-wide (checked against --max-restarts)
//   final              set once the job has failed for good (JSON)
//   r<R>/join          packed join counter          r<R>/closed    packed counter at close
//   r<R>/expect        nodes expected in round R    r<R>/node/<i>  NodeInfo JSON of rank i
//   r<R>/role          the first joiner's role      r<R>/mixed_roles  set when roles differ
//   r<R>/gone          members whose connection closed (ADD_ON_CLOSE by the TCP layer)
//   r<R>/waiting       nodes that came too late for R
//   r<R>/advance       first ADD wins the right to open R+1     r<R+1>/opened  R+1 is open
//   r<R>/failures      worker failures, one JSON per line       r<R>/done      nodes finished
//   succeeded          the round in which every node finished (late nodes then give up)
//   agents             agents attached to the job's store (c10d: +1 when an agent connects, -1
//                      by ADD_ON_CLOSE when its watch connection closes): the store's host
//                      waits for the others to leave before it takes the record away
//
// Round life:  open --(max joined | expected joined | last call after min)--> closed
//              closed --(failure | member gone | late node waiting)--> advance --> R+1 open
//
// Static rendezvous (torchrun's legacy mode) is the same protocol with the group rank fixed to
// --node-rank and the round closing when all --nnodes have joined.
#pragma once

#include <spdlog/logger.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "rendezvous/rendezvous_keys.h"
#include "rendezvous/store.h"

namespace dtrun::rendezvous {

/// What a node tells the others about itself.
struct NodeInfo {
  std::string host;  ///< hostname, for reports
  std::string addr;  ///< address the other nodes reach it on
  int pid = 0;       ///< agent pid
  int nproc = 1;     ///< workers on this node
  std::string role = "default";
  /// The agent's member id (nodeId(host, pid, nonce): "host:pid:nonce"), which names its status
  /// keys;
  /// "" in descriptions written before agents published one.
  std::string member;
};
void to_json(nlohmann::json& j, const NodeInfo& n);
void from_json(const nlohmann::json& j, NodeInfo& n);

struct RendezvousSettings {
  int minNodes = 1;
  int maxNodes = 1;
  std::optional<int> fixedRank;  ///< static backend: the group rank is --node-rank
  std::chrono::milliseconds joinTimeout = std::chrono::seconds(600);
  std::chrono::milliseconds lastCallTimeout = std::chrono::seconds(30);
  std::chrono::milliseconds progressInterval = std::chrono::seconds(5);
  /// --max-restarts: what a waiting node that opens the next round itself (every member of the
  /// running one gone) checks a failure claim of the round against, as its members would have.
  int maxRestarts = 0;
};

/// This node's place in a closed round.
struct RoundInfo {
  std::int64_t round = 0;
  int groupRank = 0;
  int groupWorldSize = 1;
  int rankOffset = 0;  ///< global rank of local rank 0
  int worldSize = 1;
  bool mixedRoles = false;  ///< the nodes of this round do not all share one --role
  /// Every node's description by group rank: filled for static rounds and when roles are mixed
  /// (reading them is O(N) per node, which the usual round does without).
  std::vector<NodeInfo> nodes;
};

/// A snapshot of the job, read when the epoch changes.
struct JobState {
  std::int64_t round = 0;            ///< the open round
  std::optional<std::string> final;  ///< JSON, once the job has failed for good
  std::int64_t gone = 0;             ///< members of the asked round whose connection closed
  std::int64_t waiting = 0;          ///< late nodes waiting for a round after the asked one
  std::int64_t done = 0;             ///< members of the asked round whose workers all succeeded
  std::int64_t restarts = 0;         ///< failure restarts so far
  std::optional<std::int64_t> succeeded;  ///< the round in which every node's workers succeeded
  /// Agents still attached to the job (the c10d store counts them; 0 where nothing counts).
  std::int64_t agents = 0;
  /// Once the job is past the asked round: why that round ended, "failure" or "membership".
  std::string endedBy;
};

using keys::AdvanceReason;

class DynamicRendezvous {
 public:
  /// `store`: the job's store. `me.member` names this agent in its claims (one is made when
  /// empty). `registerMember(round)` runs before this node joins `round`; the
  /// TCP layer makes the server bump r<round>/gone and epoch when this node's connection closes
  /// (unit tests pass a function that does nothing, and simulate deaths by hand). `cancelled`
  /// is polled between waits. Blocking; one thread at a time.
  DynamicRendezvous(
      std::shared_ptr<Store> store, NodeInfo me, RendezvousSettings settings,
      std::function<void(std::int64_t round)> registerMember, std::shared_ptr<spdlog::logger> log,
      std::function<bool()> cancelled = [] { return false; });

  /// Joins the open round (or the next one, when late) until a round closes with this node in
  /// it. Throws TimeoutError after the join timeout naming who came, JobOverError when the job
  /// already succeeded or failed for good, and whatever the store throws.
  RoundInfo join();

  /// Reads the job's state as seen from `round`.
  JobState state(std::int64_t round);

  /// Ends `round` and opens the next one; true for the node whose call decided it (the first to
  /// ask). A failure counts one restart, job-wide; past `maxRestarts` the job is marked final
  /// instead and no round opens. Every call completes every step, idempotently: when the node
  /// that decided dies half-way, the next node that asks (they all do once its connection
  /// closes) finishes the job, and nothing counts twice. A round in which a node is done never
  /// restarts: a failure makes the job final ("failed_after_success"), a membership change
  /// does nothing (false).
  bool advance(std::int64_t round, AdvanceReason reason, int maxRestarts);

  /// Records a worker failure of `round` (one JSON document, no newlines) and bumps the epoch.
  void reportFailure(std::int64_t round, const std::string& failureJson);
  /// Every failure recorded for `round`, oldest first.
  std::vector<std::string> failures(std::int64_t round) { return failuresOf(*store_, round); }
  /// The same, read from any job store (agent/ reads a job that is over on a fresh connection).
  static std::vector<std::string> failuresOf(Store& job, std::int64_t round);

  /// This node's workers all succeeded in `round` (of `groupWorldSize` nodes); returns how many
  /// nodes have so far. The last one bumps the epoch.
  std::int64_t markDone(std::int64_t round, int groupWorldSize);

  /// This agent's member id (NodeInfo::member, made when the caller gave none).
  const std::string& member() const { return me_.member; }

 private:
  // Waits are cut into slices so that cancellation, progress lines and the last-call deadline
  // are looked at regularly; a slice ends early whenever the awaited key appears.
  static constexpr std::chrono::milliseconds kSlice{1000};
  enum class Outcome { kJoined, kLate };
  Outcome joinRound(std::int64_t round, std::chrono::steady_clock::time_point deadline,
                    RoundInfo* info);
  void waitForRound(std::int64_t round, std::chrono::steady_clock::time_point deadline);
  /// True when `round` closed and every one of its members is gone: nobody is left to open the
  /// next round.
  bool everyMemberGone(std::int64_t round);
  std::vector<NodeInfo> nodesOf(std::int64_t round, int count, std::chrono::milliseconds timeout);
  std::int64_t counter(const std::string& key) { return store_->add(key, 0); }
  void checkCancelled();
  /// Throws when the job already failed for good or succeeded: nothing left to join.
  void checkFinished();
  [[noreturn]] void timedOut(std::int64_t round, int joined);
  /// The periodic "waiting for nodes" line: who came, who is missing, until when.
  void logWaiting(std::int64_t round, int joined, std::chrono::steady_clock::time_point deadline,
                  std::optional<std::chrono::steady_clock::time_point> closesAt);
  /// Descriptions of round `round`'s members 0..count-1 that have published one (at most
  /// kRosterLimit are read: the line is for people, and costs O(1) per waiting node).
  std::vector<NodeInfo> roster(std::int64_t round, int count);

  std::shared_ptr<Store> store_;
  NodeInfo me_;
  RendezvousSettings settings_;
  std::function<void(std::int64_t)> registerMember_;
  std::shared_ptr<spdlog::logger> log_;
  std::function<bool()> cancelled_;
};

using keys::joinedNodes;
using keys::joinedProcs;
using keys::packJoin;

}  // namespace dtrun::rendezvous
