// The watchdog: a thread per context that notices a collective call or a wait of this rank that
// has not completed within the timeout (fsdp_config_t.timeout_s, FSDP_TIMEOUT), and reports it on
// standard error: which call, which unit, for how long, and this rank's last calls. Which peers
// have not arrived is known only in debug mode, where the pre-call exchange reports it itself.
//
// Then, as configured (fsdp_config_t.on_timeout, FSDP_ON_TIMEOUT):
// - abort: MPI_Abort on the context's communicator at once;
// - error: the context is interrupted: waits the library controls (node shared-memory barriers,
//   the debug exchange) return FSDP_ERR_TIMEOUT and the context takes only fsdp_finalize. A
//   thread blocked inside an MPI (or NCCL) call cannot be interrupted through MPI's interface;
//   if the call is still stuck after a grace period (the timeout again, at most 60 s), the job is
//   aborted: never a silent hang.
#pragma once

#include <mpi.h>

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "diag/call_log.hpp"

namespace fsdp {

class Watchdog {
 public:
  // `interrupt` is called on the watchdog's thread with the report (error mode).
  Watchdog(const CallLog& log, double timeout_s, bool abort_job, MPI_Comm comm, int rank,
           std::function<void(const std::string&)> interrupt);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  void run();
  [[noreturn]] void abort_job(const std::string& why);

  const CallLog& log_;
  const double timeout_s_;
  const bool abort_job_;
  const MPI_Comm comm_;
  const int rank_;
  std::function<void(const std::string&)> interrupt_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace fsdp
