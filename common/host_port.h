// host:port text: how an address and a port are written in messages, keys and variables, the
// IPv6 way where the host is an IPv6 address ("[::1]:29400", RFC 3986), so that the text can be
// read back unambiguously.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dtrun {

/// "host:port", or "[host]:port" when `host` contains a colon (an IPv6 address). Pure.
std::string hostPortText(std::string_view host, std::uint16_t port);

/// True when `host` is an IPv6 address in text form (it contains a colon; brackets not
/// included). Pure.
bool isIpv6Text(std::string_view host);

}  // namespace dtrun
