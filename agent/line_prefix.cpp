#include "agent/line_prefix.h"

namespace dtrun::agent {
namespace {

bool isIdentStart(char c) { return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool isIdentChar(char c) { return isIdentStart(c) || (c >= '0' && c <= '9'); }

}  // namespace

std::string safeSubstitute(std::string_view tmpl, const std::map<std::string, std::string>& vars) {
  std::string out;
  out.reserve(tmpl.size());
  std::size_t i = 0;
  while (i < tmpl.size()) {
    char c = tmpl[i];
    if (c != '$' || i + 1 >= tmpl.size()) {
      out += c;
      ++i;
      continue;
    }
    char next = tmpl[i + 1];
    if (next == '$') {  // escaped
      out += '$';
      i += 2;
      continue;
    }
    if (next == '{') {  // braced: ${name}
      std::size_t j = i + 2;
      if (j < tmpl.size() && isIdentStart(tmpl[j])) {
        while (j < tmpl.size() && isIdentChar(tmpl[j])) ++j;
        if (j < tmpl.size() && tmpl[j] == '}') {
          std::string name(tmpl.substr(i + 2, j - i - 2));
          auto it = vars.find(name);
          out += it != vars.end() ? it->second : std::string(tmpl.substr(i, j + 1 - i));
          i = j + 1;
          continue;
        }
      }
      out += '$';  // invalid: left as written
      ++i;
      continue;
    }
    if (isIdentStart(next)) {  // named: $name
      std::size_t j = i + 1;
      while (j < tmpl.size() && isIdentChar(tmpl[j])) ++j;
      std::string name(tmpl.substr(i + 1, j - i - 1));
      auto it = vars.find(name);
      out += it != vars.end() ? it->second : std::string(tmpl.substr(i, j - i));
      i = j;
      continue;
    }
    out += '$';
    ++i;
  }
  return out;
}

std::string makeLinePrefix(const std::string& tmpl, const LinePrefixVars& vars) {
  return safeSubstitute(tmpl.empty() ? std::string_view(kDefaultLinePrefixTemplate) : tmpl,
                        {{"role_name", vars.roleName},
                         {"rank", std::to_string(vars.rank)},
                         {"local_rank", std::to_string(vars.localRank)},
                         {"host", vars.host},
                         {"node_rank", std::to_string(vars.nodeRank)},
                         {"restart", std::to_string(vars.restart)}});
}

}  // namespace dtrun::agent
