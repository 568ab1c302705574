// RecordReader: reads what a lost job left on record (rendezvous/job_record.h) for a JobLink,
// on a short-lived thread with a store connection of its own: the link's own connections may be
// the ones that failed (a thread stuck in a call to a silent store), and the agent's io thread
// must never wait. The result is posted to the io thread.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "agent/job_link.h"
#include "rendezvous/store.h"

namespace dtrun::agent {

class RecordReader {
 public:
  /// Opens the job's store (under its prefix), with deadlines that bound the read. Any thread.
  using Connect = std::function<std::shared_ptr<rendezvous::Store>()>;
  using Done = std::function<void(Result<rendezvous::JobRecord>)>;

  explicit RecordReader(boost::asio::io_context& io) : io_(io) {}
  /// cancel().
  ~RecordReader() { cancel(); }
  RecordReader(const RecordReader&) = delete;
  RecordReader& operator=(const RecordReader&) = delete;

  /// Io thread: reads on a thread of its own (a read under way is waited for first); `done`
  /// runs on the io thread unless cancel() came first.
  void read(Connect connect, Done done);
  /// Io thread: answers `done` (posted) with `why` as the error, reading nothing: the link
  /// already knows the store does not answer.
  void fail(const std::string& why, Done done);
  /// No `done` runs after this; joins the thread (bounded by the connection's deadlines).
  void cancel();

 private:
  boost::asio::io_context& io_;
  std::thread thread_;
  std::shared_ptr<std::atomic<bool>> cancelled_ = std::make_shared<std::atomic<bool>>(false);
};

}  // namespace dtrun::agent
