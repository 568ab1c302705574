// common/secret_file.h: the store's token file, read with ssh's checks on a private key.
#include "common/secret_file.h"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <string>

#include "common/error.h"
#include "common/file_util.h"
#include "tests/support/test_support.h"

using Catch::Matchers::Contains;
using dtrun::ConfigError;
using dtrun::readSecretFile;

namespace {

std::string writeSecret(const dtrun::test::TempDir& dir, const std::string& name,
                        const std::string& text, mode_t mode) {
  const std::string path = dir.path().string() + "/" + name;
  dtrun::writeWholeFile(path, text, mode, "test file");
  ::chmod(path.c_str(), mode);  // whatever the umask did
  return path;
}

}  // namespace

TEST_CASE("readSecretFile: a private file's contents, without the trailing newline", "[common]") {
  dtrun::test::TempDir dir;
  const std::string token = "Zm9vYmFyYmF6cXV4cXV1eA== with a space";
  CHECK(readSecretFile(writeSecret(dir, "t", token + "\r\n\n", 0600), "token") == token);
  CHECK(readSecretFile(writeSecret(dir, "r", token, 0400), "token") == token);
}

TEST_CASE("readSecretFile: each unsafe or useless file is refused with the fix", "[common]") {
  dtrun::test::TempDir dir;
  const std::string token = "0123456789abcdef0123";
  CHECK_THROWS_WITH(
      readSecretFile(dir.path().string() + "/missing", "--token-file"),
      Contains("--token-file " + dir.path().string() + "/missing") && Contains("No such file"));
  CHECK_THROWS_WITH(readSecretFile(dir.path().string(), "--token-file"),
                    Contains("not a regular file"));
  // A FIFO planted at the path is refused at once, not waited on.
  const std::string fifo = dir.path().string() + "/fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(readSecretFile(fifo, "--token-file"), Contains("not a regular file"));
  CHECK_THROWS_WITH(readSecretFile(writeSecret(dir, "open", token, 0644), "--token-file"),
                    Contains("mode 0644") && Contains("chmod 600"));
  CHECK_THROWS_WITH(readSecretFile(writeSecret(dir, "group", token, 0620), "--token-file"),
                    Contains("group or others"));
  CHECK_THROWS_WITH(readSecretFile(writeSecret(dir, "empty", "\n", 0600), "--token-file"),
                    Contains("empty") && Contains("/dev/urandom"));
  CHECK_THROWS_WITH(readSecretFile(writeSecret(dir, "short", "abc\n", 0600), "--token-file"),
                    Contains("shorter than 16 bytes"));
  CHECK_THROWS_WITH(
      readSecretFile(writeSecret(dir, "long", std::string(dtrun::kMaxSecretBytes + 1, 'x'), 0600),
                     "--token-file"),
      Contains("longer than 4096 bytes"));
  CHECK_THROWS_AS(readSecretFile("", "--token-file"), ConfigError);
}
