#include "agent/failure_report.h"

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <ctime>

#include "agent/error_file.h"
#include "common/signals.h"

namespace dtrun::agent {

namespace {

constexpr const char* kNotAvailable = "<N/A>";
constexpr const char* kNoTracebackHint =
    "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html";
constexpr std::size_t kMaxWidth = 60;

// Worker output and error files may hold any bytes; the report and the store's JSON need valid
// UTF-8. nlohmann's replace handler turns each invalid sequence into U+FFFD.
std::string validUtf8(const std::string& s) {
  std::string dumped =
      nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return nlohmann::json::parse(dumped).get<std::string>();
}

// Python's len(): code points, not bytes (the input is valid UTF-8).
std::size_t codePoints(std::string_view s) {
  return static_cast<std::size_t>(std::count_if(
      s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

std::string replaceAll(std::string s, std::string_view from, std::string_view to) {
  std::size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
  return s;
}

std::int64_t floorDiv(std::int64_t a, std::int64_t b) {
  std::int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

// torch's _FAILURE_FORMAT_TEMPLATE for one failure; returns the text and its widest line.
std::pair<std::string, std::size_t> formatOne(std::size_t idx, const ProcessFailure& f) {
  std::string out;
  out += "[" + std::to_string(idx) + "]:\n";
  out += "  time      : " + formatLocalTime(floorDiv(f.timestampMs, 1000)) + "\n";
  out += "  host      : " + f.host + "\n";
  out += "  rank      : " + std::to_string(f.rank) +
         " (local_rank: " + std::to_string(f.localRank) + ")\n";
  out += "  exitcode  : " + std::to_string(f.exitCode) + " (pid: " + std::to_string(f.pid) + ")\n";
  out += "  error_file: " + (f.errorFile.empty() ? std::string(kNotAvailable) : f.errorFile) + "\n";
  // torch indents a dict message's traceback ("\n" -> "\n  "). dtrun indents every message, so
  // a multi-line string message or stderr tail stays inside the block.
  out += "  traceback : " + replaceAll(tracebackText(f), "\n", "\n  ");
  std::size_t width = 0;
  std::size_t start = 0;
  while (start <= out.size()) {
    std::size_t end = out.find('\n', start);
    if (end == std::string::npos) end = out.size();
    width = std::max(width, codePoints(std::string_view(out).substr(start, end - start)));
    start = end + 1;
  }
  return {out, width};
}

}  // namespace

void to_json(nlohmann::json& j, const Hang& h) {
  j = nlohmann::json{{"kind", h.kind},
                     {"scopeId", h.scopeId},
                     {"pid", h.pid},
                     {"deadlineMs", h.deadlineMs},
                     {"overstayMs", h.overstayMs},
                     {"signal", h.signal},
                     {"stacks", h.stacks}};
}

void from_json(const nlohmann::json& j, Hang& h) {
  h.kind = j.value("kind", std::string("timer"));
  h.scopeId = j.value("scopeId", std::string());
  h.pid = j.value("pid", 0);
  h.deadlineMs = j.value("deadlineMs", std::int64_t{0});
  h.overstayMs = j.value("overstayMs", std::int64_t{0});
  h.signal = j.value("signal", 0);
  h.stacks = j.value("stacks", std::string());
}

void to_json(nlohmann::json& j, const ProcessFailure& f) {
  j = nlohmann::json{
      {"localRank", f.localRank},     {"rank", f.rank},       {"pid", f.pid},
      {"exitCode", f.exitCode},       {"host", f.host},       {"errorFile", f.errorFile},
      {"timestampMs", f.timestampMs}, {"message", f.message}, {"fromErrorFile", f.fromErrorFile},
      {"stderrTail", f.stderrTail}};
  if (f.hang) j["hang"] = *f.hang;
}

void from_json(const nlohmann::json& j, ProcessFailure& f) {
  j.at("localRank").get_to(f.localRank);
  j.at("rank").get_to(f.rank);
  j.at("pid").get_to(f.pid);
  j.at("exitCode").get_to(f.exitCode);
  j.at("timestampMs").get_to(f.timestampMs);
  // The rest is optional so that an older or newer agent's record still prints.
  f.host = j.value("host", std::string());
  f.errorFile = j.value("errorFile", std::string());
  f.message = j.value("message", std::string());
  f.fromErrorFile = j.value("fromErrorFile", false);
  f.stderrTail = j.value("stderrTail", std::vector<std::string>());
  if (auto it = j.find("hang"); it != j.end() && it->is_object()) f.hang = it->get<Hang>();
}

std::string describeHang(const Hang& h) {
  const std::int64_t secs = floorDiv(h.deadlineMs, 1000);
  char ms[8];
  std::snprintf(ms, sizeof ms, ".%03d", static_cast<int>(h.deadlineMs - secs * 1000));
  char overstay[32];
  std::snprintf(overstay, sizeof overstay, "%.3f", static_cast<double>(h.overstayMs) / 1000.0);
  const std::string action = h.signal > 0
                                 ? "; dtrun sent " + signalName(h.signal) + " to its process group"
                                 : "; it asked for no signal";
  if (h.kind == "stall") {
    return "hung: no output and no timer activity from the worker group for " +
           std::string(overstay) + " s (since " + formatLocalTime(secs) + ms + ")" + action;
  }
  return "hung: timer \"" + h.scopeId + "\" of pid " + std::to_string(h.pid) +
         " passed its deadline " + formatLocalTime(secs) + ms + " by " + overstay + " s" + action;
}

std::string describeFailure(const ProcessFailure& f) {
  std::string line = "rank " + std::to_string(f.rank) + " (local_rank " +
                     std::to_string(f.localRank) + ", pid " + std::to_string(f.pid) + ") on " +
                     f.host + ": ";
  line += f.exitCode < 0
              ? "signal " + std::to_string(-f.exitCode) + " (" + signalName(-f.exitCode) + ")"
              : "exit code " + std::to_string(f.exitCode);
  if (f.hang) line += "; " + describeHang(*f.hang);
  // The traceback's last line says what was raised; torch's own texts (a signal, the url) say
  // nothing the line does not already, and then the stderr tail's last line is the better clue.
  auto lastLine = [](const std::string& text) {
    const std::size_t end = text.find_last_not_of(" \n\r\t");
    if (end == std::string::npos) return std::string();
    const std::size_t nl = text.rfind('\n', end);
    const std::size_t start = nl == std::string::npos ? 0 : nl + 1;
    return text.substr(start, end + 1 - start);
  };
  std::string clue = f.fromErrorFile ? lastLine(f.message) : "";
  if (clue.empty() && !f.stderrTail.empty()) clue = lastLine(f.stderrTail.back());
  if (!clue.empty()) line += ": " + clue;
  return line;
}

ProcessFailure buildProcessFailure(const FailedExit& exit) {
  ProcessFailure f;
  f.localRank = exit.localRank;
  f.rank = exit.rank;
  f.pid = exit.pid;
  f.exitCode = exit.exitCode;
  f.host = validUtf8(exit.host);
  f.timestampMs =
      std::chrono::duration_cast<std::chrono::milliseconds>(exit.observedAt.time_since_epoch())
          .count();
  if (auto contents = readErrorFile(exit.errorFile)) {
    f.errorFile = exit.errorFile;
    f.message = validUtf8(contents->message);
    f.fromErrorFile = contents->valid;
    if (contents->timestampS) f.timestampMs = *contents->timestampS * 1000;
  }
  if (f.message.empty()) {
    // torch: "make up an informative message if not already present".
    f.fromErrorFile = false;
    f.message = f.exitCode < 0
                    ? "Signal " + std::to_string(-f.exitCode) + " (" + signalName(-f.exitCode) +
                          ") received by PID " + std::to_string(f.pid)
                    : kNoTracebackHint;
  }
  f.stderrTail.reserve(exit.stderrTail.size());
  for (const auto& line : exit.stderrTail) f.stderrTail.push_back(validUtf8(line));
  return f;
}

std::size_t rootCauseIndex(const std::vector<ProcessFailure>& failures) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < failures.size(); ++i) {
    if (failures[i].timestampMs < failures[best].timestampMs) best = i;  // strict: ties stay first
  }
  return best;
}

std::string formatLocalTime(std::int64_t epochSeconds) {
  std::time_t t = static_cast<std::time_t>(epochSeconds);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d_%H:%M:%S", &tm);
  return buf;
}

std::string tracebackText(const ProcessFailure& f) {
  if (f.hang) {
    // Where it hung first, then what it last said, then its stacks: the report's reader wants
    // the first line to say "hang", not "Signal 9".
    ProcessFailure plain = f;
    plain.hang.reset();
    std::string text = describeHang(*f.hang) + "\n" + tracebackText(plain);
    if (!f.hang->stacks.empty()) text += "\n" + f.hang->stacks;
    return text;
  }
  if (f.fromErrorFile || f.stderrTail.empty()) return f.message;
  std::string tail;
  for (std::size_t i = 0; i < f.stderrTail.size(); ++i) {
    if (i) tail += '\n';
    tail += f.stderrTail[i];
  }
  // With no error file and a plain exit code, torch's message is only the @record hint; the
  // worker's own last words say more. A signal line (or a malformed-file note) is kept on top.
  if (f.errorFile.empty() && f.exitCode >= 0) return tail;
  return f.message + "\n" + tail;
}

std::string formatFailureReport(const std::string& entrypointName,
                                const std::vector<ProcessFailure>& failures) {
  if (failures.empty()) return {};
  std::string title = entrypointName + " FAILED";
  std::size_t root = rootCauseIndex(failures);
  std::string rootText;
  std::vector<std::string> others;
  std::size_t width = codePoints(title);
  for (std::size_t i = 0; i < failures.size(); ++i) {
    auto [text, w] = formatOne(i, failures[i]);
    width = std::max(width, w);
    if (i == root) {
      rootText = std::move(text);
    } else {
      others.push_back(std::move(text));
    }
  }
  width = std::min(width, kMaxWidth);
  std::string border(width, '=');
  std::string section(width, '-');
  std::string otherText;
  if (others.empty()) {
    otherText = "  <NO_OTHER_FAILURES>";
  } else {
    for (std::size_t i = 0; i < others.size(); ++i) {
      if (i) otherText += '\n';
      otherText += others[i];
    }
  }
  return border + "\n" + title + "\n" + section + "\nFailures:\n" + otherText + "\n" + section +
         "\nRoot Cause (first observed failure):\n" + rootText + "\n" + border;
}

void writeAgentErrorFile(const std::string& path, const ProcessFailure& root) {
  nlohmann::ordered_json doc;
  if (!root.errorFile.empty()) {
    if (auto contents = readErrorFile(root.errorFile); contents && contents->valid) {
      doc = std::move(contents->document);
    }
  }
  if (doc.is_null()) {
    // No usable worker file (none written, removed since, malformed, or on another node):
    // record what the report shows, so a scheduler reading this file still learns the cause.
    // "message" is one line, like torch's "<ExcType>: <str>": the last stderr line when the
    // tail stands in for the traceback (for a Python worker, the exception itself), else the
    // first line of the message; for a hang, the hang.
    std::string text = tracebackText(root);
    std::string summary = root.message.substr(0, root.message.find('\n'));
    if (root.hang) {
      summary = describeHang(*root.hang);
    } else if (text != root.message && root.errorFile.empty() && root.exitCode >= 0) {
      for (auto it = root.stderrTail.rbegin(); it != root.stderrTail.rend(); ++it) {
        if (it->find_first_not_of(" \t") != std::string::npos) {
          summary = *it;
          break;
        }
      }
    }
    doc = makeTorchErrorRecord(summary, text, floorDiv(root.timestampMs, 1000));
  }
  writeErrorFile(path, withErrorCode(std::move(doc), root.exitCode));
}

}  // namespace dtrun::agent
