// The parser of `dtrun accelerate` over accelerate's option table (accelerate_option_table.cpp),
// and the conversion of what it parsed into accelerate's argparse namespace.
#include "launcher/accelerate_options.h"

#include <cctype>

#include "launcher/front_end.h"

namespace dtrun::launcher {
namespace {

using T = PyType;

// The OptionSpec table the parser reads, made once from accelerateOptions().
const std::vector<OptionSpec>& specs() {
  static const std::vector<OptionSpec> v = [] {
    std::vector<OptionSpec> out;
    for (const auto& o : accelerateOptions()) {
      const bool flag = o.type == T::kFlag || o.type == T::kTopFlag;
      const auto kind = o.dest == "help" ? OptionKind::kHelp
                        : flag           ? OptionKind::kFlag
                                         : OptionKind::kValue;
      // accelerate's parser has allow_abbrev=False: whole names only.
      out.emplace_back(o.dest, o.shortName, kind, o.group, "", o.help, "", "", false);
    }
    return out;
  }();
  return v;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// str_to_bool, or nullopt-free failure through `ok`.
PyValue strToBool(const std::string& text, bool& ok) {
  const std::string v = lower(text);
  ok = true;
  for (const char* t : {"y", "yes", "t", "true", "on", "1"}) {
    if (v == t) return PyValue::integer(1);
  }
  for (const char* f : {"n", "no", "f", "false", "off", "0"}) {
    if (v == f) return PyValue::integer(0);
  }
  ok = false;
  return {};
}

// argparse's conversion of `text` for option `o`; `source` names it in errors.
PyValue convert(const AccelerateOption& o, const std::string& text, const std::string& source) {
  auto bad = [&](const std::string& expected) {
    return UsageError(source + ": invalid value '" + text + "': expected " + expected);
  };
  switch (o.type) {
    case T::kFlag:
    case T::kTopFlag:
      return PyValue::boolean(text == "True");
    case T::kStr:
      return PyValue::str(text);
    case T::kInt: {
      std::int64_t v = 0;
      if (!pyParseInt(text, v)) throw bad("an integer");
      return PyValue::integer(v);
    }
    case T::kFloat: {
      double v = 0;
      if (!pyParseFloat(text, v)) throw bad("a number");
      return PyValue::real(v);
    }
    case T::kPyBool:
      return PyValue::boolean(!text.empty());
    case T::kStrToBool: {
      bool ok = false;
      PyValue v = strToBool(text, ok);
      if (!ok) throw bad("a truth value (yes, no, true, false, on, off, 1, 0)");
      return v;
    }
    case T::kBoolTuple: {
      PyValue list;
      list.kind = PyValue::Kind::kList;
      std::size_t start = 0;
      while (true) {
        auto comma = text.find(',', start);
        std::string item = text.substr(start, comma == std::string::npos ? comma : comma - start);
        if (o.def == text) {
          list.items.push_back(PyValue::boolean(item == "True"));
        } else {
          bool ok = false;
          list.items.push_back(strToBool(item, ok));
          if (!ok) throw bad("truth values separated by commas, such as true,false,false");
        }
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
      return list;
    }
  }
  return {};
}

}  // namespace

const OptionParser& accelerateParser() {
  static const OptionParser parser(CommandSpec{
      "dtrun accelerate",
      "[launch] [-h] [options] training_script [training_script_args ...]",
      {specs(), frontEndDtrunOptions(FrontEnd::kAccelerate)},
      true,
      {"`accelerate launch`'s command line and config file on dtrun: accelerate launch ARGS "
       "becomes dtrun accelerate ARGS (or dtrun accelerate launch ARGS). The config file is found "
       "and merged with the command line as accelerate does, and every worker gets the "
       "arguments and the variables accelerate's launcher would give it; dtrun's agent runs the "
       "processes, with its free ports, restarts, watchdogs and failure report. Every multi-word "
       "option also has the spelling with dashes (--num-processes); there are no abbreviations. "
       "A notice, printed once, shows the same run as a plain dtrun command line.",
       "Not launched: TPU, SageMaker and mpirun (one line says so, exit code 2)."},
      {{"training_script", "Path of the training script (a module name with -m)."},
       {"training_script_args", "Arguments for the training script, passed on untouched."}},
      {"Exit codes: 0 when every worker succeeded, 1 for any failure, 2 for a bad command line "
       "or config file."}});
  return parser;
}

const PyValue& AccelerateArgs::get(const std::string& dest) const {
  static const PyValue none;
  auto it = values.find(dest);
  return it == values.end() ? none : it->second;
}

std::string AccelerateArgs::source(const std::string& dest, const std::string& fallback) const {
  auto it = sources.find(dest);
  return it == sources.end() ? fallback : it->second;
}

AccelerateArgs accelerateArgs(const ParsedOptions& parsed) {
  AccelerateArgs a;
  for (const auto& o : accelerateOptions()) {
    if (o.dest == "help") continue;
    const std::string dest(o.dest);
    const std::string name = OptionParser::dashed(o.dest);
    PyValue& v = a.values[dest];
    // argparse converts a default given as text too (str_to_bool's "true" becomes 1); type=bool
    // defaults are bools already.
    if (o.def == "None") {
      v = PyValue::none();
    } else if (o.type == T::kPyBool) {
      v = PyValue::boolean(o.def == "True");
    } else {
      v = convert(o, std::string(o.def), name);
    }
    if (o.type == T::kFlag || o.type == T::kTopFlag) {
      if (parsed.flag(dest)) {
        v = PyValue::boolean(true);
        a.nondefault.insert(dest);
        a.sources[dest] = parsed.flagSource(dest);
      }
      continue;
    }
    const GivenValue* g = parsed.value(dest);
    if (!g) continue;
    if (!o.choices.empty()) {
      const std::string choices = "|" + std::string(o.choices) + "|";
      if (choices.find("|" + g->value + "|") == std::string::npos) {
        std::string list(o.choices);
        for (char& c : list) c = c == '|' ? ',' : c;
        throw UsageError(g->source + ": invalid choice '" + g->value + "': expected one of " +
                         list);
      }
    }
    v = convert(o, g->value, g->source);
    a.nondefault.insert(dest);
    a.sources[dest] = g->source;
  }
  a.script = parsed.script().value_or("");
  a.scriptArgs = parsed.scriptArgs();
  return a;
}

}  // namespace dtrun::launcher
