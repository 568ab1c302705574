// "host:port": the one reading and writing of an address in text, for the command line
// (--rdzv-endpoint, --master-addr), etcd's member list and the addresses agents leave in the
// store for each other. An IPv6 address is written in brackets, "[::1]:29500".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/error.h"

namespace dtrun {

/// An address as text gives it.
struct HostPort {
  std::string host;                   ///< the brackets of "[IPV6]" removed
  std::optional<std::uint16_t> port;  ///< nullopt: the text has none
};

/// Why a text is not HOST[:PORT]. what() says it in a few words, for the caller to put after
/// the text and where it came from.
class HostPortError : public ConfigError {
 public:
  /// `port`: the port's text, when the host part was fine and the port is what is wrong.
  HostPortError(const std::string& why, std::optional<std::string> port)
      : ConfigError(why), port_(std::move(port)) {}
  /// True when the port is what is wrong.
  bool inPort() const { return port_.has_value(); }
  /// The refused port's text ("" unless inPort()).
  std::string port() const { return port_.value_or(""); }

 private:
  std::optional<std::string> port_;
};

/// Splits "HOST", "HOST:PORT", "[IPV6]" or "[IPV6]:PORT" with torch's rule
/// (parse_rendezvous_endpoint): without brackets the port is what follows the last ':', so a
/// bare IPv6 address needs them. A port is 1 to 5 digits, at most 65535 (0 included: callers
/// that need a real port check). The host may be empty; what a host may contain is the
/// caller's rule. Throws HostPortError. Pure.
HostPort splitHostPort(std::string_view text);

/// "host:port", or "[host]:port" when the host has a ':' (an IPv6 address), so that the text
/// reads back unambiguously (RFC 3986). Pure.
std::string hostPortText(std::string_view host, std::uint16_t port);

/// True when `host` is an IPv6 address in text form (it contains a colon; brackets not
/// included). Pure.
bool isIpv6Text(std::string_view host);

}  // namespace dtrun
