#include "launcher/py_value.h"

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace dtrun::launcher {
namespace {

bool isDigitIn(char c, int base) {
  if (base <= 10) return c >= '0' && c < '0' + base;
  return std::isxdigit(static_cast<unsigned char>(c)) != 0;
}

int digitValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  return std::tolower(static_cast<unsigned char>(c)) - 'a' + 10;
}

// Digits of `base` with '_' anywhere after the first character (YAML 1.1 allows that).
bool yamlDigits(std::string_view s, int base) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c != '_' && !isDigitIn(c, base)) return false;
  }
  return true;
}

bool accumulate(std::string_view digits, int base, std::int64_t& out) {
  out = 0;
  for (char c : digits) {
    if (c == '_') continue;
    const int d = digitValue(c);
    if (out > (std::numeric_limits<std::int64_t>::max() - d) / base) return false;
    out = out * base + d;
  }
  return true;
}

// "[-+]?[1-9][0-9_]*(:[0-5]?[0-9])+" and its float form with a fraction after the last part.
bool yamlBase60(std::string_view s, bool fraction, double& out) {
  std::size_t i = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
  const bool negative = i == 1 && s[0] == '-';
  std::string_view body = s.substr(i);
  std::string_view frac;
  if (fraction) {
    auto dot = body.find('.');
    if (dot == std::string_view::npos) return false;
    frac = body.substr(dot + 1);
    body = body.substr(0, dot);
    if (!frac.empty() && !yamlDigits(frac, 10)) return false;
  }
  auto colon = body.find(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  std::string_view head = body.substr(0, colon);
  if (!yamlDigits(head, 10) || (!fraction && head[0] == '0')) return false;
  double value = 0;
  std::int64_t part = 0;
  accumulate(head, 10, part);
  value = static_cast<double>(part);
  std::string_view rest = body.substr(colon + 1);
  while (true) {
    auto next = rest.find(':');
    std::string_view p = rest.substr(0, next);
    if (p.empty() || p.size() > 2 || !yamlDigits(p, 10) || p.find('_') != std::string_view::npos ||
        (p.size() == 2 && p[0] > '5')) {
      return false;
    }
    accumulate(p, 10, part);
    value = value * 60 + static_cast<double>(part);
    if (next == std::string_view::npos) break;
    rest = rest.substr(next + 1);
  }
  if (fraction && !frac.empty()) {
    std::string digits;
    for (char c : frac) {
      if (c != '_') digits += c;
    }
    if (!digits.empty()) value += std::strtod(("0." + digits).c_str(), nullptr);
  }
  out = negative ? -value : value;
  return true;
}

bool yamlInt(const std::string& s, std::int64_t& out) {
  std::size_t i = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
  const bool negative = i == 1 && s[0] == '-';
  std::string_view body = std::string_view(s).substr(i);
  bool ok = false;
  if (body == "0") {
    out = 0;
    ok = true;
  } else if (body.rfind("0b", 0) == 0 && yamlDigits(body.substr(2), 2)) {
    ok = accumulate(body.substr(2), 2, out);
  } else if (body.rfind("0x", 0) == 0 && yamlDigits(body.substr(2), 16)) {
    ok = accumulate(body.substr(2), 16, out);
  } else if (body.size() > 1 && body[0] == '0' && yamlDigits(body.substr(1), 8)) {
    ok = accumulate(body.substr(1), 8, out);
  } else if (!body.empty() && body[0] >= '1' && body[0] <= '9' && yamlDigits(body, 10)) {
    ok = accumulate(body, 10, out);
  } else {
    double v = 0;
    if (yamlBase60(s, false, v)) {
      out = static_cast<std::int64_t>(v);
      return true;
    }
  }
  if (ok && negative) out = -out;
  return ok;
}

// "[-+]?[0-9][0-9_]*\.[0-9_]*([eE][-+][0-9]+)?" or "\.[0-9][0-9_]*([eE][-+][0-9]+)?".
bool yamlFloat(const std::string& s, double& out) {
  if (s == ".nan" || s == ".NaN" || s == ".NAN") {
    out = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  std::size_t i = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
  std::string_view body = std::string_view(s).substr(i);
  if (body == ".inf" || body == ".Inf" || body == ".INF") {
    out = (i == 1 && s[0] == '-') ? -std::numeric_limits<double>::infinity()
                                  : std::numeric_limits<double>::infinity();
    return true;
  }
  if (yamlBase60(s, true, out)) return true;
  auto dot = body.find('.');
  if (dot == std::string_view::npos) return false;
  std::string_view whole = body.substr(0, dot);
  std::string_view rest = body.substr(dot + 1);
  if (whole.empty()) {
    if (i == 1 || rest.empty() || !std::isdigit(static_cast<unsigned char>(rest[0]))) return false;
  } else if (!std::isdigit(static_cast<unsigned char>(whole[0])) || !yamlDigits(whole, 10)) {
    return false;
  }
  auto e = rest.find_first_of("eE");
  std::string_view frac = rest.substr(0, e);
  if (!frac.empty() && !yamlDigits(frac, 10)) return false;
  if (e != std::string_view::npos) {
    std::string_view exp = rest.substr(e + 1);
    if (exp.size() < 2 || (exp[0] != '-' && exp[0] != '+') || !yamlDigits(exp.substr(1), 10) ||
        exp.find('_') != std::string_view::npos) {
      return false;
    }
  }
  std::string clean;
  for (char c : s) {
    if (c != '_') clean += c;
  }
  out = std::strtod(clean.c_str(), nullptr);
  return true;
}

std::string quoted(const std::string& s) {
  // repr(str): single quotes unless the text holds one and no double quote.
  const char q =
      (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    if (c == '\\' || c == q) out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + q;
}

}  // namespace

PyValue PyValue::boolean(bool v) {
  PyValue p;
  p.kind = Kind::kBool;
  p.b = v;
  return p;
}

PyValue PyValue::integer(std::int64_t v) {
  PyValue p;
  p.kind = Kind::kInt;
  p.i = v;
  return p;
}

PyValue PyValue::real(double v) {
  PyValue p;
  p.kind = Kind::kFloat;
  p.f = v;
  return p;
}

PyValue PyValue::str(std::string v) {
  PyValue p;
  p.kind = Kind::kStr;
  p.s = std::move(v);
  return p;
}

std::string PyValue::text() const {
  switch (kind) {
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return b ? "True" : "False";
    case Kind::kInt:
      return std::to_string(i);
    case Kind::kFloat:
      return pyFloatRepr(f);
    case Kind::kStr:
      return s;
    case Kind::kList: {
      std::string out = "[";
      for (std::size_t k = 0; k < items.size(); ++k) out += (k ? ", " : "") + items[k].repr();
      return out + "]";
    }
    case Kind::kDict: {
      std::string out = "{";
      for (std::size_t k = 0; k < fields.size(); ++k) {
        out += (k ? ", " : "") + quoted(fields[k].first) + ": " + fields[k].second.repr();
      }
      return out + "}";
    }
  }
  return "";
}

std::string PyValue::repr() const { return kind == Kind::kStr ? quoted(s) : text(); }

bool PyValue::truthy() const {
  switch (kind) {
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b;
    case Kind::kInt:
      return i != 0;
    case Kind::kFloat:
      return f != 0;
    case Kind::kStr:
      return !s.empty();
    case Kind::kList:
      return !items.empty();
    case Kind::kDict:
      return !fields.empty();
  }
  return false;
}

std::string pyFloatRepr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  // The shortest digits that read back as `v`, which Python's repr() also uses; then Python's
  // layout: positional for exponents -4..15, else d.ddde+XX.
  std::array<char, 64> buf{};
  auto r = std::to_chars(buf.data(), buf.data() + buf.size(), v, std::chars_format::scientific);
  std::string sci(buf.data(), r.ptr);
  const bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  const auto e = sci.find('e');
  const int exponent = std::atoi(sci.c_str() + e + 1);
  std::string digits;
  for (std::size_t k = 0; k < e; ++k) {
    if (sci[k] != '.') digits += sci[k];
  }
  std::string out;
  if (exponent < -4 || exponent >= 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    const int a = exponent < 0 ? -exponent : exponent;
    out += std::string("e") + (exponent < 0 ? "-" : "+") + (a < 10 ? "0" : "") + std::to_string(a);
  } else if (exponent < 0) {
    out = "0." + std::string(static_cast<std::size_t>(-exponent - 1), '0') + digits;
  } else {
    const auto whole = static_cast<std::size_t>(exponent) + 1;
    if (digits.size() <= whole) {
      out = digits + std::string(whole - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, whole) + "." + digits.substr(whole);
    }
  }
  return negative ? "-" + out : out;
}

bool pyParseInt(std::string_view text, std::int64_t& out) {
  std::size_t b = 0, e = text.size();
  while (b < e && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(text[e - 1]))) --e;
  std::string_view s = text.substr(b, e - b);
  const bool negative = !s.empty() && s[0] == '-';
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) s.remove_prefix(1);
  // Python allows one '_' between digits only.
  if (s.empty() || s.front() == '_' || s.back() == '_' || s.find("__") != std::string_view::npos ||
      !yamlDigits(s, 10) || !accumulate(s, 10, out)) {
    return false;
  }
  if (negative) out = -out;
  return true;
}

bool pyParseFloat(std::string_view text, double& out) {
  std::size_t b = 0, e = text.size();
  while (b < e && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(text[e - 1]))) --e;
  const std::string s(text.substr(b, e - b));
  if (s.empty() || s.find_first_of("xXpP") != std::string::npos) return false;  // no hex floats
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

PyValue resolvePlainYamlScalar(const std::string& s) {
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") return PyValue::none();
  for (const char* t : {"yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"}) {
    if (s == t) return PyValue::boolean(true);
  }
  for (const char* f : {"no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"}) {
    if (s == f) return PyValue::boolean(false);
  }
  double d = 0;
  if (yamlFloat(s, d)) return PyValue::real(d);
  std::int64_t i = 0;
  if (yamlInt(s, i)) return PyValue::integer(i);
  return PyValue::str(s);
}

}  // namespace dtrun::launcher
