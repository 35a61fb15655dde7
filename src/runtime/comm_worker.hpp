// The context's progress thread: collectives started asynchronously (unshard_async, prefetch,
// reduce_grads_async) run here, in submission order, while the caller computes. Submission order
// is program order, the same on every rank, so collectives match across ranks whatever the
// timing. Calls that communicate synchronously first drain the queue (CommWorker::drain), so the
// two never interleave on a communicator.
//
// It needs MPI_THREAD_MULTIPLE (the caller may use MPI meanwhile). Without it, submit() runs the
// task at once on the caller's thread: still correct, without overlap.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace fsdp {

class CommWorker {
 public:
  // One submitted task's completion.
  class Task {
   public:
    bool done() const;
    // Blocks until the task ran; rethrows what it threw.
    void wait();

   private:
    friend class CommWorker;
    mutable std::mutex mutex_;
    std::condition_variable cv_;
    bool done_ = false;
    std::exception_ptr error_;
  };

  explicit CommWorker(bool threaded);
  ~CommWorker();  // drains, then joins
  CommWorker(const CommWorker&) = delete;
  CommWorker& operator=(const CommWorker&) = delete;

  bool threaded() const { return threaded_; }
  std::shared_ptr<Task> submit(std::function<void()> body);
  // For synchronous calls: waits for what is queued (their order comes first), then runs `body`
  // on the caller's thread, sparing the hand-off to the progress thread and back (several
  // microseconds per call). Returns the finished task.
  std::shared_ptr<Task> run_inline(const std::function<void()>& body);
  // Blocks until every submitted task ran (errors stay with their tasks).
  void drain();

 private:
  void run();
  static void finish(Task& t, std::exception_ptr error);
  static void execute(const std::function<void()>& body, Task& task);
  static std::shared_ptr<Task> run_here(const std::function<void()>& body);

  const bool threaded_;
  std::mutex mutex_;
  std::condition_variable work_cv_, idle_cv_;
  std::deque<std::pair<std::function<void()>, std::shared_ptr<Task>>> queue_;
  bool busy_ = false, stopping_ = false;
  std::thread thread_;
};

}  // namespace fsdp
