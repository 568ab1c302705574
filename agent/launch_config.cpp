#include "agent/launch_config.h"

namespace dtrun::agent {

Std StdSpec::forRank(int localRank) const {
  if (all) return *all;
  auto it = perLocalRank.find(localRank);
  return it == perLocalRank.end() ? Std::kNone : it->second;
}

const char* backendName(RendezvousBackend backend) {
  switch (backend) {
    case RendezvousBackend::kC10d:
      return "c10d";
    case RendezvousBackend::kStatic:
      return "static";
    case RendezvousBackend::kEtcd:
      return "etcd";
  }
  return "c10d";
}

}  // namespace dtrun::agent
