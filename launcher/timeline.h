// The timeline picture of `dtrun timeline`: one or several nodes' --event-log records drawn on
// one time axis, as one self-contained HTML file (inline CSS, SVG and a few lines of script for
// the hover details; nothing is fetched). docs/observe.md, "dtrun timeline".
//
// One lane per agent (its host and pid, from the records; a file without them is one agent):
// its rounds as bands, each worker's lifetime as a bar coloured by how it ended, and markers for
// failures, hangs, restarts, membership changes and the agent's end. The SVG's coordinates are
// page pixels (it sits at the page's top left), and every mark carries its facts in data-*
// attributes, so a test can find each bar in the DOM and then its colour in a screenshot.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dtrun::launcher {

/// One event-log file: its name (for the page) and its records, one JSON object per line.
struct TimelineInput {
  std::string name;
  std::vector<nlohmann::json> records;
};

/// The bar colours by worker outcome (also the legend's).
inline constexpr const char* kSucceededColor = "#2e7d32";
inline constexpr const char* kFailedColor = "#c62828";
inline constexpr const char* kHungColor = "#ef6c00";
inline constexpr const char* kStoppedColor = "#9e9e9e";
inline constexpr const char* kRunningColor = "#1565c0";

/// The page. Pure.
std::string renderTimeline(const std::vector<TimelineInput>& inputs);

/// Reads an event-log file: one JSON object per line; blank and unreadable lines are skipped
/// and counted in `skipped`. Throws ConfigError naming the file when it cannot be opened.
TimelineInput readEventLog(const std::string& path, int* skipped = nullptr);

}  // namespace dtrun::launcher
