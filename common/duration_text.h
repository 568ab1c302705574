// secondsText: a duration as messages show it ("12.3 s"). Header-only, like common/file_util.h.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace dtrun {

/// `d` in seconds to one decimal, rounded, with the unit: "0.2 s", "30.0 s". Pure.
inline std::string secondsText(std::chrono::milliseconds d) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

}  // namespace dtrun
