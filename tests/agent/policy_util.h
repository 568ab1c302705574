// What the policy's tests share: quiet settings, actions picked by kind, a round played up to
// running workers. Header-only, for tests/agent/policy*_test.cpp.
#pragma once

#include <signal.h>
#include <spdlog/sinks/null_sink.h>

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "agent/policy.h"
#include "tests/agent/round_util.h"

namespace dtrun::agent::testing {

using rendezvous::JobState;
using rendezvous::RoundInfo;
using State = Policy::State;

inline std::shared_ptr<spdlog::logger> quiet() {
  return std::make_shared<spdlog::logger>("agent", std::make_shared<spdlog::sinks::null_sink_mt>());
}

inline PolicySettings settings(int nproc = 2, int maxNodes = 1) {
  PolicySettings s;
  s.hostname = "node7";
  s.entrypointName = "train.py";
  s.nprocPerNode = nproc;
  s.maxRestarts = 3;
  s.maxNodes = maxNodes;
  s.closeTimeout = std::chrono::seconds(30);
  return s;
}

inline JobState stateOf(std::int64_t round) {
  JobState s;
  s.round = round;
  return s;
}

inline ExitStatus exitCode(int code) { return ExitStatus{code, std::nullopt}; }
inline ExitStatus killedBy(int signo) { return ExitStatus{0, signo}; }

template <typename A>
std::vector<const A*> all(const std::vector<Action>& actions) {
  std::vector<const A*> out;
  for (const auto& a : actions) {
    if (const auto* p = std::get_if<A>(&a)) out.push_back(p);
  }
  return out;
}

// The one action of kind A (a copy: the actions are often a temporary).
template <typename A>
A only(const std::vector<Action>& actions) {
  auto found = all<A>(actions);
  INFO("actions of the wanted kind: " << found.size());
  REQUIRE(found.size() == 1);
  return *found.front();
}

template <typename A>
bool has(const std::vector<Action>& actions) {
  return !all<A>(actions).empty();
}

inline std::vector<std::string> recorded(const std::vector<Action>& actions) {
  std::vector<std::string> names;
  for (const auto* r : all<action::Record>(actions)) names.push_back(r->name);
  return names;
}

// Plays the story up to running workers of `round` and returns the policy there.
inline void runRound(Policy& p, const RoundInfo& round) {
  REQUIRE(has<action::Join>(p.handle(event::Start{})));
  auto joined = p.handle(event::Joined{round});
  REQUIRE(has<action::GetWorkerStore>(joined));
  CHECK(recorded(joined) == std::vector<std::string>{"rendezvous_done"});
  auto started = p.handle(event::WorkerStoreReady{WorkerStore{"10.0.0.1", 29400}});
  const auto start = only<action::StartWorkers>(started);
  CHECK(start.round.round == round.round);
  CHECK(start.store.addr == "10.0.0.1");
  CHECK(start.store.port == 29400);
  CHECK(has<action::QueryState>(started));
  REQUIRE(p.state() == State::kRunning);
  CHECK(p.handle(event::StateRead{stateOf(round.round)}).empty());
}

}  // namespace dtrun::agent::testing
