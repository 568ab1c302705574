// Kubernetes' termination message: the file a container writes why it ended to, which
// `kubectl describe pod` shows (terminationMessagePath, /dev/termination-log by default; the
// kubelet reads at most 4096 bytes). docs/observe.md, "The termination message".
#pragma once

#include <string>

namespace dtrun::agent {

/// Where the message goes: `configured` (--termination-log) when given; else
/// /dev/termination-log when it exists and this process may write it (a container); else "".
std::string terminationLogPath(const std::string& configured);

/// Replaces the file's contents with `message` (the caller keeps it within 4096 bytes).
/// Returns "" or the one line saying why it could not, naming the file. Blocking.
std::string writeTerminationLog(const std::string& path, const std::string& message);

}  // namespace dtrun::agent
