// argparse's reading of a command line (its _parse_optional and consume_optional), on a table.
#include "launcher/option_parser.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "launcher/version.h"

namespace dtrun::launcher {
namespace {

// Every long spelling of an option: --a-b, --a_b for multi-word options, and the alias.
std::vector<std::string> longNames(const OptionSpec& o) {
  std::vector<std::string> names{OptionParser::dashed(o.dest)};
  if (o.dest.find('_') != std::string_view::npos) names.push_back("--" + std::string(o.dest));
  if (!o.alias.empty()) {
    names.push_back(OptionParser::dashed(o.alias));
    if (o.alias.find('_') != std::string_view::npos) names.push_back("--" + std::string(o.alias));
  }
  return names;
}

std::string displayName(const OptionSpec& o) {
  std::string dashed = OptionParser::dashed(o.dest);
  return o.shortName.empty() ? dashed : std::string(o.shortName) + "/" + dashed;
}

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string metavarOf(const OptionSpec& o) {
  return o.metavar.empty() ? upper(o.dest) : std::string(o.metavar);
}

bool isNegativeNumber(const std::string& a) {
  // argparse's _negative_number_matcher: ^-\d+$|^-\d*\.\d+$
  if (a.size() < 2 || a[0] != '-') return false;
  auto dot = a.find('.');
  auto digits = [](std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (dot == std::string::npos) return digits(std::string_view(a).substr(1));
  return digits(std::string_view(a).substr(1, dot - 1)) && dot + 1 < a.size() &&
         digits(std::string_view(a).substr(dot + 1));
}

// Greedy word wrap of `text` at 100 columns; the first line starts at column `firstUsed`, the
// others at `indent`.
std::string wrap(const std::string& text, std::size_t indent, std::size_t firstUsed) {
  constexpr std::size_t kWidth = 100;
  std::string result;
  std::size_t col = firstUsed;
  std::size_t i = 0;
  while (i < text.size()) {
    auto sp = text.find(' ', i);
    std::string word = text.substr(i, sp == std::string::npos ? std::string::npos : sp - i);
    i = sp == std::string::npos ? text.size() : sp + 1;
    if (col > indent && col + 1 + word.size() > kWidth) {
      result += "\n" + std::string(indent, ' ');
      col = indent;
    } else if (col > indent) {
      result += ' ';
      ++col;
    }
    result += word;
    col += word.size();
  }
  return result + "\n";
}

}  // namespace

// How one argument reads, following argparse's _parse_optional.
struct OptionParser::Classified {
  enum { kPositional, kOption, kUnknown } what = kPositional;
  const OptionSpec* spec = nullptr;
  std::string name;                          // the option as resolved, for messages
  std::optional<std::string> explicitValue;  // after '=' or glued to a short option
  bool isShort = false;
};

const GivenValue* ParsedOptions::value(std::string_view dest) const {
  auto it = values_.find(dest);
  return it == values_.end() ? nullptr : &it->second;
}

bool ParsedOptions::flag(std::string_view dest) const { return flags_.find(dest) != flags_.end(); }

std::string ParsedOptions::flagSource(std::string_view dest) const {
  auto it = flags_.find(dest);
  return it == flags_.end() ? "" : it->second;
}

std::optional<std::string> ParsedOptions::text(std::string_view dest) const {
  const auto* g = value(dest);
  return g ? std::optional<std::string>(g->value) : std::nullopt;
}

std::optional<std::int64_t> ParsedOptions::integer(std::string_view dest, std::int64_t min,
                                                   std::int64_t max) const {
  const auto* g = value(dest);
  if (!g) return std::nullopt;
  return parseInteger(g->source, g->value, min, max);
}

std::optional<std::uint64_t> ParsedOptions::size(std::string_view dest) const {
  const auto* g = value(dest);
  if (!g) return std::nullopt;
  return parseSize(g->source, g->value);
}

std::optional<std::chrono::milliseconds> ParsedOptions::seconds(std::string_view dest,
                                                                bool allowZero) const {
  const auto* g = value(dest);
  if (!g) return std::nullopt;
  return parseSeconds(g->source, g->value, allowZero);
}

std::vector<std::string> ParsedOptions::givenDests() const {
  std::vector<std::string> out;
  for (const auto& [dest, g] : values_) out.push_back(dest);
  for (const auto& [dest, src] : flags_) out.push_back(dest);
  return out;
}

OptionParser::OptionParser(CommandSpec spec) : spec_(std::move(spec)) {
  for (const auto& table : spec_.tables) {
    for (const auto& o : table) options_.push_back(&o);
  }
}

std::string OptionParser::dashed(std::string_view dest) {
  std::string s(dest);
  std::replace(s.begin(), s.end(), '_', '-');
  return "--" + s;
}

std::string OptionParser::envName(const OptionSpec& o) {
  if (o.env.empty()) return "";
  if (o.env != "PET") return std::string(o.env);
  return "PET_" + upper(o.dest);
}

std::vector<std::string> OptionParser::toArgs(
    const ParsedOptions& parsed, const std::function<bool(const OptionSpec&)>& keep) const {
  std::vector<std::string> out;
  for (const auto* o : options_) {
    if (!keep(*o)) continue;
    if (o->kind == OptionKind::kFlag && parsed.flag(o->dest)) out.push_back(dashed(o->dest));
    if (const auto* g = parsed.value(o->dest)) out.push_back(dashed(o->dest) + "=" + g->value);
  }
  return out;
}

const OptionSpec* OptionParser::find(std::string_view dest) const {
  for (const auto* o : options_) {
    if (o->dest == dest) return o;
  }
  return nullptr;
}

const OptionSpec* OptionParser::findShort(std::string_view name) const {
  for (const auto* o : options_) {
    if (!o->shortName.empty() && o->shortName == name) return o;
  }
  return nullptr;
}

// Resolves a long option or a unique prefix of one. A prefix that matches both spellings of one
// option is unique (argparse calls it ambiguous; torchrun 1.13 had one spelling, so `--nproc`
// worked there). Throws for a prefix of several options, except while looking at what may be a
// value (argparse then reads it as the value).
const OptionSpec* OptionParser::resolveLong(const std::string& arg, const std::string& name,
                                            bool forValue, std::string& matched) const {
  for (const auto* o : options_) {
    for (const auto& n : longNames(*o)) {
      if (n == name) {
        matched = n;
        return o;
      }
    }
  }
  std::vector<const OptionSpec*> hits;
  std::string firstName;
  for (const auto* o : options_) {
    if (!o->abbreviable) continue;
    for (const auto& n : longNames(*o)) {
      if (n.rfind(name, 0) == 0) {
        if (hits.empty()) firstName = n;
        hits.push_back(o);
        break;
      }
    }
  }
  if (hits.size() == 1) {
    matched = firstName;
    return hits[0];
  }
  if (hits.size() > 1 && !forValue) {
    std::string candidates;
    for (const auto* o : hits) candidates += (candidates.empty() ? "" : ", ") + dashed(o->dest);
    throw UsageError("ambiguous option: " + arg + " could match " + candidates);
  }
  return nullptr;
}

OptionParser::Classified OptionParser::classify(const std::string& arg, bool forValue) const {
  Classified c;
  if (arg.size() < 2 || arg[0] != '-') return c;
  if (arg.rfind("--", 0) == 0) {
    auto eq = arg.find('=');
    std::string name = arg.substr(0, eq);
    if (name.size() > 2 || eq != std::string::npos) {
      c.spec = resolveLong(arg, name, forValue, c.name);
      if (c.spec) {
        c.what = Classified::kOption;
        if (eq != std::string::npos) c.explicitValue = arg.substr(eq + 1);
        return c;
      }
    }
  } else {
    // "-r", "-r=3", "-r3" (argparse glues a short option's value or further short flags).
    if (const auto* o = findShort(std::string_view(arg).substr(0, 2))) {
      c.what = Classified::kOption;
      c.spec = o;
      c.isShort = true;
      c.name = displayName(*o);
      if (arg.size() > 2) c.explicitValue = arg.substr(arg[2] == '=' ? 3 : 2);
      return c;
    }
  }
  // Not an option: argparse reads negative numbers and words with blanks as positionals.
  if (isNegativeNumber(arg) || arg.find(' ') != std::string::npos) return c;
  c.what = Classified::kUnknown;
  return c;
}

ParsedOptions OptionParser::parse(const std::vector<std::string>& args) const {
  ParsedOptions t;
  const std::string seeHelp = " (see " + spec_.program + " --help)";
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (spec_.takesScript && spec_.positionalsAnywhere &&
        (arg == "--" || classify(arg, false).what == Classified::kPositional)) {
      for (std::size_t k = arg == "--" ? i + 1 : i; k < (arg == "--" ? args.size() : i + 1); ++k) {
        if (!t.script_) {
          t.script_ = args[k];
        } else {
          t.scriptArgs_.push_back(args[k]);
        }
      }
      if (arg == "--") break;
      continue;
    }
    if (arg == "--" || classify(arg, false).what == Classified::kPositional) {
      std::size_t first = arg == "--" ? i + 1 : i;
      if (!spec_.takesScript) {
        if (first >= args.size()) break;
        throw UsageError("unrecognized arguments: " + args[first] + seeHelp);
      }
      // The first positional is the script; all after it is the script's, untouched.
      if (first < args.size()) {
        t.script_ = args[first];
        t.scriptArgs_.assign(args.begin() + static_cast<std::ptrdiff_t>(first) + 1, args.end());
      }
      break;
    }
    Classified c = classify(arg, false);
    if (c.what == Classified::kUnknown)
      throw UsageError("unrecognized arguments: " + arg + seeHelp);
    // A cluster of short flags ("-mr3") is walked one option at a time.
    while (true) {
      const OptionSpec& o = *c.spec;
      if (o.kind == OptionKind::kHelp) throw HelpRequested(helpText());
      if (o.kind == OptionKind::kVersion) throw HelpRequested(versionText() + "\n");
      if (o.kind == OptionKind::kFlag) {
        t.flags_[std::string(o.dest)] = c.name;
        if (!c.explicitValue) break;
        const OptionSpec* next = c.isShort && !c.explicitValue->empty()
                                     ? findShort(std::string("-") + c.explicitValue->front())
                                     : nullptr;
        if (!next) {
          throw UsageError(c.name + ": takes no value, got '" + *c.explicitValue +
                           "' (a flag: " + dashed(o.dest) + ")");
        }
        std::string rest = c.explicitValue->substr(1);
        c.spec = next;
        c.name = displayName(*next);
        c.explicitValue = rest.empty() ? std::nullopt : std::optional<std::string>(rest);
        continue;
      }
      std::string value;
      if (c.explicitValue) {
        value = *c.explicitValue;
      } else if (i + 1 < args.size() && args[i + 1] != "--" &&
                 classify(args[i + 1], true).what == Classified::kPositional) {
        value = args[++i];
      } else {
        std::string mv = metavarOf(o);
        throw UsageError(c.name + ": expected a value: " + dashed(o.dest) + " " + mv + " or " +
                         dashed(o.dest) + "=" + mv);
      }
      t.values_[std::string(o.dest)] = {value, c.name};
      break;
    }
  }
  if (spec_.takesScript && !t.script_) {
    std::string name = spec_.positionals.empty() ? "training_script" : spec_.positionals[0].first;
    throw UsageError("the following arguments are required: " + name + seeHelp);
  }
  return t;
}

void OptionParser::applyEnvironment(ParsedOptions& t,
                                    const std::map<std::string, std::string>& env) const {
  for (const auto* o : options_) {
    if (o->env.empty() || t.given(o->dest)) continue;
    auto it = env.find(envName(*o));
    if (it == env.end()) continue;
    if (o->kind == OptionKind::kFlag) {
      if (parseEnvFlag(it->first, it->second)) t.flags_[std::string(o->dest)] = it->first;
    } else if (o->kind == OptionKind::kValue) {
      t.values_[std::string(o->dest)] = {it->second, it->first};
    }
  }
}

std::string OptionParser::usageLine() const {
  return "usage: " + spec_.program + " " + spec_.usage;
}

std::string OptionParser::helpText() const {
  constexpr std::size_t kHelpColumn = 24;
  std::string out = usageLine() + "\n\n";
  auto paragraph = [&](const std::string& text) { out += wrap(text, 0, 0) + "\n"; };
  auto entry = [&](const std::string& names, std::string_view help) {
    std::string line = "  " + names;
    if (line.size() + 2 <= kHelpColumn) {
      out += line + std::string(kHelpColumn - line.size(), ' ');
    } else {
      out += line + "\n" + std::string(kHelpColumn, ' ');
    }
    out += wrap(std::string(help), kHelpColumn, kHelpColumn);
  };
  auto names = [](const OptionSpec& o) {
    std::string n = o.shortName.empty() ? "" : std::string(o.shortName) + ", ";
    n += dashed(o.dest);
    if (o.kind == OptionKind::kValue) n += " " + metavarOf(o);
    if (!o.alias.empty()) n += ", " + dashed(o.alias);
    return n;
  };

  for (const auto& p : spec_.description) paragraph(p);
  if (!spec_.positionals.empty()) {
    out += "positional arguments:\n";
    for (const auto& [name, help] : spec_.positionals) entry(name, help);
    out += "\n";
  }
  std::vector<std::string_view> groups{""};
  for (const auto* o : options_) {
    if (std::find(groups.begin(), groups.end(), o->group) == groups.end()) {
      groups.push_back(o->group);
    }
  }
  for (std::size_t g = 0; g < groups.size(); ++g) {
    out += (g == 0 ? std::string("options") : std::string(groups[g])) + ":\n";
    for (const auto* o : options_) {
      if (o->group == groups[g]) entry(names(*o), o->help);
    }
    out += "\n";
  }
  for (const auto& p : spec_.epilog) paragraph(p);
  while (out.size() >= 2 && out[out.size() - 1] == '\n' && out[out.size() - 2] == '\n') {
    out.pop_back();
  }
  return out;
}

std::optional<int> handleUsage(const OptionParser& parser, const std::function<void()>& parse) {
  try {
    parse();
  } catch (const HelpRequested& help) {
    std::fputs(help.text().c_str(), stdout);
    std::fflush(stdout);
    return 0;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s\n%s: error: %s\n", parser.usageLine().c_str(),
                 parser.spec().program.c_str(), e.what());
    return 2;
  }
  return std::nullopt;
}

}  // namespace dtrun::launcher
