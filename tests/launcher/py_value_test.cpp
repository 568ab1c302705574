// launcher/py_value.h: Python's str() of the values accelerate holds, argparse's conversions,
// and PyYAML's (YAML 1.1) reading of plain scalars; the answers are CPython 3.11's and PyYAML
// 6's.
#include "launcher/py_value.h"

#include <catch2/catch.hpp>
#include <cmath>

using namespace dtrun::launcher;
using Kind = PyValue::Kind;

TEST_CASE("str() of floats is Python's repr", "[launcher][py_value]") {
  CHECK(pyFloatRepr(1.0) == "1.0");
  CHECK(pyFloatRepr(0.1) == "0.1");
  CHECK(pyFloatRepr(-2.5) == "-2.5");
  CHECK(pyFloatRepr(100000.0) == "100000.0");
  CHECK(pyFloatRepr(1e16) == "1e+16");
  CHECK(pyFloatRepr(1.5e16) == "1.5e+16");
  CHECK(pyFloatRepr(123456789012345.6) == "123456789012345.6");
  CHECK(pyFloatRepr(0.0001) == "0.0001");
  CHECK(pyFloatRepr(0.00001) == "1e-05");
  CHECK(pyFloatRepr(1.25e-7) == "1.25e-07");
  CHECK(pyFloatRepr(0.0) == "0.0");
  CHECK(pyFloatRepr(INFINITY) == "inf");
  CHECK(pyFloatRepr(-INFINITY) == "-inf");
  CHECK(pyFloatRepr(NAN) == "nan");
}

TEST_CASE("str(), repr() and bool() of the other kinds", "[launcher][py_value]") {
  CHECK(PyValue::none().text() == "None");
  CHECK(PyValue::boolean(true).text() == "True");
  CHECK(PyValue::boolean(false).text() == "False");
  CHECK(PyValue::integer(-3).text() == "-3");
  CHECK(PyValue::str("no").text() == "no");
  CHECK(PyValue::str("no").repr() == "'no'");
  CHECK(PyValue::str("it's").repr() == "\"it's\"");
  PyValue list;
  list.kind = Kind::kList;
  list.items = {PyValue::str("BertLayer"), PyValue::integer(2), PyValue::none()};
  CHECK(list.text() == "['BertLayer', 2, None]");
  PyValue dict;
  dict.kind = Kind::kDict;
  dict.fields = {{"a", PyValue::boolean(true)}};
  CHECK(dict.text() == "{'a': True}");
  CHECK_FALSE(PyValue::none().truthy());
  CHECK_FALSE(PyValue::str("").truthy());
  CHECK(PyValue::str("false").truthy());  // a non-empty string, as in Python
  CHECK_FALSE(PyValue::integer(0).truthy());
  CHECK_FALSE(PyValue::real(0.0).truthy());
  CHECK(PyValue::real(0.5).truthy());
}

TEST_CASE("int() and float() as Python reads them", "[launcher][py_value]") {
  std::int64_t i = 0;
  CHECK((pyParseInt(" 12 ", i) && i == 12));
  CHECK((pyParseInt("+3", i) && i == 3));
  CHECK((pyParseInt("-3", i) && i == -3));
  CHECK((pyParseInt("1_000", i) && i == 1000));
  CHECK_FALSE(pyParseInt("1__0", i));
  CHECK_FALSE(pyParseInt("_1", i));
  CHECK_FALSE(pyParseInt("1.5", i));
  CHECK_FALSE(pyParseInt("", i));
  CHECK_FALSE(pyParseInt("two", i));
  double f = 0;
  CHECK((pyParseFloat("1", f) && f == 1.0));
  CHECK((pyParseFloat(" 2.5", f) && f == 2.5));
  CHECK((pyParseFloat("1e-3", f) && f == 1e-3));
  CHECK((pyParseFloat("inf", f) && std::isinf(f)));
  CHECK_FALSE(pyParseFloat("0x10", f));
  CHECK_FALSE(pyParseFloat("fast", f));
}

TEST_CASE("plain YAML scalars get YAML 1.1's types, as PyYAML's safe_load",
          "[launcher][py_value]") {
  auto kind = [](const char* s) { return resolvePlainYamlScalar(s).kind; };
  for (const char* n : {"", "~", "null", "Null", "NULL"}) CHECK(kind(n) == Kind::kNone);
  // The tutorial's unquoted `mixed_precision: no`.
  for (const char* b : {"no", "No", "NO", "off", "false", "False"}) {
    INFO(b);
    CHECK(resolvePlainYamlScalar(b) == PyValue::boolean(false));
  }
  for (const char* b : {"yes", "YES", "on", "true", "True"}) {
    CHECK(resolvePlainYamlScalar(b) == PyValue::boolean(true));
  }
  CHECK(resolvePlainYamlScalar("2") == PyValue::integer(2));
  CHECK(resolvePlainYamlScalar("-7") == PyValue::integer(-7));
  CHECK(resolvePlainYamlScalar("0") == PyValue::integer(0));
  CHECK(resolvePlainYamlScalar("010") == PyValue::integer(8));  // octal in YAML 1.1
  CHECK(resolvePlainYamlScalar("0x1A") == PyValue::integer(26));
  CHECK(resolvePlainYamlScalar("0b101") == PyValue::integer(5));
  CHECK(resolvePlainYamlScalar("1_000") == PyValue::integer(1000));
  CHECK(resolvePlainYamlScalar("1:30") == PyValue::integer(90));  // base 60
  CHECK(resolvePlainYamlScalar("1.0") == PyValue::real(1.0));
  CHECK(resolvePlainYamlScalar("1.") == PyValue::real(1.0));
  CHECK(resolvePlainYamlScalar(".5") == PyValue::real(0.5));
  CHECK(resolvePlainYamlScalar("1.0e-3") == PyValue::real(0.001));
  CHECK(std::isinf(resolvePlainYamlScalar(".inf").f));
  CHECK(std::isnan(resolvePlainYamlScalar(".nan").f));
  // Without a dot PyYAML reads no float: "1e3" stays a string, as do the rest.
  for (const char* s : {"1e3", "all", "0,1", "none", "FULL_SHARD", "127.0.0.1", "09", "fp16"}) {
    INFO(s);
    CHECK(resolvePlainYamlScalar(s) == PyValue::str(s));
  }
}
