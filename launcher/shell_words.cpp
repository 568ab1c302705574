#include "launcher/shell_words.h"

#include <algorithm>
#include <cctype>
#include <utility>

#include "launcher/args.h"

namespace dtrun::launcher {

std::vector<std::string> splitShellWords(const std::string& option, const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  bool inWord = false;
  auto fail = [&](const std::string& why) {
    return UsageError(option + ": " + why + " in '" + text + "'");
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (inWord) words.push_back(std::exchange(word, {}));
      inWord = false;
      continue;
    }
    inWord = true;
    if (c == '\\') {
      if (++i == text.size()) throw fail("a backslash ends the text");
      word += text[i];
    } else if (c == '\'') {
      auto close = text.find('\'', i + 1);
      if (close == std::string::npos) throw fail("unterminated single quote");
      word += text.substr(i + 1, close - i - 1);
      i = close;
    } else if (c == '"') {
      for (++i;; ++i) {
        if (i == text.size()) throw fail("unterminated double quote");
        if (text[i] == '"') break;
        if (text[i] == '\\' && i + 1 < text.size() &&
            std::string_view("\"\\$`").find(text[i + 1]) != std::string_view::npos) {
          ++i;
        }
        word += text[i];
      }
    } else {
      word += c;
    }
  }
  if (inWord) words.push_back(word);
  if (words.empty()) throw UsageError(option + ": expected a command, got '" + text + "'");
  return words;
}

std::string shellQuote(std::string_view word) {
  bool plain = !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) ||
           std::string_view("@%+=:,./-_").find(c) != std::string_view::npos;
  });
  if (plain) return std::string(word);
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string shellJoin(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + shellQuote(w);
  return out;
}

}  // namespace dtrun::launcher
