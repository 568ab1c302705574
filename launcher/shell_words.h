// Command lines as text, the way a POSIX shell reads and writes them: --ssh-command is split into
// words, and the command a remote shell runs is built from quoted words.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dtrun::launcher {

/// Splits `text` into words as sh does (no expansions): blanks separate words; '...' keeps
/// everything; "..." keeps everything but \" \\ \$ \`; a backslash outside quotes keeps the next
/// character. Throws UsageError naming `option` for an unterminated quote or a trailing
/// backslash, and for a text with no word.
std::vector<std::string> splitShellWords(const std::string& option, const std::string& text);

/// `word` quoted for sh: bare when it holds only characters no shell treats specially, else in
/// single quotes (a quote inside as '\''). Pure.
std::string shellQuote(std::string_view word);

/// The words quoted and joined by single spaces. Pure.
std::string shellJoin(const std::vector<std::string>& words);

}  // namespace dtrun::launcher
