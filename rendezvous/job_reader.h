// Reading a job for `dtrun status`, without joining it or changing anything: a few batched
// requests whatever the job's size (docs/observe.md, "dtrun status").
//
//   dtrun's store: LIST_KEYS, one MULTI_GET of the keys describeJob() needs, one DTRUN_HEARD of
//                  the agents' membership keys (how long ago the store last heard from each).
//   etcd:          one range read of the job's prefix, then one lease time-to-live per live
//                  agent (etcd renews a lease on every keep-alive, so its age is the last heard).
#pragma once

#include <string>

#include "common/error.h"
#include "rendezvous/etcd/etcd_client.h"
#include "rendezvous/job_status.h"
#include "rendezvous/tcp_store.h"

namespace dtrun::rendezvous {

/// The store or etcd answers, but holds no key of that run id.
class NoSuchJobError : public Error {
 public:
  using Error::Error;
};

/// Reads the job `runId` from dtrun's store. Blocking (the client's timeouts). Throws
/// NoSuchJobError, StoreAuthError (this client's token was refused, or the store wants one and
/// it has none), ConnectionError.
JobSnapshot readJob(TcpStore& store, const std::string& runId);

/// Reads the job `runId` from etcd. Blocking. Throws NoSuchJobError, ConnectionError (no member
/// answered), EtcdError.
JobSnapshot readJob(etcd::EtcdClient& client, const std::string& runId);

}  // namespace dtrun::rendezvous
