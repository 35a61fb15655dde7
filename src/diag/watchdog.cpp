#include "diag/watchdog.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace fsdp {

Watchdog::Watchdog(const CallLog& log, double timeout_s, bool abort_job, MPI_Comm comm, int rank,
                   std::function<void(const std::string&)> interrupt)
    : log_(log),
      timeout_s_(timeout_s),
      abort_job_(abort_job),
      comm_(comm),
      rank_(rank),
      interrupt_(std::move(interrupt)),
      thread_([this] { run(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Watchdog::abort_job(const std::string& why) {
  std::fprintf(stderr, "libfsdp rank %d: watchdog: %s: aborting the job (MPI_Abort)\n", rank_,
               why.c_str());
  std::fflush(stderr);
  // MPI_Abort itself can block behind the thread that is stuck inside MPI (MPICH at
  // MPI_THREAD_MULTIPLE was seen printing its abort message and then spinning forever): it runs
  // on a thread of its own, and if the process still lives after kAbortWait this rank exits, which
  // the launcher (Hydra, srun) reports as a failed process and ends the job for.
  constexpr auto kAbortWait = std::chrono::seconds(5);
  const MPI_Comm comm = comm_;
  std::thread([comm] { MPI_Abort(comm, 3); }).detach();
  std::this_thread::sleep_for(kAbortWait);
  std::fprintf(stderr,
               "libfsdp rank %d: watchdog: MPI_Abort did not end the job within %lld s: exiting "
               "this process (status 3)\n",
               rank_, static_cast<long long>(kAbortWait.count()));
  std::fflush(stderr);
  std::_Exit(3);
}

void Watchdog::run() {
  using namespace std::chrono;
  // Checks a few times per timeout, at most every 0.5 s and at least every 10 ms.
  const duration<double> period(std::clamp(timeout_s_ / 8, 0.01, 0.5));
  const duration<double> timeout(timeout_s_), grace(std::min(timeout_s_, 60.0));
  std::unique_lock<std::mutex> lock(mutex_);
  uint64_t reported = 0;  // the call already reported
  steady_clock::time_point reported_at;
  while (!cv_.wait_for(lock, period, [&] { return stopping_; })) {
    if (reported) {
      if (!log_.in_progress(reported)) {
        reported = 0;  // it ended after all (an interrupted wait returned its error)
      } else if (steady_clock::now() - reported_at >= grace) {
        abort_job("call #" + std::to_string(reported) +
                  " is still blocked after the grace period, inside MPI or NCCL, which cannot "
                  "be interrupted");
      }
      continue;
    }
    const std::optional<CallLog::Overdue> late = log_.overdue(timeout);
    if (!late) continue;
    const std::string report = "call #" + std::to_string(late->seq) + " " + late->what +
                               " has not completed after " + std::to_string(late->seconds) +
                               " s (timeout " + std::to_string(timeout_s_) +
                               " s); the peers that have not arrived are named only in debug mode "
                               "(FSDP_DEBUG_COLLECTIVES=1); this rank's last calls:\n" +
                               log_.recent();
    std::fprintf(stderr, "libfsdp rank %d: watchdog: %s", rank_, report.c_str());
    std::fflush(stderr);
    if (abort_job_) abort_job("timeout");
    reported = late->seq;
    reported_at = steady_clock::now();
    lock.unlock();
    interrupt_(report);
    lock.lock();
  }
}

}  // namespace fsdp
