#include "agent/error_file.h"

#include <sys/stat.h>

#include <catch2/catch.hpp>

#include "common/error.h"
#include "tests/support/test_support.h"

using dtrun::dumpPythonStyle;
using dtrun::agent::readErrorFile;
using dtrun::agent::withErrorCode;
using dtrun::agent::writeErrorFile;
using dtrun::test::readFile;
using dtrun::test::TempDir;
using dtrun::test::writeFile;

namespace {

// Written by torch 1.13's @record (ErrorHandler.record_exception) under torchrun, verbatim.
const char* kTorchRecordFile =
    R"({"message": {"message": "ValueError: boom on rank 1", "extraInfo": {"py_callstack": )"
    R"("Traceback (most recent call last):\n  File \"/usr/lib/python3/dist-packages/torch/)"
    R"(distributed/elastic/multiprocessing/errors/__init__.py\", line 346, in wrapper\n    )"
    R"(return f(*args, **kwargs)\n           ^^^^^^^^^^^^^^^^^^\n  File \"/tmp/tro/w_rec.py\", )"
    R"(line 8, in main\n    raise ValueError(\"boom on rank 1\")\nValueError: boom on rank 1\n", )"
    R"("timestamp": "1796012051"}}})";

}  // namespace

TEST_CASE("readErrorFile reads torch's record format", "[agent][errorfile]") {
  TempDir dir;
  auto path = (dir.path() / "error.json").string();
  writeFile(path, kTorchRecordFile);
  auto c = readErrorFile(path);
  REQUIRE(c);
  CHECK(c->valid);
  CHECK(c->timestampS == 1796012051);
  CHECK(c->message ==
        "Traceback (most recent call last):\n"
        "  File \"/usr/lib/python3/dist-packages/torch/distributed/elastic/multiprocessing/"
        "errors/__init__.py\", line 346, in wrapper\n"
        "    return f(*args, **kwargs)\n"
        "           ^^^^^^^^^^^^^^^^^^\n"
        "  File \"/tmp/tro/w_rec.py\", line 8, in main\n"
        "    raise ValueError(\"boom on rank 1\")\n"
        "ValueError: boom on rank 1\n");
  // Copying the document back out gives torch's exact bytes (key order, separators).
  CHECK(dumpPythonStyle(c->document) == kTorchRecordFile);
}

TEST_CASE("readErrorFile reads the string format", "[agent][errorfile]") {
  TempDir dir;
  auto path = (dir.path() / "error.json").string();
  writeFile(path, R"({"message": "native worker: NCCL error 2", "timestamp": 1700000001})");
  auto c = readErrorFile(path);
  REQUIRE(c);
  CHECK(c->valid);
  CHECK(c->message == "native worker: NCCL error 2");
  CHECK(c->timestampS == 1700000001);

  writeFile(path, R"({"message": "m", "timestamp": "42"})");
  CHECK(readErrorFile(path)->timestampS == 42);
  writeFile(path, R"({"message": "m", "timestamp": 42.9})");
  CHECK(readErrorFile(path)->timestampS == 42);
  writeFile(path, R"({"message": "m"})");
  CHECK_FALSE(readErrorFile(path)->timestampS);
}

TEST_CASE("readErrorFile falls back like torch inside the record format", "[agent][errorfile]") {
  TempDir dir;
  auto path = (dir.path() / "error.json").string();
  // No py_callstack: message.message.
  writeFile(path,
            R"({"message": {"message": "RuntimeError: x", "extraInfo": {"timestamp": "7"}}})");
  auto c = readErrorFile(path);
  REQUIRE(c);
  CHECK(c->valid);
  CHECK(c->message == "RuntimeError: x");
  CHECK(c->timestampS == 7);
  // Neither: "<N/A>"; no extraInfo at all: no timestamp (torch would crash here).
  writeFile(path, R"({"message": {"errorCode": 3}})");
  c = readErrorFile(path);
  REQUIRE(c);
  CHECK(c->valid);
  CHECK(c->message == "<N/A>");
  CHECK_FALSE(c->timestampS);
}

TEST_CASE("readErrorFile: no file is empty, a malformed one is a message", "[agent][errorfile]") {
  TempDir dir;
  auto path = (dir.path() / "error.json").string();
  CHECK_FALSE(readErrorFile(path));
  CHECK_FALSE(readErrorFile(""));
  CHECK_FALSE(readErrorFile(dir.path().string()));  // a directory is not an error file

  const char* bad[] = {
      "",                                     // empty
      "{\"message\": {\"message\": \"trunc",  // truncated
      "[1, 2, 3]",                            // not an object
      "{\"msg\": \"x\"}",                     // no message
      "{\"message\": 17}",                    // message of the wrong type
      "\xff\xfe garbage",                     // not even text
      // A timestamp Python's int() refuses: torch's agent raises on these files.
      "{\"message\": \"m\", \"timestamp\": \"soon\"}",
      "{\"message\": {\"message\": \"x\", \"extraInfo\": {\"timestamp\": \"17.0\"}}}",
      "{\"message\": {\"extraInfo\": {\"timestamp\": null}}}",
  };
  for (const char* text : bad) {
    INFO("content: " << text);
    writeFile(path, text);
    std::optional<dtrun::agent::ErrorFileContents> c;
    REQUIRE_NOTHROW(c = readErrorFile(path));
    REQUIRE(c);
    CHECK_FALSE(c->valid);
    CHECK_FALSE(c->timestampS);
    CHECK(c->message.find(path) != std::string::npos);
    CHECK(c->message.rfind("Failed to parse error file ", 0) == 0);
  }
}

TEST_CASE("withErrorCode follows torch's override rules", "[agent][errorfile]") {
  auto doc = dtrun::makeTorchErrorRecord("E", "tb", 5);
  auto with = withErrorCode(doc, -9);
  CHECK(with["message"]["errorCode"] == -9);
  // Appended last, as Python's dict insertion does.
  CHECK(dumpPythonStyle(with) ==
        R"({"message": {"message": "E", "extraInfo": {"py_callstack": "tb", "timestamp": "5"}, )"
        R"("errorCode": -9}})");
  CHECK(withErrorCode(doc, 0) == doc);  // `if error_code:`
  auto str = nlohmann::ordered_json::parse(R"({"message": "plain", "timestamp": 1})");
  CHECK(withErrorCode(str, 1) == str);  // string messages are left alone
}

TEST_CASE("writeErrorFile replaces an existing file", "[agent][errorfile]") {
  TempDir dir;
  auto path = (dir.path() / "agent_error.json").string();
  writeFile(path, "old contents that are much longer than the new document ...........");
  ::chmod(path.c_str(), 0444);  // os.remove() does not care; neither may we
  auto doc = withErrorCode(dtrun::makeTorchErrorRecord("E", "tb", 5), 1);
  writeErrorFile(path, doc);
  CHECK(readFile(path) == dumpPythonStyle(doc));
  auto back = readErrorFile(path);
  REQUIRE(back);
  CHECK(back->valid);
  CHECK(back->document == doc);

  CHECK_THROWS_AS(writeErrorFile((dir.path() / "no/such/dir/e.json").string(), doc), dtrun::Error);
}
