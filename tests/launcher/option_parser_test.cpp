// The table-driven parser (launcher/option_parser.h) on tables of its own: what every dtrun
// subcommand relies on. The torchrun table's own answers are in cli_test.cpp; here, a table in
// the shape of `dtrun store` (values, sizes, integers, -h, no positional) shows that a command
// without a script parses the same way.
#include "launcher/option_parser.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <catch2/catch.hpp>
#include <cstdio>

#include "tests/launcher/launcher_test_util.h"
#include "tests/support/test_support.h"

using namespace dtrun::launcher;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using Args = std::vector<std::string>;

namespace {

constexpr std::array<OptionSpec, 9> kStoreLike{{
    {"help", "-h", OptionKind::kHelp, "", "", "show this message"},
    {"host", "", OptionKind::kValue, "", "", "address to bind", "HOST"},
    {"port", "-p", OptionKind::kValue, "", "DTRUN_TEST_PORT", "port to bind", "PORT"},
    {"max_key_size", "", OptionKind::kValue, "", "", "longest key", "SIZE"},
    {"max_keys", "", OptionKind::kValue, "", "", "most keys per request", "N"},
    {"log_level", "", OptionKind::kValue, "Logging", "", "level", "LEVEL"},
    {"verbose", "-v", OptionKind::kFlag, "Logging", "DTRUN_TEST_VERBOSE", "more output"},
    {"quiet", "-q", OptionKind::kFlag, "Logging", "", "less output", "", "silent"},
    {"exact_only", "", OptionKind::kFlag, "Logging", "", "no prefix", "", "", false},
}};

OptionParser storeLike() {
  return OptionParser(CommandSpec{"dtrun teststore",
                                  "[--host HOST] [--port PORT] [options]",
                                  {kStoreLike},
                                  false,
                                  {"A command without positional arguments."},
                                  {},
                                  {"Exit codes: 0, 1, 2."}});
}

std::string usageError(const OptionParser& p, const Args& args) {
  return testing::usageErrorOf([&] { p.parse(args); });
}

// Runs handleUsage with stdout and stderr sent to files; returns {code, stdout, stderr}.
struct Printed {
  std::optional<int> code;
  std::string out, err;
};
Printed runHandleUsage(const OptionParser& p, const std::function<void()>& body) {
  dtrun::test::TempDir dir;
  std::fflush(stdout);
  std::fflush(stderr);
  int savedOut = ::dup(1), savedErr = ::dup(2);
  int out = ::open((dir.path() / "out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  int err = ::open((dir.path() / "err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ::dup2(out, 1);
  ::dup2(err, 2);
  Printed r;
  r.code = handleUsage(p, body);
  std::fflush(stdout);
  std::fflush(stderr);
  ::dup2(savedOut, 1);
  ::dup2(savedErr, 2);
  for (int fd : {savedOut, savedErr, out, err}) ::close(fd);
  r.out = dtrun::test::readFile(dir.path() / "out");
  r.err = dtrun::test::readFile(dir.path() / "err");
  return r;
}

}  // namespace

TEST_CASE("a command without a script: values, sizes, integers, flags", "[launcher][options]") {
  auto p = storeLike();
  auto t = p.parse({"--host", "::", "--port=0", "--max-key-size", "64K", "--max_keys", "7", "-v",
                    "--log-level=debug"});
  CHECK(t.text("host") == "::");
  CHECK(t.integer("port", 0, 65535) == 0);
  CHECK(t.size("max_key_size") == 64u * 1024);
  CHECK(t.integer("max_keys", 1, 1 << 30) == 7);
  CHECK(t.flag("verbose"));
  CHECK_FALSE(t.flag("quiet"));
  CHECK(t.text("log_level") == "debug");
  CHECK_FALSE(t.script());
  CHECK_FALSE(t.text("missing"));
  CHECK_FALSE(t.integer("max_key_size_never_given", 0, 1));

  // The last one given wins, and a value may start with '-' when it is a number.
  CHECK(p.parse({"-p", "1", "-p", "2"}).integer("port", 0, 65535) == 2);
  CHECK(p.parse({"--host", "-1"}).text("host") == "-1");
  CHECK(p.parse({"-p9"}).integer("port", 0, 65535) == 9);  // glued short value
  CHECK(p.parse({"-vq"}).flag("quiet"));                   // a cluster of short flags

  // Typed reads name the option as given, with the accepted forms.
  CHECK_THROWS_WITH(p.parse({"--port", "x"}).integer("port", 0, 65535),
                    "--port: invalid value 'x': expected an integer from 0 to 65535");
  CHECK_THROWS_WITH(p.parse({"-p", "70000"}).integer("port", 0, 65535),
                    StartsWith("-p/--port: invalid value '70000'"));
  CHECK_THROWS_WITH(p.parse({"--max-key-size=1T"}).size("max_key_size"),
                    StartsWith("--max-key-size: invalid size '1T'"));
}

TEST_CASE("bad command lines are one line naming the culprit", "[launcher][options]") {
  auto p = storeLike();
  CHECK(usageError(p, {"stray"}) == "unrecognized arguments: stray (see dtrun teststore --help)");
  CHECK(usageError(p, {"--", "stray"}) ==
        "unrecognized arguments: stray (see dtrun teststore --help)");
  CHECK(usageError(p, {"--nope"}) == "unrecognized arguments: --nope (see dtrun teststore --help)");
  CHECK(usageError(p, {"--port"}) == "--port: expected a value: --port PORT or --port=PORT");
  CHECK(usageError(p, {"--port", "--host", "h"}) ==
        "--port: expected a value: --port PORT or --port=PORT");
  CHECK(usageError(p, {"--verbose=1"}) == "--verbose: takes no value, got '1' (a flag: --verbose)");
  CHECK(usageError(p, {"--max", "1"}) ==
        "ambiguous option: --max could match --max-key-size, --max-keys");
  // A lone "--" ends the options and gives nothing: no option, no script, no argument.
  const auto dashes = p.parse({"--"});
  CHECK(dashes.givenDests().empty());
  CHECK_FALSE(dashes.script());
  CHECK(dashes.scriptArgs().empty());
}

TEST_CASE("prefixes, both spellings, aliases, exact-only options", "[launcher][options]") {
  auto p = storeLike();
  CHECK(p.parse({"--max-key-s", "1"}).given("max_key_size"));
  CHECK(p.parse({"--max_key_s", "1"}).given("max_key_size"));
  CHECK(usageError(p, {"--max-key", "1"}) ==
        "ambiguous option: --max-key could match --max-key-size, --max-keys");
  CHECK(p.parse({"--log", "info"}).text("log_level") == "info");
  CHECK(p.parse({"--silent"}).flag("quiet"));  // the alias
  CHECK(p.parse({"--sil"}).flag("quiet"));     // a prefix of the alias
  CHECK(p.parse({"--exact-only"}).flag("exact_only"));
  CHECK(p.parse({"--exact_only"}).flag("exact_only"));
  CHECK(usageError(p, {"--exact"}) ==
        "unrecognized arguments: --exact (see dtrun teststore --help)");
}

TEST_CASE("variables fill in what the command line leaves out", "[launcher][options]") {
  auto p = storeLike();
  auto t = p.parse({});
  p.applyEnvironment(t, {{"DTRUN_TEST_PORT", "123"}, {"DTRUN_TEST_VERBOSE", "1"}});
  CHECK(t.integer("port", 0, 65535) == 123);
  CHECK(t.value("port")->source == "DTRUN_TEST_PORT");
  CHECK(t.flagSource("verbose") == "DTRUN_TEST_VERBOSE");
  // The command line wins; a flag's variable is an integer as torchrun's check_env reads it.
  auto given = p.parse({"--port", "5"});
  p.applyEnvironment(given, {{"DTRUN_TEST_PORT", "123"}, {"DTRUN_TEST_VERBOSE", "0"}});
  CHECK(given.integer("port", 0, 65535) == 5);
  CHECK_FALSE(given.flag("verbose"));
  auto bad = p.parse({});
  CHECK_THROWS_WITH(p.applyEnvironment(bad, {{"DTRUN_TEST_VERBOSE", "yes"}}),
                    StartsWith("DTRUN_TEST_VERBOSE: invalid value 'yes'"));
}

TEST_CASE("a command with a script keeps everything after it", "[launcher][options]") {
  static constexpr std::array<OptionSpec, 2> kTable{{
      {"help", "-h", OptionKind::kHelp, "", "", "help"},
      {"nproc", "-n", OptionKind::kValue, "", "", "workers"},
  }};
  OptionParser p(CommandSpec{"dtrun x", "[options] script ...", {kTable}, true, {}, {}, {}});
  auto t = p.parse({"-n", "2", "train.py", "--nproc", "5", "-h"});
  CHECK(t.script() == "train.py");
  CHECK(t.scriptArgs() == Args{"--nproc", "5", "-h"});
  CHECK(p.parse({"--", "-weird.py", "a"}).script() == "-weird.py");
  CHECK(usageError(p, {"-n", "2"}) ==
        "the following arguments are required: training_script (see dtrun x --help)");
  CHECK(p.toArgs(t, [](const OptionSpec&) { return true; }) == Args{"--nproc=2"});
  CHECK(p.toArgs(t, [](const OptionSpec& o) { return o.dest != "nproc"; }).empty());
}

TEST_CASE("help comes from the table, handleUsage prints and picks the exit code",
          "[launcher][options]") {
  auto p = storeLike();
  std::string help = p.helpText();
  CHECK_THAT(help, StartsWith("usage: dtrun teststore [--host HOST] [--port PORT] [options]\n"));
  CHECK_THAT(help, Contains("\noptions:\n  -h, --help") && Contains("\n  --host HOST") &&
                       Contains("\n  -p, --port PORT") && Contains("\nLogging:\n") &&
                       Contains("-q, --quiet, --silent") && Contains("Exit codes: 0, 1, 2."));
  CHECK(help.back() == '\n');
  CHECK(help.substr(help.size() - 2) != "\n\n");
  CHECK_THROWS_AS(p.parse({"--port", "1", "-h"}), HelpRequested);
  CHECK_THROWS_AS(p.parse({"--he"}), HelpRequested);

  auto ok = runHandleUsage(p, [&] { p.parse({"--port", "1"}); });
  CHECK_FALSE(ok.code);
  CHECK(ok.out.empty());
  auto shown = runHandleUsage(p, [&] { p.parse({"--help"}); });
  CHECK(shown.code == 0);
  CHECK(shown.out == help);
  CHECK(shown.err.empty());
  auto bad = runHandleUsage(p, [&] { p.parse({"--port"}); });
  CHECK(bad.code == 2);
  CHECK(bad.out.empty());
  CHECK(bad.err ==
        "usage: dtrun teststore [--host HOST] [--port PORT] [options]\n"
        "dtrun teststore: error: --port: expected a value: --port PORT or --port=PORT\n");
  // A typed read's error inside the parse step is a usage error too.
  auto badValue = runHandleUsage(p, [&] { p.parse({"--max-keys=x"}).integer("max_keys", 1, 9); });
  CHECK(badValue.code == 2);
  CHECK_THAT(badValue.err, Contains("dtrun teststore: error: --max-keys: invalid value 'x'"));
}
