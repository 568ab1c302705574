// Process ancestry from /proc, for the agent's questions about processes it did not spawn
// itself: "is this pid one of my workers, or something one of them started?" (the file timer's
// check of who sent a request) and "which of my children are adopted orphans?".
//
// A worker is the leader of its own process group (WorkerProcess), so a process belongs to a
// worker when the worker is among its ancestors, or when it still sits in the worker's process
// group after its parent died (a daemonised grandchild re-parented to the agent, the subreaper).
#pragma once

#include <map>
#include <optional>
#include <string>

namespace dtrun::agent {

/// The fields of /proc/<pid>/stat the agent uses.
struct ProcStat {
  char state = '?';  ///< R, S, D, Z, T, ...
  int ppid = 0;
  int pgrp = 0;
  // Resource use (the metrics endpoint reports the agent's own): clock ticks and pages.
  unsigned long long utimeTicks = 0;
  unsigned long long stimeTicks = 0;
  long threads = 0;
  unsigned long long startTicks = 0;  ///< since boot
  unsigned long long vsizeBytes = 0;
  long rssPages = 0;
};

/// /proc/<pid>/stat, or nullopt when the process is gone (or unreadable). Blocking (procfs);
/// any thread.
std::optional<ProcStat> readProcStat(int pid);

/// What a state letter of /proc/<pid>/stat means to someone waiting for the process to exit:
/// "running", "stopped (SIGSTOP)", "uninterruptible (D: I/O, a driver, a frozen cgroup)"... Pure.
std::string describeProcState(char state);

/// The value `roots` maps to the worker that `pid` is, descends from, or shares a process group
/// with; nullopt for a process that is none of these, gone, or a zombie. `roots` maps worker
/// pids (process group leaders) to what the caller calls them (a local rank). Walks at most 64
/// ancestors. Blocking (procfs); any thread.
std::optional<int> ownerOf(int pid, const std::map<int, int>& roots);

}  // namespace dtrun::agent
