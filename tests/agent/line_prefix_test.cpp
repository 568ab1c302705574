// agent/line_prefix.h: torchrun's console prefixes, substituted as Python's string.Template does.
#include "agent/line_prefix.h"

#include <catch2/catch.hpp>

using dtrun::agent::LinePrefixVars;

TEST_CASE("safeSubstitute behaves like Python's Template.safe_substitute", "[agent][logs]") {
  using dtrun::agent::safeSubstitute;
  std::map<std::string, std::string> v = {{"role_name", "trainer"}, {"rank", "7"}};
  CHECK(safeSubstitute("[${role_name}${rank}]:", v) == "[trainer7]:");
  CHECK(safeSubstitute("$role_name-$rank!", v) == "trainer-7!");
  CHECK(safeSubstitute("$rank_x ${rank}x", v) == "$rank_x 7x");  // longest identifier wins
  CHECK(safeSubstitute("cost: $$5 ${unknown} $unknown", v) == "cost: $5 ${unknown} $unknown");
  CHECK(safeSubstitute("$ ${1} ${rank a$", v) == "$ ${1} ${rank a$");  // invalid: as written
  CHECK(safeSubstitute("", v).empty());
}

TEST_CASE("makeLinePrefix: torchrun's default and the template variables", "[agent][logs]") {
  LinePrefixVars vars{.roleName = "default",
                      .rank = 9,
                      .localRank = 1,
                      .host = "node-3",
                      .nodeRank = 4,
                      .restart = 2};
  CHECK(dtrun::agent::makeLinePrefix("", vars) == "[default1]:");
  CHECK(dtrun::agent::makeLinePrefix("${host}:${node_rank}:${rank}/${local_rank}#${restart} ",
                                     vars) == "node-3:4:9/1#2 ");
}
