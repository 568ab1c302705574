#include "common/torch_error_file.h"

#include <cmath>
#include <limits>

#include "common/decimal.h"
#include "common/error.h"

namespace dtrun {
namespace {

bool isBlank(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// int(s) for a str: blanks around, one sign, digits with single '_' between them.
std::optional<std::int64_t> pythonIntOfText(std::string_view s) {
  while (!s.empty() && isBlank(s.front())) s.remove_prefix(1);
  while (!s.empty() && isBlank(s.back())) s.remove_suffix(1);
  std::string digits;
  if (!s.empty() && (s.front() == '+' || s.front() == '-')) {
    if (s.front() == '-') digits += '-';
    s.remove_prefix(1);
  }
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' && i > 0 && i + 1 < s.size() && s[i - 1] != '_' && s[i + 1] != '_') continue;
    if (s[i] < '0' || s[i] > '9') return std::nullopt;
    digits += s[i];
  }
  return parseDecimal(digits);
}

const ErrorJson* member(const ErrorJson& object, const char* name) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(name);
  return it == object.end() ? nullptr : &*it;
}

void dumpInto(const ErrorJson& j, std::string& out) {
  if (j.is_object()) {
    out += '{';
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!first) out += ", ";
      first = false;
      out += ErrorJson(it.key()).dump(-1, ' ', true, ErrorJson::error_handler_t::replace);
      out += ": ";
      dumpInto(it.value(), out);
    }
    out += '}';
  } else if (j.is_array()) {
    out += '[';
    bool first = true;
    for (const auto& v : j) {
      if (!first) out += ", ";
      first = false;
      dumpInto(v, out);
    }
    out += ']';
  } else {
    out += j.dump(-1, ' ', true, ErrorJson::error_handler_t::replace);
  }
}

}  // namespace

std::optional<std::int64_t> pythonInt(const ErrorJson& v) {
  if (v.is_boolean()) return v.get<bool>() ? 1 : 0;
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      return std::nullopt;
    }
    return static_cast<std::int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (v.is_number_float()) {
    const double d = std::trunc(v.get<double>());
    // 2^63 is exactly representable; anything at or past it does not fit.
    if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0)) return std::nullopt;
    return static_cast<std::int64_t>(d);
  }
  if (v.is_string()) return pythonIntOfText(v.get_ref<const std::string&>());
  return std::nullopt;
}

TorchErrorFile decodeTorchErrorFile(std::string_view text) {
  TorchErrorFile f;
  try {
    f.document = ErrorJson::parse(text);
  } catch (const ErrorJson::exception& e) {
    throw ConfigError(e.what());
  }
  const ErrorJson* message = member(f.document, "message");
  if (!message) throw ConfigError("not a JSON object with a \"message\" field");
  const auto timestampOf = [&](const ErrorJson* t) {
    if (!t) return;
    f.timestamp = pythonInt(*t);
    if (!f.timestamp) throw ConfigError("timestamp " + t->dump() + " is not an integer");
  };
  if (message->is_string()) {
    f.message = message->get<std::string>();
    timestampOf(member(f.document, "timestamp"));
    return f;
  }
  if (!message->is_object()) {
    throw ConfigError("\"message\" is neither a string nor an object");
  }
  f.recordFormat = true;
  if (const ErrorJson* m = member(*message, "message"); m && m->is_string()) {
    f.message = m->get<std::string>();
  }
  if (const ErrorJson* extra = member(*message, "extraInfo")) {
    if (const ErrorJson* cs = member(*extra, "py_callstack"); cs && cs->is_string()) {
      f.callstack = cs->get<std::string>();
    }
    timestampOf(member(*extra, "timestamp"));
  }
  if (const ErrorJson* code = member(*message, "errorCode"); code && code->is_number_integer()) {
    f.errorCode = code->get<int>();
  }
  return f;
}

ErrorJson makeTorchErrorRecord(const std::string& message, const std::string& callstack,
                               std::int64_t timestampS, std::optional<int> errorCode) {
  ErrorJson extra = ErrorJson::object();
  extra["py_callstack"] = callstack;
  extra["timestamp"] = std::to_string(timestampS);  // torch writes str(int(time.time()))
  ErrorJson inner = ErrorJson::object();
  inner["message"] = message;
  inner["extraInfo"] = std::move(extra);
  if (errorCode) inner["errorCode"] = *errorCode;
  ErrorJson doc = ErrorJson::object();
  doc["message"] = std::move(inner);
  return doc;
}

std::string dumpPythonStyle(const ErrorJson& doc) {
  std::string out;
  dumpInto(doc, out);
  return out;
}

}  // namespace dtrun
