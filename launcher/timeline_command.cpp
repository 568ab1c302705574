#include "launcher/timeline_command.h"

#include <array>
#include <cstdio>

#include "common/file_util.h"
#include "launcher/args.h"
#include "launcher/option_parser.h"
#include "launcher/timeline.h"

namespace dtrun::launcher {
namespace {

constexpr std::array<OptionSpec, 2> kTimelineOptions{{
    {"help", "-h", OptionKind::kHelp, "", "", "show this help message and exit"},
    {"output", "-o", OptionKind::kValue, "", "",
     "The HTML file to write (replaced if it exists). Required.", "FILE.html"},
}};

const OptionParser& timelineParser() {
  static const OptionParser parser(CommandSpec{
      "dtrun timeline",
      "[-h] EVENT_LOG [EVENT_LOG ...] -o FILE.html",
      {kTimelineOptions},
      true,
      {"Draws the --event-log files of one or several nodes on one time axis, as one "
       "self-contained HTML page (nothing is fetched when it is opened): each agent's rounds, "
       "each worker's lifetime as a bar coloured by how it ended (succeeded, failed, hung, "
       "stopped by dtrun), and marks for failures, hangs, restarts, membership changes and the "
       "agent's end; hover over any of them for the details. Agents sharing one file are told "
       "apart by the host and pid on each line."},
      {{"EVENT_LOG", "The --event-log files (JSON lines)."}},
      {"Exit codes: 0 written, 1 a file could not be read or written, 2 a bad command line."},
      true});
  return parser;
}

}  // namespace

int runTimelineCommand(const std::vector<std::string>& argv,
                       const std::map<std::string, std::string>& env) {
  std::vector<std::string> files;
  std::string output;
  if (auto code = handleUsage(timelineParser(), [&] {
        ParsedOptions p = timelineParser().parse(argv);
        timelineParser().applyEnvironment(p, env);
        files.push_back(*p.script());
        files.insert(files.end(), p.scriptArgs().begin(), p.scriptArgs().end());
        const auto* o = p.value("output");
        if (!o || o->value.empty())
          throw UsageError("-o/--output: the HTML file to write is required");
        output = o->value;
      })) {
    return *code;
  }
  try {
    std::vector<TimelineInput> inputs;
    for (const auto& f : files) {
      int skipped = 0;
      inputs.push_back(readEventLog(f, &skipped));
      if (skipped > 0) {
        std::fprintf(stderr, "dtrun timeline: %s: %d line(s) that are not event records skipped\n",
                     f.c_str(), skipped);
      }
    }
    writeWholeFile(output, renderTimeline(inputs), 0644, "the timeline");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtrun timeline: %s\n", e.what());
    return 1;
  }
}

}  // namespace dtrun::launcher
