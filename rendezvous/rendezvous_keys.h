// The rendezvous' keys: every name the protocol, the agents' job links and `dtrun status` use
// under a job's prefix, "dtrun/<run id>/", and how those names and their values are read back.
// One place, so that a writer and its readers (the c10d and etcd backends, the status reader)
// can never disagree about a spelling (docs/rendezvous.md, "Keys").
//
//   round  epoch  restarts  final  succeeded  agents job-wide
//   r<R>/<name>   r<R>/node/<i>  r<R>/rank/<g>      one round (names below)
//   r<R>/alive/<member>  r<R>/gone_mark/<member>    etcd: a member's lease and its gone mark
//   members/<member>                                etcd: every live agent, on its lease
//   agent/<member>/status  agent/<member>/gone      what each agent publishes for `dtrun status`
//
// <member> is "host:pid:nonce" (common/node_id.h): one agent process, told apart from another
// with the same host and pid (containers) by a random nonce.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dtrun::rendezvous::keys {

// Job-wide keys (std::string: they are passed to the Store interface as they are).
inline const std::string kRound = "round";          ///< the open round (a counter)
inline const std::string kEpoch = "epoch";          ///< bumped by every event to look at
inline const std::string kRestarts = "restarts";    ///< failure restarts so far
inline const std::string kFinal = "final";          ///< JSON: the job failed for good
inline const std::string kSucceeded = "succeeded";  ///< the round every node finished
inline const std::string kAgents = "agents";        ///< agents attached (c10d: a counter)

// Names inside a round, r<R>/<name>.
inline const std::string kJoin = "join";               ///< packed join counter (packJoin)
inline const std::string kClosed = "closed";           ///< the join counter when it closed
inline const std::string kExpect = "expect";           ///< nodes the round expects
inline const std::string kRole = "role";               ///< the first joiner's role
inline const std::string kMixedRoles = "mixed_roles";  ///< set when roles differ
inline const std::string kGone = "gone";               ///< members whose connection closed
inline const std::string kWaiting = "waiting";         ///< nodes that came too late
inline const std::string kAdvance = "advance";         ///< the claim that ended the round
inline const std::string kRoundRestarts = "restarts";  ///< restarts once counted
inline const std::string kOpened = "opened";           ///< the round is open: why
inline const std::string kFailures = "failures";       ///< JSON lines, one per failure
inline const std::string kDone = "done";               ///< nodes whose workers succeeded
inline const std::string kMaster = "master";           ///< --no-agent-store: host:port
inline const std::string kStore = "store";             ///< etcd: "host:port member"

/// "dtrun/<run id>": the prefix of every key of one job (a PrefixStore adds the "/").
std::string jobPrefix(std::string_view runId);
/// "r<R>/<name>".
std::string roundKey(std::int64_t round, std::string_view name);
/// "r<R>/node/<groupRank>": that member's NodeInfo JSON.
std::string nodeKey(std::int64_t round, int groupRank);
/// "r<R>/rank/<groupRank>": the static backend's claim of a --node-rank.
std::string rankKey(std::int64_t round, int groupRank);
/// "r<R>/gone": what a member's closing connection bumps (c10d: ADD_ON_CLOSE).
inline std::string goneKey(std::int64_t round) { return roundKey(round, kGone); }
/// "r<R>/alive/<member>" (etcd: put on the member's lease before it joins round R).
std::string aliveKey(std::int64_t round, std::string_view member);
/// "r<R>/gone_mark/<member>" (etcd: set once, by whoever counts the member in r<R>/gone).
std::string goneMarkKey(std::int64_t round, std::string_view member);
/// "members/" and "members/<member>" (etcd: every live agent, on its lease).
inline const std::string kMembersDir = "members/";
std::string memberKey(std::string_view member);
/// "agent/<member>/status": the agent's AgentStatus JSON, rewritten when its state changes.
std::string agentStatusKey(std::string_view member);
/// "agent/<member>/gone": c10d: set to 1 by the store when the agent's membership connection
/// closes (ADD_ON_CLOSE), and the key the store answers DTRUN_HEARD for.
std::string agentGoneKey(std::string_view member);
inline const std::string kAgentDir = "agent/";

/// A key of a job, relative to its prefix, taken apart.
struct ParsedKey {
  enum class Kind { kJob, kRound, kAgent, kMember };
  Kind kind = Kind::kJob;
  std::string name;          ///< kJob: "round", ...; kRound: "closed", "node", "alive", ...;
                             ///< kAgent: "status" or "gone"
  std::int64_t round = -1;   ///< kRound
  std::optional<int> index;  ///< kRound "node"/"rank": the group rank
  std::string member;        ///< kRound "alive"/"gone_mark", kAgent, kMember
};
/// Reads a key relative to the job's prefix ("r3/node/1", "agent/h:1:ab/status"); nullopt for
/// anything that is not a key of this module's shape (etcd counter increments included).
std::optional<ParsedKey> parseKey(std::string_view key);

/// Packs and unpacks the join counter: nodes in the high 32 bits, processes in the low 32.
constexpr std::int64_t packJoin(std::int64_t nodes, std::int64_t procs) {
  return (nodes << 32) | procs;
}
constexpr int joinedNodes(std::int64_t packed) { return static_cast<int>(packed >> 32); }
constexpr int joinedProcs(std::int64_t packed) { return static_cast<int>(packed & 0xffffffff); }

/// Why a round ends early.
enum class AdvanceReason { kFailure, kMembership };
/// r<R>/advance's value: "failure <member>" or "membership <member>".
std::string claimValue(AdvanceReason reason, std::string_view member);
/// The claim taken apart; nullopt when `value` is not one.
struct Claim {
  AdvanceReason reason = AdvanceReason::kFailure;
  std::string member;  ///< who decided
};
std::optional<Claim> parseClaim(std::string_view value);
/// r<R+1>/opened's value for a round opened for `reason`: "failure" or "membership".
std::string_view openedValue(AdvanceReason reason);

}  // namespace dtrun::rendezvous::keys
