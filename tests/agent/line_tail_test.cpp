// agent/line_tail.h: the last lines of a stream or a log file, as the failure report shows them.
#include "agent/line_tail.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "tests/support/test_support.h"

using dtrun::test::TempDir;
using dtrun::test::writeFile;

TEST_CASE("lastLines and tailFile", "[agent][logs]") {
  using dtrun::agent::lastLines;
  CHECK(lastLines("a\nb\nc\n", 2) == std::vector<std::string>{"b", "c"});
  CHECK(lastLines("a\nb\nc", 5) == std::vector<std::string>{"a", "b", "c"});
  CHECK(lastLines("x 1%\rx 50%\rx 100%\n", 5) == std::vector<std::string>{"x 100%"});
  CHECK(lastLines("crlf\r\nnext\r\n", 5) == std::vector<std::string>{"crlf", "next"});
  CHECK(lastLines("", 5).empty());

  TempDir dir;
  auto path = (dir.path() / "stderr.log").string();
  CHECK(dtrun::agent::tailFile(path, 3).empty());  // no file
  std::string text;
  for (int i = 0; i < 40000; ++i) text += "line number " + std::to_string(i) + "\n";  // > 256 KiB
  text += "Traceback (most recent call last):\nValueError: boom\n";
  writeFile(path, text);
  CHECK(dtrun::agent::tailFile(path, 3) ==
        std::vector<std::string>{"line number 39999",
                                 "Traceback (most recent call last):", "ValueError: boom"});
  auto many = dtrun::agent::tailFile(path, 100000);
  REQUIRE_FALSE(many.empty());
  CHECK(many.front().rfind("line number ", 0) == 0);  // starts on a whole line
  CHECK(many.size() < 40000);                         // only the last 256 KiB were read
}
