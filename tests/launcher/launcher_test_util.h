// What the launcher's test files share: a HostProbe on a fake machine and the one-line usage
// error of a command line that must fail.
#pragma once

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <utility>

#include "launcher/cli.h"

namespace dtrun::launcher::testing {

/// A machine with no device (the device trees are `dir`, empty), `cpus` CPUs, `workDir` as the
/// launching shell's directory and /opt/dtrun/bin/dtrun as this dtrun's path.
inline HostProbe fakeProbe(const std::filesystem::path& dir, const std::filesystem::path& workDir,
                           int cpus = 4) {
  HostProbe probe;
  probe.devDir = dir;
  probe.sysDir = dir;
  probe.cpuCount = cpus;
  probe.workDir = workDir;
  probe.selfExe = "/opt/dtrun/bin/dtrun";
  return probe;
}

/// The message of the UsageError `f()` throws, checked to be one line; "" (and a failed check)
/// when it throws none.
template <typename F>
std::string usageErrorOf(F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const UsageError& e) {
    std::string msg = e.what();
    CHECK(msg.find('\n') == std::string::npos);
    return msg;
  }
  FAIL_CHECK("no UsageError");
  return "";
}

}  // namespace dtrun::launcher::testing
