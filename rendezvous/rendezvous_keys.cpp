#include "rendezvous/rendezvous_keys.h"

#include "common/decimal.h"

namespace dtrun::rendezvous::keys {
namespace {

bool consume(std::string_view& s, std::string_view prefix) {
  if (s.substr(0, prefix.size()) != prefix) return false;
  s.remove_prefix(prefix.size());
  return true;
}

std::optional<std::int64_t> nonNegative(std::string_view text) {
  auto n = parseDecimal(text);
  if (!n || *n < 0 || text.front() == '-') return std::nullopt;
  return n;
}

}  // namespace

std::string jobPrefix(std::string_view runId) {
  std::string p = "dtrun/";
  p += runId;
  return p;
}

std::string roundKey(std::int64_t round, std::string_view name) {
  // Built by appending: GCC 12 at -O3 reports a false -Wrestrict for "r" + to_string(...).
  std::string key = "r";
  key += std::to_string(round);
  key += '/';
  key += name;
  return key;
}

std::string nodeKey(std::int64_t round, int groupRank) {
  return roundKey(round, "node/" + std::to_string(groupRank));
}

std::string rankKey(std::int64_t round, int groupRank) {
  return roundKey(round, "rank/" + std::to_string(groupRank));
}

std::string aliveKey(std::int64_t round, std::string_view member) {
  return roundKey(round, "alive/" + std::string(member));
}

std::string goneMarkKey(std::int64_t round, std::string_view member) {
  return roundKey(round, "gone_mark/" + std::string(member));
}

std::string memberKey(std::string_view member) {
  std::string k(kMembersDir);
  k += member;
  return k;
}

std::string agentStatusKey(std::string_view member) {
  std::string k(kAgentDir);
  k += member;
  k += "/status";
  return k;
}

std::string agentGoneKey(std::string_view member) {
  std::string k(kAgentDir);
  k += member;
  k += "/gone";
  return k;
}

std::optional<ParsedKey> parseKey(std::string_view key) {
  ParsedKey k;
  if (key == kRound || key == kEpoch || key == kRestarts || key == kFinal || key == kSucceeded) {
    k.kind = ParsedKey::Kind::kJob;
    k.name = std::string(key);
    return k;
  }
  std::string_view rest = key;
  if (consume(rest, kMembersDir)) {
    if (rest.empty()) return std::nullopt;
    k.kind = ParsedKey::Kind::kMember;
    k.member = std::string(rest);
    return k;
  }
  if (consume(rest, kAgentDir)) {
    // The member id holds ':' but never '/': the last '/' ends it.
    const auto slash = rest.rfind('/');
    if (slash == std::string_view::npos || slash == 0) return std::nullopt;
    const std::string_view what = rest.substr(slash + 1);
    if (what != "status" && what != "gone") return std::nullopt;
    k.kind = ParsedKey::Kind::kAgent;
    k.member = std::string(rest.substr(0, slash));
    k.name = std::string(what);
    return k;
  }
  if (!consume(rest, "r")) return std::nullopt;
  const auto slash = rest.find('/');
  if (slash == std::string_view::npos || slash == 0) return std::nullopt;
  const auto round = nonNegative(rest.substr(0, slash));
  if (!round) return std::nullopt;
  k.kind = ParsedKey::Kind::kRound;
  k.round = *round;
  rest.remove_prefix(slash + 1);
  const auto sub = rest.find('/');
  if (sub == std::string_view::npos) {
    if (rest.empty()) return std::nullopt;
    // etcd's counter increments ("K\x01<writer>-<n>") are not keys of this shape.
    for (char c : rest) {
      if (static_cast<unsigned char>(c) < 0x20) return std::nullopt;
    }
    k.name = std::string(rest);
    return k;
  }
  k.name = std::string(rest.substr(0, sub));
  const std::string_view arg = rest.substr(sub + 1);
  if (arg.empty()) return std::nullopt;
  if (k.name == "node" || k.name == "rank") {
    const auto index = nonNegative(arg);
    if (!index || *index > 1 << 30) return std::nullopt;
    k.index = static_cast<int>(*index);
    return k;
  }
  if (k.name == "alive" || k.name == "gone_mark") {
    k.member = std::string(arg);
    return k;
  }
  return std::nullopt;
}

std::string claimValue(AdvanceReason reason, std::string_view member) {
  std::string v = reason == AdvanceReason::kFailure ? "failure " : "membership ";
  v += member;
  return v;
}

std::optional<Claim> parseClaim(std::string_view value) {
  Claim c;
  if (consume(value, "failure ")) {
    c.reason = AdvanceReason::kFailure;
  } else if (consume(value, "membership ")) {
    c.reason = AdvanceReason::kMembership;
  } else {
    return std::nullopt;
  }
  c.member = std::string(value);
  return c;
}

std::string_view openedValue(AdvanceReason reason) {
  return reason == AdvanceReason::kFailure ? "failure" : "membership";
}

}  // namespace dtrun::rendezvous::keys
