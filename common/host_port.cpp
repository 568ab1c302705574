#include "common/host_port.h"

namespace dtrun {

bool isIpv6Text(std::string_view host) { return host.find(':') != std::string_view::npos; }

std::string hostPortText(std::string_view host, std::uint16_t port) {
  std::string out;
  if (isIpv6Text(host)) {
    out += '[';
    out += host;
    out += ']';
  } else {
    out += host;
  }
  out += ':';
  out += std::to_string(port);
  return out;
}

}  // namespace dtrun
