#include "common/host_port.h"

#include "common/decimal.h"

namespace dtrun {

HostPort splitHostPort(std::string_view text) {
  HostPort out;
  std::optional<std::string_view> port;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos) throw HostPortError("unclosed '['", std::nullopt);
    out.host = std::string(text.substr(1, close - 1));
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':') throw HostPortError("expected ':' after ']'", std::nullopt);
      port = text.substr(close + 2);
    }
  } else if (const auto colon = text.rfind(':'); colon != std::string_view::npos) {
    out.host = std::string(text.substr(0, colon));
    port = text.substr(colon + 1);
  } else {
    out.host = std::string(text);
  }
  if (port) {
    // Digits only: parseDecimal would take a '-'.
    const bool digits = !port->empty() && port->size() <= 5 && port->front() != '-';
    const auto value = digits ? parseDecimal(*port) : std::nullopt;
    if (!value || *value > 65535) {
      throw HostPortError("port '" + std::string(*port) + "' is not a number from 0 to 65535",
                          std::string(*port));
    }
    out.port = static_cast<std::uint16_t>(*value);
  }
  return out;
}

bool isIpv6Text(std::string_view host) { return host.find(':') != std::string_view::npos; }

std::string hostPortText(std::string_view host, std::uint16_t port) {
  std::string out;
  const bool v6 = isIpv6Text(host);
  if (v6) out += '[';
  out += host;
  if (v6) out += ']';
  out += ':';
  out += std::to_string(port);
  return out;
}

}  // namespace dtrun
