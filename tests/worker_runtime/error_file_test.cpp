// Error files: torch's record format written, read back, and accepted from torch itself.
#include "dtrun/worker/error_file.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "tests/support/test_support.h"
#include "tests/worker_runtime/process_harness.h"

namespace {

using dtrun::worker::ErrorRecord;
using dtrun::worker::formatErrorRecord;
using dtrun::worker::parseErrorRecord;

struct BadThing : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace

TEST_CASE("the error file has torch's record layout", "[worker][error_file]") {
  ErrorRecord r;
  r.message = "std::runtime_error: boom \"quoted\" \xc3\xa9";
  r.callstack = "  #0 main\n  #1 __libc_start_main\n";
  r.timestamp = 1700000000;
  nlohmann::json doc = nlohmann::json::parse(formatErrorRecord(r));
  // {"message": {"message": str, "extraInfo": {"py_callstack": str, "timestamp": "<int>"}}}
  REQUIRE(doc.is_object());
  REQUIRE(doc.size() == 1);
  const auto& m = doc.at("message");
  REQUIRE(m.is_object());
  CHECK(m.size() == 2);
  CHECK(m.at("message") == r.message);
  const auto& extra = m.at("extraInfo");
  CHECK(extra.size() == 2);
  CHECK(extra.at("py_callstack") == r.callstack);
  REQUIRE(extra.at("timestamp").is_string());  // torch writes str(int(time.time()))
  CHECK(extra.at("timestamp") == "1700000000");
  // Member order as torch's json.dumps writes it.
  std::string text = formatErrorRecord(r);
  CHECK(text.find("\"message\"") < text.find("\"extraInfo\""));
  CHECK(text.find("\"py_callstack\"") < text.find("\"timestamp\""));
}

TEST_CASE("error records round-trip", "[worker][error_file]") {
  ErrorRecord r;
  r.message = "dtrun::TimeoutError: waited 300000 ms for store keys /x";
  r.callstack = "line 1\nline 2\n\ttabbed\n";
  r.timestamp = 1234567890;
  SECTION("without an error code") {
    ErrorRecord back = parseErrorRecord(formatErrorRecord(r));
    CHECK(back.message == r.message);
    CHECK(back.callstack == r.callstack);
    CHECK(back.timestamp == r.timestamp);
    CHECK_FALSE(back.errorCode.has_value());
  }
  SECTION("with the error code the agent adds") {
    r.errorCode = 3;
    nlohmann::json doc = nlohmann::json::parse(formatErrorRecord(r));
    CHECK(doc["message"]["errorCode"] == 3);
    CHECK(parseErrorRecord(formatErrorRecord(r)).errorCode == 3);
  }
}

TEST_CASE("error files written by torch parse", "[worker][error_file]") {
  // As torch's @record writes it (torch/distributed/elastic/multiprocessing/
  // errors/error_handler.py), and after the agent added errorCode.
  ErrorRecord r = parseErrorRecord(
      R"({"message": {"message": "RuntimeError: boom", "extraInfo": {"py_callstack": )"
      R"("Traceback (most recent call last):\n  File \"t.py\", line 3\nRuntimeError: boom\n", )"
      R"("timestamp": "1700000123"}, "errorCode": 1}})");
  CHECK(r.message == "RuntimeError: boom");
  CHECK_THAT(r.callstack, Catch::StartsWith("Traceback (most recent call last):"));
  CHECK(r.timestamp == 1700000123);
  CHECK(r.errorCode == 1);
  // The alternative format.
  ErrorRecord alt = parseErrorRecord(R"({"message": "plain failure", "timestamp": 1700000001})");
  CHECK(alt.message == "plain failure");
  CHECK(alt.timestamp == 1700000001);
}

TEST_CASE("other JSON is refused", "[worker][error_file]") {
  for (const char* text :
       {"", "not json", "[]", "{}", R"({"msg": "x"})", R"({"message": 3})",
        R"({"message": {"extraInfo": {}}})",
        R"({"message": {"message": "x", "extraInfo": {"timestamp": "soon"}}})"}) {
    INFO(text);
    CHECK_THROWS_AS(parseErrorRecord(text), dtrun::ConfigError);
  }
}

TEST_CASE("makeErrorRecord names the exception type and stamps the time", "[worker][error_file]") {
  auto before = std::chrono::system_clock::now();
  ErrorRecord r = dtrun::worker::makeErrorRecord(BadThing("it broke"));
  CHECK_THAT(r.message, Catch::Matches(".*BadThing: it broke"));
  CHECK_THAT(r.callstack, Catch::Contains("#0"));
  CHECK_THAT(r.callstack, Catch::EndsWith("BadThing: it broke\n"));
  auto seconds = std::chrono::duration_cast<std::chrono::seconds>(before.time_since_epoch());
  CHECK(r.timestamp >= seconds.count());
  CHECK(r.timestamp <= seconds.count() + 60);
}

TEST_CASE("recordError writes TORCHELASTIC_ERROR_FILE and nothing without it",
          "[worker][error_file]") {
  dtrun::test::TempDir dir;
  const std::string path = (dir.path() / "error.json").string();
  dtrun::test::writeFile(path, "stale contents that must be replaced entirely");
  ErrorRecord r = dtrun::worker::makeErrorRecord("native failure 42");
  dtrun::worker::WorkerEnv env;
  env.errorFile = path;
  REQUIRE(dtrun::worker::recordError(env, r));
  ErrorRecord back = parseErrorRecord(dtrun::test::readFile(path));
  CHECK(back.message == "native failure 42");
  CHECK(back.timestamp == r.timestamp);

  CHECK_FALSE(dtrun::worker::recordError(std::string(), r));
  CHECK_FALSE(dtrun::worker::recordError((dir.path() / "missing-dir" / "e.json").string(), r));
  CHECK_THROWS_WITH(dtrun::worker::writeErrorFile((dir.path() / "no" / "e.json").string(), r),
                    Catch::Contains("cannot write error file"));
}

TEST_CASE("a worker process records its error, even when its environment is broken",
          "[worker][error_file]") {
  dtrun::test::TempDir dir;
  const std::string path = (dir.path() / "error.json").string();
  SECTION("complete environment") {
    dtrun::test::Child child(
        {WORKER_PROBE, "record-error", "probe says 7"},
        dtrun::test::workerEnv(0, 1, 1, 29500, 0, {{"TORCHELASTIC_ERROR_FILE", path}}));
    REQUIRE(child.wait(std::chrono::seconds(30)) == 1);
    CHECK(parseErrorRecord(dtrun::test::readFile(path)).message == "probe says 7");
  }
  SECTION("RANK missing") {
    dtrun::test::Child child(
        {WORKER_PROBE, "env"},
        dtrun::test::workerEnv(0, 1, 1, 29500, 0,
                               {{"TORCHELASTIC_ERROR_FILE", path}, {"RANK", std::nullopt}}));
    REQUIRE(child.wait(std::chrono::seconds(30)) == 2);
    ErrorRecord r = parseErrorRecord(dtrun::test::readFile(path));
    CHECK_THAT(r.message, Catch::Contains("WorkerEnvError: worker environment: RANK is not set"));
  }
}
