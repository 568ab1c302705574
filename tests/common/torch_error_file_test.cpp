// common/torch_error_file.h: the one codec of torch's error file, which the agent reads and
// worker_runtime writes. The two copies it replaced disagreed on a bad timestamp (the agent
// dropped it and kept the file, the worker refused the file); torch's ProcessFailure does int()
// and raises, so both ends now refuse the file, and accept every value int() takes.
#include "common/torch_error_file.h"

#include <catch2/catch.hpp>
#include <string>

#include "common/error.h"

using dtrun::decodeTorchErrorFile;
using dtrun::dumpPythonStyle;
using dtrun::ErrorJson;
using dtrun::makeTorchErrorRecord;
using dtrun::pythonInt;

TEST_CASE("pythonInt is Python's int() of a JSON value", "[common][error_file]") {
  const auto of = [](const char* json) { return pythonInt(ErrorJson::parse(json)); };
  CHECK(of("17") == 17);
  CHECK(of("-3") == -3);
  CHECK(of("17.9") == 17);    // int(17.9)
  CHECK(of("-17.9") == -17);  // truncated toward zero
  CHECK(of("true") == 1);     // int(True)
  CHECK(of("false") == 0);
  CHECK(of("\"42\"") == 42);
  CHECK(of("\" \\t42\\n \"") == 42);  // int(" \t42\n ")
  CHECK(of("\"+5\"") == 5);
  CHECK(of("\"-5\"") == -5);
  CHECK(of("\"1_000\"") == 1000);
  CHECK(of("\"007\"") == 7);
  CHECK(of("9223372036854775807") == INT64_C(9223372036854775807));
  for (const char* refused :
       {"null", "[]", "{}", "\"\"", "\" \"", "\"soon\"", "\"17.0\"", "\"1e3\"", "\"0x10\"",
        "\"1__0\"", "\"_1\"", "\"1_\"", "\"+\"", "\"- 1\"", "\"1 2\"", "9223372036854775808",
        "1e300", "\"99999999999999999999\""}) {
    INFO(refused);
    CHECK_FALSE(of(refused).has_value());
  }
}

TEST_CASE("decodeTorchErrorFile reads both formats and what torch reads from them",
          "[common][error_file]") {
  auto record = decodeTorchErrorFile(
      R"({"message": {"message": "RuntimeError: boom", "extraInfo": {"py_callstack": "tb\n", )"
      R"("timestamp": "1700000123"}, "errorCode": 1}})");
  CHECK(record.recordFormat);
  CHECK(record.message == "RuntimeError: boom");
  CHECK(record.callstack == "tb\n");
  CHECK(record.timestamp == 1700000123);
  CHECK(record.errorCode == 1);
  CHECK(dumpPythonStyle(record.document) ==
        R"({"message": {"message": "RuntimeError: boom", "extraInfo": {"py_callstack": "tb\n", )"
        R"("timestamp": "1700000123"}, "errorCode": 1}})");

  auto plain = decodeTorchErrorFile(R"({"message": "plain failure", "timestamp": 7.5})");
  CHECK_FALSE(plain.recordFormat);
  CHECK(plain.message == "plain failure");
  CHECK(plain.timestamp == 7);
  CHECK_FALSE(plain.callstack);
  CHECK_FALSE(plain.errorCode);

  // What torch's report falls back on: no message.message, no extraInfo, no timestamp.
  auto bare = decodeTorchErrorFile(R"({"message": {"errorCode": 3}})");
  CHECK(bare.recordFormat);
  CHECK_FALSE(bare.message);
  CHECK_FALSE(bare.callstack);
  CHECK_FALSE(bare.timestamp);
  CHECK(bare.errorCode == 3);
  CHECK_FALSE(decodeTorchErrorFile(R"({"message": "m"})").timestamp);
}

TEST_CASE("decodeTorchErrorFile refuses what is not an error file, bad timestamps included",
          "[common][error_file]") {
  const char* cases[][2] = {
      {"", "parse error"},
      {"[1]", "not a JSON object with a \"message\" field"},
      {R"({"msg": "x"})", "not a JSON object with a \"message\" field"},
      {R"({"message": 17})", "\"message\" is neither a string nor an object"},
      {R"({"message": "m", "timestamp": "soon"})", "timestamp \"soon\" is not an integer"},
      {R"({"message": {"extraInfo": {"timestamp": "17.0"}}})",
       "timestamp \"17.0\" is not an integer"},
      {R"({"message": {"extraInfo": {"timestamp": null}}})", "timestamp null is not an integer"},
  };
  for (const auto& [text, why] : cases) {
    INFO(text);
    CHECK_THROWS_AS(decodeTorchErrorFile(text), dtrun::ConfigError);
    CHECK_THROWS_WITH(decodeTorchErrorFile(text), Catch::Contains(why));
  }
}

TEST_CASE("makeTorchErrorRecord and dumpPythonStyle match Python's json.dumps",
          "[common][error_file]") {
  // Expected bytes from: json.dumps({"message": {"message": "ValueError: x", "extraInfo":
  //   {"py_callstack": 'Tb\n"q" \u00e9 \t\x01 \\ /', "timestamp": "1"}}})
  auto doc = makeTorchErrorRecord("ValueError: x", "Tb\n\"q\" \xc3\xa9 \t\x01 \\ /", 1);
  CHECK(dumpPythonStyle(doc) ==
        R"({"message": {"message": "ValueError: x", "extraInfo": {"py_callstack": )"
        R"("Tb\n\"q\" \u00e9 \t\u0001 \\ /", "timestamp": "1"}}})");
  ErrorJson mixed = ErrorJson::parse(R"({"b": [1, {"a": null}], "a": true})");
  CHECK(dumpPythonStyle(mixed) == R"({"b": [1, {"a": null}], "a": true})");
  // The error code goes last, as Python's dict keeps insertion order.
  CHECK(dumpPythonStyle(makeTorchErrorRecord("E", "tb", 5, 0)) ==
        R"({"message": {"message": "E", "extraInfo": {"py_callstack": "tb", "timestamp": "5"}, )"
        R"("errorCode": 0}})");
  // Invalid UTF-8 is replaced, not fatal.
  CHECK(dumpPythonStyle(makeTorchErrorRecord("bad \xff", "", 0)).find("\\ufffd") !=
        std::string::npos);
  // What is written reads back.
  auto back = decodeTorchErrorFile(dumpPythonStyle(makeTorchErrorRecord("m", "cs", 99, -9)));
  CHECK(back.message == "m");
  CHECK(back.callstack == "cs");
  CHECK(back.timestamp == 99);
  CHECK(back.errorCode == -9);
}
