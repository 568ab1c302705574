// common/decimal.h: the strict reading of numbers dtrun wrote itself, and std::stoll's reading of
// the value a store's ADD increments. The copies these replaced disagreed on " 12", "+7" and
// "12abc" (from_chars refused them, stoll and the store took them): each now has its one rule.
#include "common/decimal.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>
#include <string>

using dtrun::parseDecimal;
using dtrun::parseLeadingDecimal;

TEST_CASE("parseDecimal reads the whole text or nothing", "[common]") {
  using L = std::numeric_limits<std::int64_t>;
  CHECK(parseDecimal("0") == 0);
  CHECK(parseDecimal("42") == 42);
  CHECK(parseDecimal("-42") == -42);
  CHECK(parseDecimal("007") == 7);
  CHECK(parseDecimal("9223372036854775807") == L::max());
  CHECK(parseDecimal("-9223372036854775808") == L::min());
  for (const char* bad : {"", " ", "-", "+7", " 12", "12 ", "12abc", "1.5", "0x10", "1e3",
                          "9223372036854775808", "-9223372036854775809", "--1", "- 1"}) {
    INFO("'" << bad << "'");
    CHECK_FALSE(parseDecimal(bad).has_value());
  }
  CHECK_FALSE(parseDecimal(std::string("5\0", 2)).has_value());
}

TEST_CASE("parseLeadingDecimal reads decimal text the way std::stoll does", "[common]") {
  using L = std::numeric_limits<std::int64_t>;
  CHECK(parseLeadingDecimal("0") == 0);
  CHECK(parseLeadingDecimal("42") == 42);
  CHECK(parseLeadingDecimal("-42") == -42);
  CHECK(parseLeadingDecimal("+7") == 7);
  CHECK(parseLeadingDecimal("  \t\n12") == 12);
  CHECK(parseLeadingDecimal("12abc") == 12);
  CHECK(parseLeadingDecimal("007") == 7);
  CHECK(parseLeadingDecimal("9223372036854775807") == L::max());
  CHECK(parseLeadingDecimal("-9223372036854775808") == L::min());
  CHECK_FALSE(parseLeadingDecimal("9223372036854775808").has_value());
  CHECK_FALSE(parseLeadingDecimal("-9223372036854775809").has_value());
  CHECK_FALSE(parseLeadingDecimal("99999999999999999999999").has_value());
  CHECK_FALSE(parseLeadingDecimal("").has_value());
  CHECK_FALSE(parseLeadingDecimal("   ").has_value());
  CHECK_FALSE(parseLeadingDecimal("-").has_value());
  CHECK_FALSE(parseLeadingDecimal("+-1").has_value());
  CHECK_FALSE(parseLeadingDecimal("abc").has_value());
  CHECK_FALSE(parseLeadingDecimal("x12").has_value());
  CHECK_FALSE(parseLeadingDecimal(std::string("\0"
                                              "5",
                                              2))
                  .has_value());
}
