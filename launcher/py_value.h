// Python values as accelerate holds them. accelerate keeps its command line in an argparse
// namespace and reads its config file with PyYAML (YAML 1.1 rules) or json; what a worker finally
// gets is the str() of those objects ("True", "1.0", "none"). `dtrun accelerate`
// (launcher/accelerate_launch.h) keeps the same objects, so that every variable is spelled as
// accelerate spells it: PyValue is one of them, with Python's str() and truth, argparse's type
// conversions, and PyYAML's reading of a plain scalar.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dtrun::launcher {

/// One Python object of the kinds a config file or a command line can hold.
struct PyValue {
  enum class Kind { kNone, kBool, kInt, kFloat, kStr, kList, kDict };
  Kind kind = Kind::kNone;
  bool b = false;
  std::int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<PyValue> items;                           ///< kList
  std::vector<std::pair<std::string, PyValue>> fields;  ///< kDict, in the file's order

  static PyValue none() { return {}; }
  static PyValue boolean(bool v);
  static PyValue integer(std::int64_t v);
  static PyValue real(double v);
  static PyValue str(std::string v);

  bool isNone() const { return kind == Kind::kNone; }
  /// Python's str(): "None", "True", "2", "1.0", the text itself, "['a', 'b']".
  std::string text() const;
  /// Python's repr() (str() but for strings, which are quoted).
  std::string repr() const;
  /// Python's bool(): False for None, False, 0, 0.0, "", [] and {}.
  bool truthy() const;
  bool operator==(const PyValue&) const = default;
};

/// Python's repr() of a float ("1.0", "0.1", "1e-05", "1e+16", "inf", "nan"). Pure.
std::string pyFloatRepr(double v);

/// int(text) as Python reads it (blanks around, a sign, '_' between digits); false when it is
/// not one. Pure.
bool pyParseInt(std::string_view text, std::int64_t& out);

/// float(text) as Python reads it ("1", " 2.5", "1e-3", "inf", "nan"); false when it is not
/// one. Pure.
bool pyParseFloat(std::string_view text, double& out);

/// A plain (unquoted, untagged) YAML scalar as PyYAML's safe_load resolves it under YAML 1.1:
/// null (~, null, Null, NULL, empty), bool (yes/no/true/false/on/off in three cases), int
/// (decimal, 0b, 0 octal, 0x, base 60 with ':', '_' ignored), float (with a '.', or .inf,
/// .nan), else the string itself. Pure.
PyValue resolvePlainYamlScalar(const std::string& text);

}  // namespace dtrun::launcher
