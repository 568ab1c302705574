#include "launcher/rdzv_args.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <system_error>

#include "common/host_port.h"
#include "launcher/store_command.h"
#include "rendezvous/etcd/etcd_client.h"

namespace dtrun::launcher {

NodeRange parseNodeRange(const std::string& option, const std::string& text) {
  auto parts = splitOn(text, ':');
  auto parseCount = [&](const std::string& s, int& out) {
    std::int64_t v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < 1 || v > (1 << 24)) {
      return false;
    }
    out = static_cast<int>(v);
    return true;
  };
  NodeRange r;
  bool ok = false;
  if (parts.size() == 1) {
    ok = parseCount(parts[0], r.min);
    r.max = r.min;
  } else if (parts.size() == 2) {
    ok = parseCount(parts[0], r.min) && parseCount(parts[1], r.max) && r.min <= r.max;
  }
  if (!ok) {
    throw UsageError(option + ": invalid value '" + text +
                     "': expected N or MIN:MAX with 0 < MIN <= MAX");
  }
  return r;
}

Endpoint parseEndpoint(const std::string& option, const std::string& text,
                       std::optional<std::uint16_t> defaultPort) {
  const std::string forms = "expected HOST[:PORT] or [IPV6][:PORT] with PORT from 0 to 65535";
  const std::string hostForms = "; HOST is a name, an IPv4 address or an IPv6 address";
  std::string ep = trimBlanks(text);
  if (ep.empty()) {
    if (!defaultPort) throw UsageError(option + ": no port in '" + text + "': " + forms);
    return {"localhost", *defaultPort};
  }
  HostPort split;
  try {
    split = splitHostPort(ep);
  } catch (const HostPortError& e) {
    throw UsageError(option + (e.inPort() ? ": invalid port in '" : ": invalid host in '") + text +
                     "': " + forms + (e.inPort() ? "" : hostForms));
  }
  const std::string& host = split.host;
  Endpoint out;
  if (split.port) {
    out.port = *split.port;
  } else if (defaultPort) {
    out.port = *defaultPort;
  } else {
    throw UsageError(option + ": no port in '" + text + "': " + forms);
  }
  bool hostOk = !host.empty() && std::all_of(host.begin(), host.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == ':' ||
           c == '-';
  });
  if (!hostOk) {
    throw UsageError(option + ": invalid host in '" + text + "': " + forms + hostForms);
  }
  out.host = host;
  return out;
}

std::map<std::string, std::string> parseKeyValueList(const std::string& option,
                                                     const std::string& text) {
  std::map<std::string, std::string> out;
  std::string s = trimBlanks(text);
  if (s.empty()) return out;
  for (const auto& item : splitOn(s, ',')) {
    auto eq = item.find('=');
    std::string key = trimBlanks(item.substr(0, eq));
    if (key.empty()) {
      throw UsageError(option + ": invalid value '" + text +
                       "': expected KEY=VALUE[,KEY=VALUE...] with non-empty keys");
    }
    std::string value = eq == std::string::npos ? "" : trimBlanks(item.substr(eq + 1));
    if (value.empty()) {
      throw UsageError(option + ": key '" + key +
                       "' has no value: expected KEY=VALUE[,KEY=VALUE...]");
    }
    out[key] = value;
  }
  return out;
}

std::vector<rendezvous::etcd::Endpoint> parseEtcdEndpoints(
    const std::string& option, const std::string& text,
    const std::map<std::string, std::string>& conf) {
  const std::string protocol = confValue(conf, {"protocol"});
  try {
    return rendezvous::etcd::parseEndpoints(option, text, protocol.empty() ? "http" : protocol);
  } catch (const ConfigError& e) {
    throw UsageError(e.what());
  }
}

std::string confValue(const std::map<std::string, std::string>& conf,
                      std::initializer_list<const char*> keys) {
  for (const char* k : keys) {
    if (auto it = conf.find(k); it != conf.end()) return it->second;
  }
  return "";
}

void applyRendezvousConf(agent::RendezvousConfig& r, const std::string& option,
                         const std::string& text) {
  r.conf = parseKeyValueList(option, text);
  auto label = [&](const std::string& key) { return option + " " + key; };
  for (const auto& [key, value] : r.conf) {
    // Torch reads these timeouts as whole seconds; dtrun also takes fractions.
    if (key == "join_timeout") {
      r.joinTimeout = parseSeconds(label(key), value);
    } else if (key == "last_call_timeout") {
      r.lastCallTimeout = parseSeconds(label(key), value);
    } else if (key == "close_timeout") {
      r.closeTimeout = parseSeconds(label(key), value);
    } else if (key == "heartbeat_timeout") {
      r.heartbeatTimeout = parseSeconds(label(key), value);
    } else if (key == "keep_alive_interval") {
      r.keepAliveInterval = parseSeconds(label(key), value);
    } else if (key == "keep_alive_max_attempt") {
      r.keepAliveMaxAttempt = static_cast<int>(parseInteger(label(key), value, 1, 1 << 20));
    } else if (key == "read_timeout") {
      r.readTimeout = parseSeconds(label(key), value);
    } else if (key == "timeout") {
      r.storeTimeout = parseSeconds(label(key), value);
    } else if (key == "is_host") {
      r.isHost = parseBool(label(key), value);
    } else if (key == "use_libuv") {
      parseBool(label(key), value);  // dtrun's store has one implementation; checked, unused
    } else if (key.rfind("store_", 0) == 0 && key != "store_type") {
      // The hosted store's limits (launcher/store_command.h): checked now, applied by the host.
      rendezvous::StoreServerOptions probe;
      if (!applyStoreConfKey(probe, label(key), key, value)) {
        throw UsageError(label(key) + ": unknown store setting (docs/store.md lists them)");
      }
    } else if (key == "protocol") {
      if (value != "http" && value != "https") {
        throw UsageError(label(key) + ": invalid value '" + value + "': expected http or https");
      }
    } else if (key == "quorum_timeout") {
      parseSeconds(label(key), value);  // the etcd backend reads it (launcher/launch.cpp)
    } else if (key == "store_type") {
      if (value != "tcp") {
        throw UsageError(label(key) + ": invalid value '" + value + "': dtrun supports only tcp");
      }
    }
  }
}

}  // namespace dtrun::launcher
