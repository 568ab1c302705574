// The Catch2 main of every test executable. One addition to Catch2's own: a run whose filter
// matched no test case fails (Catch2 exits 0 then), so that a ctest entry whose name no longer
// names a case (renamed, or cut in two by a ';') cannot pass without running anything.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>

namespace {

int casesStarted = 0;

struct CaseCounter : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseStarting(Catch::TestCaseInfo const& info) override {
    ++casesStarted;
    TestEventListenerBase::testCaseStarting(info);
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(CaseCounter)

int main(int argc, char* argv[]) {
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  const Catch::Config& c = session.config();
  const bool listing =
      c.listTests() || c.listTestNamesOnly() || c.listTags() || c.listReporters() || c.showHelp();
  const int failed = session.run();
  if (!listing && casesStarted == 0) {
    std::fprintf(stderr, "no test case matched the filter, so nothing was tested\n");
    return 1;
  }
  return failed;
}
