#include "rendezvous/store.h"

namespace dtrun::rendezvous {

std::string joinKeys(const std::vector<std::string>& keys) {
  std::string s;
  for (const auto& k : keys) {
    if (!s.empty()) s += ", ";
    s += k;
  }
  return s;
}

}  // namespace dtrun::rendezvous
