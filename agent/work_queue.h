// WorkQueue: one thread that runs a JobLink's blocking work in order: the work thread of the
// rendezvous job (agent/rendezvous_job.h) of both backends that talk to a shared store
// (agent/c10d_job.h, agent/etcd_job.h), which delivers each result to the io thread itself.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace dtrun::agent {

class WorkQueue {
 public:
  WorkQueue() : thread_([this] { loop(); }) {}
  /// stop().
  ~WorkQueue() { stop(); }
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  /// Queues `job` as it is.
  void post(std::function<void()> job) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      jobs_.push_back(std::move(job));
    }
    cv_.notify_all();
  }
  /// Drops what is queued and takes nothing new; the job in progress may finish.
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

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts once the rest exists
};

}  // namespace dtrun::agent
