#include "common/node_id.h"

#include <random>

namespace dtrun {

std::string randomHex(std::size_t digits) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::random_device rd;
  std::string out;
  out.reserve(digits);
  unsigned bits = 0;
  int left = 0;
  while (out.size() < digits) {
    if (left == 0) {
      bits = rd();
      left = 8;  // random_device yields 32 bits on Linux
    }
    out += kHex[bits & 0xf];
    bits >>= 4;
    --left;
  }
  return out;
}

std::string makeNonce() { return randomHex(8); }

std::string nodeId(std::string_view host, int pid, std::string_view nonce) {
  std::string out(host);
  out += ':';
  out += std::to_string(pid);
  if (!nonce.empty()) {
    out += ':';
    out += nonce;
  }
  return out;
}

}  // namespace dtrun
