// The one command-line style of every dtrun subcommand: a table of OptionSpec read the way
// Python's argparse reads torchrun's command line (both spellings of multi-word options, unique
// prefixes, --opt=value and --opt value, glued short options, negative numbers as values, the
// first positional ending the options), with the help text printed from the same table.
//
// Parsing never exits the process: a bad command line is a UsageError whose one line names the
// option (or variable) and what it expects, -h/--help is a HelpRequested carrying the help text.
// handleUsage() turns both into dtrun's conventions: help on stdout and exit code 0, or the usage
// line and "<program>: error: <message>" on stderr and exit code 2.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "launcher/args.h"

namespace dtrun::launcher {

/// Thrown for -h/--help: text() is the help to print on stdout before exiting with code 0.
class HelpRequested : public std::exception {
 public:
  explicit HelpRequested(std::string text) : text_(std::move(text)) {}
  const char* what() const noexcept override { return text_.c_str(); }
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

enum class OptionKind {
  kValue,    ///< takes one value: --name VALUE, --name=VALUE, -x VALUE, -xVALUE
  kFlag,     ///< takes none; on when given
  kHelp,     ///< prints the help (HelpRequested)
  kVersion,  ///< prints dtrun's version and commit (HelpRequested with launcher/version.h's text)
};

/// One option. The long names come from `dest`: --a-b, and also --a_b for a multi-word dest.
struct OptionSpec {
  // A constructor rather than an aggregate, so tables may leave the last fields out.
  constexpr OptionSpec(std::string_view dest, std::string_view shortName, OptionKind kind,
                       std::string_view group, std::string_view env, std::string_view help,
                       std::string_view metavar = "", std::string_view alias = "",
                       bool abbreviable = true)
      : dest(dest),
        shortName(shortName),
        kind(kind),
        group(group),
        env(env),
        help(help),
        metavar(metavar),
        alias(alias),
        abbreviable(abbreviable) {}

  std::string_view dest;       ///< argparse's dest ("nproc_per_node"); the key of every lookup
  std::string_view shortName;  ///< "-m", or "" for none
  OptionKind kind;
  std::string_view group;  ///< title of its help section ("" = the "options:" section)
  /// The variable read when the command line leaves the option out: "PET" = PET_<DEST> (as
  /// torchrun), "" = none, anything else = that variable's name.
  std::string_view env;
  std::string_view help;
  std::string_view metavar;  ///< the value's name in the help; "" = DEST in capitals
  /// Another dest-style name spelled the same two ways ("num_accelerators": --num-accelerators
  /// and --num_accelerators), or "".
  std::string_view alias;
  bool abbreviable;  ///< false: only full names are accepted, never a prefix
};

/// A value as given, with where it came from ("--nnodes", "-r", "PET_NNODES") for messages.
struct GivenValue {
  std::string value;
  std::string source;
};

/// The result of OptionParser::parse: what was given, by dest.
class ParsedOptions {
 public:
  /// The value given to a value option, or null.
  const GivenValue* value(std::string_view dest) const;
  /// True when a flag is on.
  bool flag(std::string_view dest) const;
  /// True when the option was given (a value, or a flag that is on).
  bool given(std::string_view dest) const { return value(dest) || flag(dest); }
  /// Where a flag's "on" came from ("--standalone", "PET_STANDALONE"), or "".
  std::string flagSource(std::string_view dest) const;

  /// Typed reads of a value option: nullopt when not given, a UsageError naming the source when
  /// the value is bad (launcher/args.h's helpers).
  std::optional<std::string> text(std::string_view dest) const;
  std::optional<std::int64_t> integer(std::string_view dest, std::int64_t min,
                                      std::int64_t max) const;
  std::optional<std::uint64_t> size(std::string_view dest) const;
  std::optional<std::chrono::milliseconds> seconds(std::string_view dest,
                                                   bool allowZero = false) const;

  /// The first positional argument (the training script), when the command takes one.
  const std::optional<std::string>& script() const { return script_; }
  /// Everything after the script, untouched.
  const std::vector<std::string>& scriptArgs() const { return scriptArgs_; }

  /// Every dest given, values and flags, in no particular order.
  std::vector<std::string> givenDests() const;

 private:
  friend class OptionParser;
  std::map<std::string, GivenValue, std::less<>> values_;  // the last one given wins
  std::map<std::string, std::string, std::less<>> flags_;  // dest -> source, for flags on
  std::optional<std::string> script_;
  std::vector<std::string> scriptArgs_;
};

/// What a command looks like: its name, its options and the words of its help.
struct CommandSpec {
  std::string program;  ///< "dtrun", "dtrun launch", "dtrun store": the prefix of errors
  /// What follows "usage: <program> " ("[-h] [options] training_script ...").
  std::string usage;
  /// Option tables, concatenated in this order (the help lists sections by first appearance).
  std::vector<std::span<const OptionSpec>> tables;
  /// True: the first positional argument is the script and everything after it its arguments
  /// (argparse's REMAINDER). False: a positional argument is an error.
  bool takesScript = false;
  std::vector<std::string> description;  ///< paragraphs after the usage line
  std::vector<std::pair<std::string, std::string>> positionals;  ///< names and help
  std::vector<std::string> epilog;                               ///< paragraphs after the options
  /// With takesScript: positional arguments may come anywhere among the options (argparse's
  /// nargs='+', as in `dtrun timeline a.jsonl b.jsonl -o out.html`); script() is the first,
  /// scriptArgs() the others. False: the first positional ends the options.
  bool positionalsAnywhere = false;
};

class OptionParser {
 public:
  explicit OptionParser(CommandSpec spec);

  /// Reads `args` (argv without the program and subcommand words). Pure; throws UsageError
  /// for an unknown, ambiguous or valueless option (and a missing script when the command takes
  /// one), HelpRequested for -h/--help before the script.
  ParsedOptions parse(const std::vector<std::string>& args) const;

  /// Fills in, from `env`, every option with a variable that `parsed` lacks. A flag's variable
  /// is read as torchrun's check_env reads it (an integer, non-zero = on). Pure.
  void applyEnvironment(ParsedOptions& parsed, const std::map<std::string, std::string>& env) const;

  /// The whole -h text, options grouped by section, wrapped at 100 columns.
  std::string helpText() const;
  /// "usage: <program> <usage>".
  std::string usageLine() const;
  const CommandSpec& spec() const { return spec_; }

  /// `parsed` as a command line again: "--name=value" for values, "--name" for flags that are
  /// on, in table order, for the options `keep` accepts. Values from variables are included.
  std::vector<std::string> toArgs(const ParsedOptions& parsed,
                                  const std::function<bool(const OptionSpec&)>& keep) const;

  /// The option with this dest, or null.
  const OptionSpec* find(std::string_view dest) const;
  /// "--a-b": the canonical spelling of an option, for messages and for command lines built
  /// from parsed options.
  static std::string dashed(std::string_view dest);
  /// The variable an option falls back to ("PET_NNODES"), or "".
  static std::string envName(const OptionSpec& o);

 private:
  struct Classified;
  Classified classify(const std::string& arg, bool forValue) const;
  const OptionSpec* resolveLong(const std::string& arg, const std::string& name, bool forValue,
                                std::string& matched) const;
  const OptionSpec* findShort(std::string_view name) const;

  CommandSpec spec_;
  std::vector<const OptionSpec*> options_;
};

/// Runs `parse` (which parses a command line and keeps what it needs) under dtrun's usage
/// conventions. Returns nullopt when it returned normally; else prints and returns the exit
/// code: HelpRequested -> its text on stdout, 0; UsageError -> `parser`'s usage line and
/// "<program>: error: <message>" on stderr, 2. Other exceptions propagate.
std::optional<int> handleUsage(const OptionParser& parser, const std::function<void()>& parse);

}  // namespace dtrun::launcher
