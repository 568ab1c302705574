#include "common/decimal.h"

#include <cctype>

namespace dtrun {
namespace {

// The digits of `text` from `i` on as a number with `negative`'s sign; `end` is set past the
// last digit. Accumulates negatively so that INT64_MIN parses, as std::stoll does.
std::optional<std::int64_t> digitsFrom(std::string_view text, std::size_t i, bool negative,
                                       std::size_t& end) {
  std::int64_t value = 0;
  const std::size_t first = i;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    if (__builtin_mul_overflow(value, 10, &value) ||
        __builtin_sub_overflow(value, text[i] - '0', &value)) {
      return std::nullopt;
    }
  }
  end = i;
  if (i == first) return std::nullopt;
  if (!negative && __builtin_mul_overflow(value, -1, &value)) return std::nullopt;
  return value;
}

}  // namespace

std::optional<std::int64_t> parseDecimal(std::string_view text) {
  const bool negative = !text.empty() && text[0] == '-';
  std::size_t end = 0;
  auto value = digitsFrom(text, negative ? 1 : 0, negative, end);
  if (!value || end != text.size()) return std::nullopt;
  return value;
}

std::optional<std::int64_t> parseLeadingDecimal(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  bool negative = false;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) negative = text[i++] == '-';
  std::size_t end = 0;
  return digitsFrom(text, i, negative, end);
}

}  // namespace dtrun
