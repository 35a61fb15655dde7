#include "runtime/comm_worker.hpp"

namespace fsdp {

bool CommWorker::Task::done() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

void CommWorker::Task::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

void CommWorker::finish(Task& t, std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(t.mutex_);
    t.done_ = true;
    t.error_ = error;
  }
  t.cv_.notify_all();
}

CommWorker::CommWorker(bool threaded) : threaded_(threaded) {
  if (threaded_) thread_ = std::thread([this] { run(); });
}

CommWorker::~CommWorker() {
  if (!threaded_) return;
  drain();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

void CommWorker::execute(const std::function<void()>& body, Task& task) {
  std::exception_ptr error;
  try {
    body();
  } catch (...) {
    error = std::current_exception();
  }
  finish(task, error);
}

std::shared_ptr<CommWorker::Task> CommWorker::run_here(const std::function<void()>& body) {
  auto task = std::make_shared<Task>();
  execute(body, *task);
  return task;
}

std::shared_ptr<CommWorker::Task> CommWorker::run_inline(const std::function<void()>& body) {
  drain();
  return run_here(body);
}

std::shared_ptr<CommWorker::Task> CommWorker::submit(std::function<void()> body) {
  if (!threaded_) return run_here(body);
  auto task = std::make_shared<Task>();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.emplace_back(std::move(body), task);
  }
  work_cv_.notify_one();
  return task;
}

void CommWorker::drain() {
  if (!threaded_) return;
  std::unique_lock<std::mutex> lock(mutex_);
  idle_cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

void CommWorker::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    auto [body, task] = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    execute(body, *task);
    lock.lock();
    busy_ = false;
    if (queue_.empty()) idle_cv_.notify_all();
  }
}

}  // namespace fsdp
