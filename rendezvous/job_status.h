// A job as `dtrun status` shows it, worked out from one read of its keys (rendezvous/
// rendezvous_keys.h): the round and how it is doing, every agent's state and when the store
// last heard from it, the rounds so far with their world sizes, the restarts and their causes,
// the last failure. Also what each agent publishes for it (AgentStatus). Pure: the reading is
// rendezvous/job_reader.h's (docs/observe.md, "dtrun status").
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

namespace dtrun::rendezvous {

/// What an agent publishes at agent/<member>/status when its state changes.
struct AgentStatus {
  std::string host;
  int pid = 0;
  int nproc = 0;
  std::string role = "default";
  /// joining, running, stopping, waiting, done, finishing; at the end done, failed, left, lost.
  std::string state;
  std::int64_t round = -1;       ///< the round it is in, or was last in (-1: none yet)
  int groupRank = -1;            ///< its group rank in `round` (-1: none)
  std::int64_t sinceMs = 0;      ///< epoch ms of the state change (the agent's clock)
  int maxRestarts = 0;           ///< its --max-restarts
  std::int64_t keepAliveMs = 0;  ///< its heartbeat interval (silence past 2x: not answering)
  std::string metrics;           ///< host:port of its metrics endpoint, "" = none
  std::string outcome;           ///< once finished (agent/outcome.h's names)
};
void to_json(nlohmann::json& j, const AgentStatus& s);
void from_json(const nlohmann::json& j, AgentStatus& s);

/// One read of a job: its keys' values (relative to the job's prefix; counters already summed)
/// and what the store or etcd says of each agent's connection.
struct JobSnapshot {
  std::map<std::string, std::string> values;
  /// Per member: how long ago the store (or etcd) last heard from it; nullopt: unknown.
  std::map<std::string, std::optional<std::chrono::milliseconds>> heard;
  /// Members whose connection (c10d) or lease (etcd) is gone.
  std::map<std::string, bool> disconnected;
  std::int64_t readAtMs = 0;  ///< epoch ms of the read (the reader's clock)
};

/// The keys of a job, among `listed` (every key under its prefix), that describeJob() reads:
/// everything but the node descriptions and etcd's marks. Pure.
std::vector<std::string> keysToRead(const std::vector<std::string>& listed);

struct JobStatus {
  struct Node {
    std::string member, host;
    int pid = 0;
    int nproc = 0;
    int groupRank = -1;
    std::int64_t round = -1;
    std::string state;                    ///< the published state, or "stopped answering"
    std::string published;                ///< the state as the agent last published it
    std::optional<std::int64_t> heardMs;  ///< ms since last heard from (nullopt: unknown)
    std::int64_t sinceMs = 0;
    std::string metrics;
    std::string outcome;
  };
  struct Round {
    std::int64_t round = 0;
    bool closed = false;
    int nodes = 0;        ///< closed: its nodes; open: joined so far
    int worldSize = 0;    ///< closed: its workers
    std::string endedBy;  ///< "failure", "membership", "" (running, or the last)
  };
  struct Restart {
    std::int64_t round = 0;  ///< the round that ended
    std::string cause;       ///< worker_failure, worker_hung, node_left, node_joined
    std::string detail;      ///< the failure, or how many nodes left or came
  };
  struct Failure {
    std::int64_t round = 0;
    int rank = 0, localRank = 0, pid = 0;
    std::string host;
    std::optional<int> exitCode;  ///< nullopt: killed by `signal`
    std::optional<int> signal;
    std::string hang;     ///< "timer", "stall", or "" when it did not hang
    std::string message;  ///< the last line of its traceback or stderr
  };

  std::string runId;
  std::string phase;  ///< rendezvous, running, succeeded, failed
  std::int64_t round = 0;
  std::int64_t restartsUsed = 0;
  std::optional<int> maxRestarts;  ///< from the agents' statuses
  std::string finalReason;         ///< failed: max_restarts, failed_after_success
  std::vector<Node> nodes;         ///< the agents of the current round first, by group rank
  std::vector<Round> rounds;
  std::vector<Restart> restarts;
  std::optional<Failure> lastFailure;
};

/// Works the snapshot out. Agents that never published a status are not listed. Pure.
JobStatus describeJob(const std::string& runId, const JobSnapshot& snapshot);
/// The status as one JSON object (`dtrun status --json`).
nlohmann::json toJson(const JobStatus& status);

}  // namespace dtrun::rendezvous
