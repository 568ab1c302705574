#include "launcher/args.h"

#include <cctype>
#include <charconv>

namespace dtrun::launcher {

std::int64_t parseInteger(const std::string& option, const std::string& text, std::int64_t min,
                          std::int64_t max) {
  std::int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v < min || v > max) {
    throw UsageError(option + ": invalid value '" + text + "': expected an integer from " +
                     std::to_string(min) + " to " + std::to_string(max));
  }
  return v;
}

std::uint64_t parseSize(const std::string& option, const std::string& text) {
  std::string digits = text;
  std::uint64_t unit = 1;
  if (!digits.empty()) {
    switch (std::toupper(static_cast<unsigned char>(digits.back()))) {
      case 'K':
        unit = 1ull << 10;
        break;
      case 'M':
        unit = 1ull << 20;
        break;
      case 'G':
        unit = 1ull << 30;
        break;
      default:
        break;
    }
    if (unit != 1) digits.pop_back();
  }
  std::uint64_t v = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || v == 0 ||
      v > (1ull << 40) / unit) {
    throw UsageError(option + ": invalid size '" + text +
                     "': expected a positive number of bytes, optionally with K, M or G");
  }
  return v * unit;
}

}  // namespace dtrun::launcher
