#include "agent/process_tree.h"

#include <cstdio>
#include <fstream>
#include <string>

namespace dtrun::agent {

namespace {

// Deep enough for any launcher chain (shell -> python -> data loader -> compiler); the bound
// only guards against a pid cycle while processes die and pids are reused under the walk.
constexpr int kMaxDepth = 64;

}  // namespace

std::optional<ProcStat> readProcStat(int pid) {
  if (pid <= 0) return std::nullopt;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return std::nullopt;
  // The command name is in parentheses and may itself hold ") ": the fields follow the last one.
  auto close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  ProcStat s;
  // Fields 3..24 of proc(5); the first three are needed, the rest are best effort.
  const int n = std::sscanf(line.c_str() + close + 1,
                            " %c %d %d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d "
                            "%ld %*d %llu %llu %ld",
                            &s.state, &s.ppid, &s.pgrp, &s.utimeTicks, &s.stimeTicks, &s.threads,
                            &s.startTicks, &s.vsizeBytes, &s.rssPages);
  if (n < 3) return std::nullopt;
  return s;
}

std::string describeProcState(char state) {
  switch (state) {
    case 'R':
      return "running";
    case 'S':
      return "sleeping";
    case 'D':
      return "uninterruptible (D: waiting on I/O, a driver or a frozen cgroup; even SIGKILL waits)";
    case 'T':
      return "stopped (SIGSTOP)";
    case 't':
      return "stopped by a debugger";
    case 'Z':
      return "a zombie";
    case 'X':
      return "dead";
    case 'I':
      return "idle";
    default:
      return std::string("state ") + state;
  }
}

std::optional<int> ownerOf(int pid, const std::map<int, int>& roots) {
  auto first = readProcStat(pid);
  if (!first || first->state == 'Z') return std::nullopt;
  if (auto it = roots.find(pid); it != roots.end()) return it->second;
  // Still in a worker's process group: its parent may be gone (re-parented to the subreaper).
  if (auto it = roots.find(first->pgrp); it != roots.end()) return it->second;
  int parent = first->ppid;
  for (int depth = 0; depth < kMaxDepth && parent > 1; ++depth) {
    if (auto it = roots.find(parent); it != roots.end()) return it->second;
    auto s = readProcStat(parent);
    if (!s) return std::nullopt;
    parent = s->ppid;
  }
  return std::nullopt;
}

}  // namespace dtrun::agent
