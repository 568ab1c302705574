#include "launcher/timeline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>

#include "common/error.h"

namespace dtrun::launcher {
namespace {

using nlohmann::json;

// Page geometry, in pixels (the SVG is the page's top left: these are page coordinates).
constexpr double kWidth = 1200, kGutter = 200, kRight = 20, kTop = 34;
constexpr double kBandRow = 18, kWorkerRow = 16, kBarHeight = 12, kLaneGap = 16;

struct Worker {
  double start = 0, end = 0;
  bool ended = false;
  std::int64_t round = 0;
  int localRank = 0, rank = 0, pid = 0;
  std::string outcome = "running";
  std::string exit;  // "exit code 3", "signal 15"
};
struct Band {
  double start = 0, end = 0;
  std::int64_t round = 0;
  int groupRank = 0, worldSize = 0, nodes = 0;
};
struct Mark {
  double t = 0;
  std::string kind;  // failure, hang, restart, membership, end
  std::string text;
};
struct Lane {
  std::string label, file;
  std::vector<Worker> workers;
  std::vector<Band> bands;
  std::vector<Mark> marks;
  int ranks = 1;
  double last = 0;
  bool ended = false;
};

std::string esc(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string num(double v, int decimals = 1) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

template <typename T>
T get(const json& j, const char* key, T fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    return fallback;
  }
}

const char* colorOf(const std::string& outcome) {
  if (outcome == "succeeded") return kSucceededColor;
  if (outcome == "failed") return kFailedColor;
  if (outcome == "hung") return kHungColor;
  if (outcome == "stopped") return kStoppedColor;
  return kRunningColor;
}

// Folds one lane's records (in time order) into its bars, bands and marks.
void fold(Lane& lane, const std::vector<const json*>& records) {
  std::map<int, std::size_t> open;  // worker pid -> its bar
  for (const json* r : records) {
    const std::string event = get<std::string>(*r, "event", "");
    const double t = get<double>(*r, "ts", 0);
    lane.last = std::max(lane.last, t);
    if (event == "rendezvous_done") {
      Band b;
      b.start = t;
      b.round = get<std::int64_t>(*r, "round", 0);
      b.groupRank = get<int>(*r, "group_rank", 0);
      b.worldSize = get<int>(*r, "world_size", 0);
      b.nodes = get<int>(*r, "group_world_size", 0);
      if (!lane.bands.empty()) {
        const Band& prev = lane.bands.back();
        if (prev.nodes != b.nodes || prev.worldSize != b.worldSize) {
          lane.marks.push_back({t, "membership",
                                "round " + std::to_string(b.round) + ": " +
                                    std::to_string(prev.nodes) + " -> " + std::to_string(b.nodes) +
                                    " nodes, world size " + std::to_string(prev.worldSize) +
                                    " -> " + std::to_string(b.worldSize)});
        }
      }
      lane.bands.push_back(b);
    } else if (event == "worker_started") {
      Worker w;
      w.start = w.end = t;
      w.round = get<std::int64_t>(*r, "round", 0);
      w.localRank = get<int>(*r, "local_rank", 0);
      w.rank = get<int>(*r, "rank", 0);
      w.pid = get<int>(*r, "pid", 0);
      lane.ranks = std::max(lane.ranks, w.localRank + 1);
      open[w.pid] = lane.workers.size();
      lane.workers.push_back(w);
    } else if (event == "worker_exited") {
      auto it = open.find(get<int>(*r, "pid", -1));
      if (it == open.end()) continue;
      Worker& w = lane.workers[it->second];
      open.erase(it);
      w.end = t;
      w.ended = true;
      auto optionalInt = [&](const char* key) -> std::optional<int> {
        auto it = r->find(key);
        if (it == r->end() || !it->is_number_integer()) return std::nullopt;
        return it->get<int>();
      };
      const auto signal = optionalInt("signal");
      const auto code = optionalInt("exit_code");
      w.exit = signal ? "signal " + std::to_string(*signal)
                      : "exit code " + std::to_string(code.value_or(0));
      w.outcome = get<std::string>(*r, "outcome", code == 0 && !signal ? "succeeded" : "failed");
      if (w.outcome == "failed") {
        lane.marks.push_back(
            {t, "failure", "rank " + std::to_string(w.rank) + " failed: " + w.exit});
      }
    } else if (event == "worker_hung" || event == "worker_group_stalled") {
      lane.marks.push_back({t, "hang",
                            event == "worker_hung"
                                ? "rank " + std::to_string(get<int>(*r, "rank", 0)) +
                                      " hung (timer " + get<std::string>(*r, "scope_id", "") + ")"
                                : "the worker group stalled"});
    } else if (event == "restart_decided" && r->contains("next_round")) {
      lane.marks.push_back({t, "restart",
                            "restart: round " + std::to_string(get<std::int64_t>(*r, "round", 0)) +
                                " -> " + std::to_string(get<std::int64_t>(*r, "next_round", 0)) +
                                " (" + get<std::string>(*r, "reason", "?") + ")"});
    } else if (event == "job_ended" || event == "shutdown") {
      if (event == "job_ended") lane.ended = true;
      std::string text = event == "job_ended" ? "end: " + get<std::string>(*r, "outcome", "?")
                                              : "shutdown: " + get<std::string>(*r, "reason", "?");
      lane.marks.push_back({t, "end", text});
    }
  }
  for (std::size_t i = 0; i < lane.bands.size(); ++i) {
    lane.bands[i].end = i + 1 < lane.bands.size() ? lane.bands[i + 1].start : lane.last;
  }
  for (auto& w : lane.workers) {
    if (!w.ended) w.end = lane.last;  // still running, or its agent was killed before its exit
  }
}

// A round step for the axis: 1, 2 or 5 times a power of ten, about 10 ticks.
double tickStep(double span) {
  const double raw = span / 10;
  const double p = std::pow(10.0, std::floor(std::log10(std::max(raw, 1e-3))));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (raw <= m * p) return m * p;
  }
  return 10 * p;
}

}  // namespace

TimelineInput readEventLog(const std::string& path, int* skipped) {
  std::ifstream in(path);
  if (!in) throw ConfigError("dtrun timeline: cannot read " + path);
  TimelineInput input{path, {}};
  for (std::string line; std::getline(in, line);) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      auto j = json::parse(line);
      if (j.is_object() && j.contains("event")) {
        input.records.push_back(std::move(j));
        continue;
      }
    } catch (const json::exception&) {
    }
    if (skipped) ++*skipped;
  }
  return input;
}

std::string renderTimeline(const std::vector<TimelineInput>& inputs) {
  // Lanes by agent: host and pid when the records carry them, else the file.
  std::map<std::string, std::vector<const json*>> byLane;
  std::map<std::string, Lane> lanes;
  std::vector<std::string> order;
  double t0 = INFINITY, t1 = -INFINITY;
  for (const auto& in : inputs) {
    for (const auto& r : in.records) {
      const double t = get<double>(r, "ts", NAN);
      if (std::isnan(t)) continue;
      t0 = std::min(t0, t);
      t1 = std::max(t1, t);
      const std::string host = get<std::string>(r, "host", "");
      const int pid = get<int>(r, "agent_pid", 0);
      const std::string key = host.empty() ? in.name : host + " pid " + std::to_string(pid);
      if (!lanes.count(key)) {
        lanes[key].label = key;
        lanes[key].file = in.name;
        order.push_back(key);
      }
      byLane[key].push_back(&r);
    }
  }
  if (order.empty()) t0 = t1 = 0;
  for (auto& [key, records] : byLane) {
    std::stable_sort(records.begin(), records.end(), [](const json* a, const json* b) {
      return get<double>(*a, "ts", 0) < get<double>(*b, "ts", 0);
    });
    fold(lanes[key], records);
  }
  const double span = std::max(t1 - t0, 1e-3);
  const double plot = kWidth - kGutter - kRight;
  auto x = [&](double t) { return kGutter + (t - t0) / span * plot; };

  std::string svg;
  double y = kTop;
  // Axis: seconds since the first record.
  const double step = tickStep(span);
  for (double s = 0; s <= span + 1e-9; s += step) {
    svg += "<line class=\"tick\" x1=\"" + num(x(t0 + s)) + "\" y1=\"" + num(kTop - 6) + "\" x2=\"" +
           num(x(t0 + s)) + "\" y2=\"" + num(kTop - 2) + "\"/><text class=\"tick\" x=\"" +
           num(x(t0 + s)) + "\" y=\"" + num(kTop - 10) + "\">" + num(s, step < 1 ? 1 : 0) +
           " s</text>";
  }
  for (const auto& key : order) {
    const Lane& lane = lanes[key];
    const double height = kBandRow + lane.ranks * kWorkerRow;
    svg += "<g class=\"lane\" data-lane=\"" + esc(lane.label) + "\" data-file=\"" + esc(lane.file) +
           "\">";
    svg += "<text class=\"label\" x=\"8\" y=\"" + num(y + 13) + "\">" + esc(lane.label) + "</text>";
    // The file's name (its directory is in data-file and the hover), short enough to leave the
    // rank labels room.
    std::string base =
        lane.file.substr(lane.file.rfind('/') == std::string::npos ? 0 : lane.file.rfind('/') + 1);
    if (base.size() > 24) base = base.substr(0, 23) + "~";
    svg += "<text class=\"sub\" x=\"8\" y=\"" + num(y + 27) + "\">" + esc(base) + "<title>" +
           esc(lane.file) + "</title></text>";
    for (int lr = 0; lr < lane.ranks; ++lr) {
      svg += "<text class=\"rank\" x=\"" + num(kGutter - 6) + "\" y=\"" +
             num(y + kBandRow + lr * kWorkerRow + 11) + "\">local " + std::to_string(lr) +
             "</text>";
    }
    for (const auto& b : lane.bands) {
      const std::string tip = "round " + std::to_string(b.round) + ": group rank " +
                              std::to_string(b.groupRank) + " of " + std::to_string(b.nodes) +
                              ", world size " + std::to_string(b.worldSize);
      svg += "<rect class=\"round\" data-round=\"" + std::to_string(b.round) + "\" data-nodes=\"" +
             std::to_string(b.nodes) + "\" data-world-size=\"" + std::to_string(b.worldSize) +
             "\" x=\"" + num(x(b.start)) + "\" y=\"" + num(y + 2) + "\" width=\"" +
             num(std::max(1.0, x(b.end) - x(b.start))) + "\" height=\"" + num(kBandRow - 4) +
             "\" fill=\"" + (b.round % 2 ? "#e3e9f2" : "#cfd8e6") + "\" data-tip=\"" + esc(tip) +
             "\"><title>" + esc(tip) + "</title></rect>";
      svg += "<text class=\"roundno\" x=\"" + num(x(b.start) + 3) + "\" y=\"" + num(y + 13) +
             "\">r" + std::to_string(b.round) + "</text>";
    }
    for (const auto& w : lane.workers) {
      const std::string tip =
          "rank " + std::to_string(w.rank) + " (local " + std::to_string(w.localRank) + ", pid " +
          std::to_string(w.pid) + "), round " + std::to_string(w.round) + ": " + w.outcome +
          (w.exit.empty() ? "" : " (" + w.exit + ")") + ", " + num(w.end - w.start, 2) + " s";
      const double bx = x(w.start), bw = std::max(3.0, x(w.end) - bx);
      svg += "<rect class=\"worker\" data-outcome=\"" + w.outcome + "\" data-round=\"" +
             std::to_string(w.round) + "\" data-rank=\"" + std::to_string(w.rank) +
             "\" data-local-rank=\"" + std::to_string(w.localRank) + "\" data-pid=\"" +
             std::to_string(w.pid) + "\" x=\"" + num(bx) + "\" y=\"" +
             num(y + kBandRow + w.localRank * kWorkerRow + 2) + "\" width=\"" + num(bw) +
             "\" height=\"" + num(kBarHeight) + "\" fill=\"" + colorOf(w.outcome) +
             "\" data-tip=\"" + esc(tip) + "\"><title>" + esc(tip) + "</title></rect>";
    }
    for (const auto& m : lane.marks) {
      // In the band row, above the bars: a mark never hides a bar.
      const double mx = x(m.t);
      svg += "<path class=\"mark " + m.kind + "\" data-kind=\"" + m.kind + "\" d=\"M" + num(mx) +
             " " + num(y + kBandRow - 2) + " l-5 -9 h10 z\" data-tip=\"" + esc(m.text) +
             "\"><title>" + esc(m.text) + "</title></path>";
    }
    svg += "</g>";
    y += height + kLaneGap;
  }
  const double pageHeight = y + 4;
  std::string title = "dtrun timeline";
  for (const auto& in : inputs) title += " " + in.name;

  std::string html = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" + esc(title) +
                     "</title>\n<style>\n"
                     "body{margin:0;font:12px sans-serif;color:#222;background:#fff}\n"
                     "svg{display:block}\n"
                     "text.label{font-weight:bold}text.sub{fill:#777;font-size:10px}\n"
                     "text.rank{text-anchor:end;fill:#555;font-size:10px}\n"
                     "text.tick{text-anchor:middle;fill:#555;font-size:10px}\n"
                     "line.tick{stroke:#888}text.roundno{font-size:10px;fill:#334}\n"
                     ".mark.failure{fill:" +
                     std::string(kFailedColor) + "}.mark.hang{fill:" + kHungColor +
                     "}.mark.restart{fill:#6a1b9a}.mark.membership{fill:#00838f}"
                     ".mark.end{fill:#333}\n"
                     ".legend{padding:6px 8px}.legend span{display:inline-block;margin-right:14px}"
                     ".legend i{display:inline-block;width:12px;height:12px;margin-right:4px;"
                     "vertical-align:middle}\n"
                     "#tip{position:fixed;display:none;background:#333;color:#fff;padding:4px 6px;"
                     "border-radius:3px;pointer-events:none;font-size:12px}\n"
                     "</style></head><body>\n";
  html += "<svg id=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(kWidth, 0) +
          "\" height=\"" + num(pageHeight, 0) + "\" viewBox=\"0 0 " + num(kWidth, 0) + " " +
          num(pageHeight, 0) + "\">" + svg + "</svg>\n";
  html += "<div class=\"legend\">";
  for (const auto& [name, color] : std::vector<std::pair<const char*, const char*>>{
           {"succeeded", kSucceededColor},
           {"failed", kFailedColor},
           {"hung", kHungColor},
           {"stopped by dtrun", kStoppedColor},
           {"running (no exit recorded)", kRunningColor}}) {
    html += "<span><i style=\"background:" + std::string(color) + "\"></i>" + name + "</span>";
  }
  html +=
      "<span>marks: failure, hang, restart, membership change, end (hover for details); "
      "time: seconds since " +
      num(t0, 3) + " (epoch)</span></div>\n";
  html +=
      "<div id=\"tip\"></div>\n<script>\n"
      "(function(){var tip=document.getElementById('tip');\n"
      "document.getElementById('timeline').addEventListener('mousemove',function(e){\n"
      "var t=e.target.getAttribute&&e.target.getAttribute('data-tip');\n"
      "if(!t){tip.style.display='none';return;}\n"
      "tip.textContent=t;tip.style.display='block';tip.style.left=(e.clientX+12)+'px';"
      "tip.style.top=(e.clientY+12)+'px';});})();\n"
      "</script>\n</body></html>\n";
  return html;
}

}  // namespace dtrun::launcher
