// The round an agent's tests hand to the policy and to the worker environment.
#pragma once

#include <cstdint>

#include "rendezvous/dynamic_rendezvous.h"

namespace dtrun::agent::testing {

/// Round `round` as node `groupRank` of `groupWorldSize` nodes sees it, every node running
/// `nproc` workers.
inline rendezvous::RoundInfo roundOf(std::int64_t round, int groupRank = 0, int groupWorldSize = 1,
                                     int nproc = 2) {
  rendezvous::RoundInfo r;
  r.round = round;
  r.groupRank = groupRank;
  r.groupWorldSize = groupWorldSize;
  r.rankOffset = groupRank * nproc;
  r.worldSize = groupWorldSize * nproc;
  return r;
}

}  // namespace dtrun::agent::testing
