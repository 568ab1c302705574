// `accelerate launch`'s command line as dtrun reads it: every option of accelerate's launch
// parser, in its groups, with the Python type and default accelerate gives it, read by dtrun's one
// option parser (launcher/option_parser.h) with accelerate's rules (both spellings of each name,
// no abbreviations, everything after the script is the script's). dtrun's own options that make
// sense before the script (--python, --event-log, --file-timer, ...) are accepted too.
//
// What the parser yields is turned into accelerate's argparse namespace (AccelerateArgs): every
// dest with its default or the given value converted as argparse would (int, float, bool(),
// str_to_bool), and the set of dests given, which accelerate's config merge consults.
#pragma once

#include <map>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/option_parser.h"
#include "launcher/py_value.h"

namespace dtrun::launcher {

/// How argparse converts an option's text.
enum class PyType {
  kFlag,       ///< store_true in an option group: default False
  kTopFlag,    ///< store_true at the top level (--debug, -m, ...): default None
  kStr,        ///< the text
  kInt,        ///< int()
  kFloat,      ///< float()
  kPyBool,     ///< type=bool: bool() of the text, so any non-empty text is True
  kStrToBool,  ///< accelerate's str_to_bool: 1 for y/yes/t/true/on/1, 0 for n/no/f/false/off/0
  kBoolTuple,  ///< comma-separated str_to_bool values (--fp8_override_linear_precision)
};

/// One option of `accelerate launch`.
struct AccelerateOption {
  std::string_view dest;
  std::string_view shortName;
  PyType type;
  std::string_view def;      ///< the default as text for `type` ("None" = None)
  std::string_view choices;  ///< "no|fp16|bf16|fp8", or "" for any value
  std::string_view group;
  std::string_view help;
};

/// accelerate launch's options, in its help's order.
std::span<const AccelerateOption> accelerateOptions();

/// The parser of `dtrun accelerate`: accelerateOptions(), then dtrun's own options
/// (frontEndDtrunOptions(FrontEnd::kAccelerate), launcher/front_end.h).
const OptionParser& accelerateParser();

/// accelerate's argparse namespace for one command line.
struct AccelerateArgs {
  std::map<std::string, PyValue> values;       ///< every dest; config keys land here too
  std::set<std::string> nondefault;            ///< the dests given on the command line
  std::map<std::string, std::string> sources;  ///< dest -> how it was spelled, for messages
  std::string script;
  std::vector<std::string> scriptArgs;

  /// The value of `dest`, None when there is none.
  const PyValue& get(const std::string& dest) const;
  /// Where `dest` came from, for an error message ("--num_processes", or `fallback`).
  std::string source(const std::string& dest, const std::string& fallback) const;
};

/// The namespace for `parsed` (accelerateParser()'s result). Throws UsageError naming the option
/// for a value argparse would refuse (not an int, not one of the choices).
AccelerateArgs accelerateArgs(const ParsedOptions& parsed);

}  // namespace dtrun::launcher
