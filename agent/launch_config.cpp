#include "agent/launch_config.h"

namespace dtrun::agent {

Std StdSpec::forRank(int localRank) const {
  if (all) return *all;
  auto it = perLocalRank.find(localRank);
  return it == perLocalRank.end() ? Std::kNone : it->second;
}

}  // namespace dtrun::agent
