#include "rendezvous/job_reader.h"

#include <chrono>

#include "common/decimal.h"
#include "rendezvous/rendezvous_keys.h"

namespace dtrun::rendezvous {
namespace {

using Kind = keys::ParsedKey::Kind;

std::int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool startsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

JobSnapshot readJob(TcpStore& store, const std::string& runId) {
  const std::string prefix = keys::jobPrefix(runId) + "/";
  std::vector<std::string> listed;
  for (auto& key : store.listKeys()) {
    if (startsWith(key, prefix)) listed.push_back(key.substr(prefix.size()));
  }
  if (listed.empty()) {
    if (store.options().token.empty()) {
      // A store with a token hides the job's keys from this client: ask for one of them, which
      // such a store refuses (closing the connection) and any other answers.
      try {
        store.check({prefix + keys::kRound});
      } catch (const ConnectionError&) {
        throw StoreAuthError("store " + store.address() +
                             " refuses this client: it has a token; give the job's token file "
                             "(--rdzv-conf token_file=FILE or DTRUN_RDZV_TOKEN_FILE)");
      }
    }
    throw NoSuchJobError("no job '" + runId + "' in the store at " + store.address() +
                         " (no key under " + prefix + ")");
  }
  JobSnapshot snap;
  const auto wanted = keysToRead(listed);
  std::vector<std::string> full;
  for (const auto& k : wanted) full.push_back(prefix + k);
  auto values = store.multiGetNow(full);
  for (std::size_t i = 0; i < wanted.size() && i < values.size(); ++i) {
    snap.values[wanted[i]] = std::move(values[i]);
  }
  // Each agent's membership connection holds a close action on its agent/<member>/gone key:
  // the key exists once that connection closed; while it is open the store says when it last
  // heard from it.
  std::vector<std::string> members, goneKeys;
  for (const auto& [key, value] : snap.values) {
    const auto k = keys::parseKey(key);
    if (!k || k->kind != Kind::kAgent) continue;
    if (k->name == "gone") {
      snap.disconnected[k->member] = parseDecimal(value).value_or(0) > 0;
    } else if (!snap.disconnected.count(k->member)) {
      snap.disconnected[k->member] = false;
    }
  }
  for (const auto& [member, gone] : snap.disconnected) {
    if (gone) continue;
    members.push_back(member);
    goneKeys.push_back(prefix + keys::agentGoneKey(member));
  }
  if (!goneKeys.empty()) {
    try {
      const auto heard = store.heard(goneKeys);
      for (std::size_t i = 0; i < members.size() && i < heard.size(); ++i) {
        snap.heard[members[i]] = heard[i];
      }
    } catch (const ConnectionError&) {
      // A store older than DTRUN_HEARD closes the connection: last heard stays unknown.
    }
  }
  snap.readAtMs = nowMs();
  return snap;
}

JobSnapshot readJob(etcd::EtcdClient& client, const std::string& runId) {
  const std::string prefix = keys::jobPrefix(runId) + "/";
  const auto all = client.range(prefix, etcd::prefixEnd(prefix));
  if (all.kvs.empty()) {
    throw NoSuchJobError("no job '" + runId + "' in " + client.describe() + " (no key under " +
                         prefix + ")");
  }
  // Counters are a key plus its increments, K\x01<writer>-<n> (rendezvous/etcd/etcd_store.h).
  std::map<std::string, std::string> plain;
  std::map<std::string, std::int64_t> increments;
  std::map<std::string, std::int64_t> leases;  // live member -> its lease
  for (const auto& kv : all.kvs) {
    std::string key = kv.key.substr(prefix.size());
    if (const auto mark = key.find('\x01'); mark != std::string::npos) {
      increments[key.substr(0, mark)] += parseDecimal(kv.value).value_or(0);
      continue;
    }
    const auto k = keys::parseKey(key);
    if (k && k->kind == Kind::kMember) leases[k->member] = kv.lease;
    plain[std::move(key)] = kv.value;
  }
  for (const auto& [key, sum] : increments) {
    auto& v = plain[key];
    v = std::to_string(parseDecimal(v).value_or(0) + sum);
  }
  JobSnapshot snap;
  std::vector<std::string> listed;
  for (const auto& [key, value] : plain) listed.push_back(key);
  for (const auto& key : keysToRead(listed)) snap.values[key] = plain[key];
  for (const auto& [key, value] : snap.values) {
    const auto k = keys::parseKey(key);
    if (!k || k->kind != Kind::kAgent || k->name != "status") continue;
    const auto lease = leases.find(k->member);
    snap.disconnected[k->member] = lease == leases.end();
    if (lease == leases.end() || lease->second == 0) continue;
    // etcd counts whole seconds: the age of the lease's last renewal, to a second.
    if (const auto ttl = client.leaseTimeToLive(lease->second)) {
      snap.heard[k->member] =
          std::chrono::seconds(std::max<std::int64_t>(0, ttl->granted - ttl->left));
    } else {
      snap.disconnected[k->member] = true;
    }
  }
  snap.readAtMs = nowMs();
  return snap;
}

}  // namespace dtrun::rendezvous
