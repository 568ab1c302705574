// WorkQueue: one thread that runs a JobLink's blocking work in order and posts each result back
// to the agent's io thread (agent/job_link.h: every call returns at once, `done` runs later on
// the io thread). Used by both backends that talk to a shared store (agent/c10d_job.h,
// agent/etcd_job.h).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "agent/job_link.h"

namespace dtrun::agent {

class WorkQueue {
 public:
  explicit WorkQueue(boost::asio::io_context& io) : io_(io), thread_([this] { loop(); }) {}
  /// stop().
  ~WorkQueue() { stop(); }
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  /// Queues `work` (returns T or throws); `done` gets its Result on the io thread, unless the
  /// queue stopped meanwhile.
  template <typename T, typename F>
  void run(F work, std::function<void(Result<T>)> done) {
    post([this, work = std::move(work), done = std::move(done)]() mutable {
      Result<T> r;
      try {
        r.value = work();
      } catch (...) {
        r.error = std::current_exception();
      }
      if (stopping()) return;  // the agent is gone or going; nobody waits for this
      boost::asio::post(io_, [done = std::move(done), r = std::move(r)] { done(r); });
    });
  }
  /// Queues `job` as it is.
  void post(std::function<void()> job) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      jobs_.push_back(std::move(job));
    }
    cv_.notify_all();
  }
  /// Drops what is queued; the job in progress may finish, but its result is not posted.
  void cancel() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      jobs_.clear();
    }
    cv_.notify_all();
  }
  /// cancel(), then joins the thread once the job in progress returns (the caller interrupts
  /// whatever that job blocks on first).
  void stop() {
    cancel();
    if (thread_.joinable()) thread_.join();
  }
  bool stopping() {
    std::lock_guard lock(mutex_);
    return stopping_;
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
        if (stopping_) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }

  boost::asio::io_context& io_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts once the rest exists
};

}  // namespace dtrun::agent
