#include "checkpoint/deferred_removal.hpp"

#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace fsdp::ckpt {
namespace {

class Remover {
 public:
  ~Remover() {  // at exit: what is queued still goes
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    work_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  void add(std::string path) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(path));
      if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    }
    work_.notify_all();
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      work_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and nothing left
      const std::string path = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      ::unlink(path.c_str());
      lock.lock();
    }
  }

  std::mutex mutex_;
  std::condition_variable work_;
  std::deque<std::string> queue_;
  bool stop_ = false;
  std::thread thread_;
};

Remover& remover() {
  static Remover r;
  return r;
}

}  // namespace

void remove_later(std::string path) {
  remover().add(std::move(path));
}

}  // namespace fsdp::ckpt
