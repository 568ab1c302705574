#include "agent/record_reader.h"

#include <boost/asio/post.hpp>

#include "common/error.h"

namespace dtrun::agent {

void RecordReader::read(Connect connect, Done done) {
  if (*cancelled_) return;
  if (thread_.joinable()) thread_.join();  // the agent asks once; a second one waits its turn
  thread_ = std::thread([this, connect = std::move(connect), done = std::move(done),
                         cancelled = cancelled_]() mutable {
    Result<rendezvous::JobRecord> r;
    try {
      r = Result<rendezvous::JobRecord>::success(rendezvous::readJobRecord(*connect()));
    } catch (...) {
      r = Result<rendezvous::JobRecord>::failure(std::current_exception());
    }
    boost::asio::post(io_, [cancelled, r = std::move(r), done = std::move(done)] {
      if (!*cancelled) done(r);
    });
  });
}

void RecordReader::fail(const std::string& why, Done done) {
  boost::asio::post(io_, [cancelled = cancelled_, why, done = std::move(done)] {
    if (!*cancelled) {
      done(Result<rendezvous::JobRecord>::failure(std::make_exception_ptr(ConnectionError(why))));
    }
  });
}

void RecordReader::cancel() {
  *cancelled_ = true;
  if (thread_.joinable()) thread_.join();
}

}  // namespace dtrun::agent
