// Line prefixes of the console (--tee, --log-line-prefix-template): torchrun's template with the
// values of one worker stream, substituted the way Python's string.Template does.
#pragma once

#include <map>
#include <string>
#include <string_view>

namespace dtrun::agent {

/// torchrun's console prefix when teeing: "[default0]:" (no trailing space).
inline constexpr const char* kDefaultLinePrefixTemplate = "[${role_name}${local_rank}]:";

/// The values a line prefix template may use.
struct LinePrefixVars {
  std::string roleName;  ///< ${role_name}
  int rank = 0;          ///< ${rank}: global rank
  int localRank = 0;     ///< ${local_rank}
  std::string host;      ///< ${host}
  int nodeRank = 0;      ///< ${node_rank}
  int restart = 0;       ///< ${restart}: TORCHELASTIC_RESTART_COUNT
};

/// Python's string.Template(tmpl).safe_substitute(vars): "$name" and "${name}" for names in
/// `vars`, "$$" -> "$"; unknown names and stray "$" stay as written. Pure.
std::string safeSubstitute(std::string_view tmpl, const std::map<std::string, std::string>& vars);

/// One stream's prefix: `tmpl` ("" = kDefaultLinePrefixTemplate) with the LinePrefixVars. Pure.
std::string makeLinePrefix(const std::string& tmpl, const LinePrefixVars& vars);

}  // namespace dtrun::agent
