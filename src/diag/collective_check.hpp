// Debug mode's check of every collective call (FSDP_DEBUG_COLLECTIVES=1 or
// fsdp_config_t.debug_collectives): before a collective runs, the ranks exchange what each is
// about to call (operation, unit, bytes, dtype, other arguments, sequence number) and every rank
// fails alike, naming what each rank called, when they differ. Where a rank never arrives, the
// exchange is where the others wait, so it also knows which ranks are missing when the timeout
// expires.
//
// The exchange is point to point (each rank posts a receive from and a send to every other rank)
// on a communicator of its own, polled: which peers have arrived stays known at every moment, and
// a wait can end on a timeout or an abort. O(ranks) small messages per rank and call: a debugging
// aid, off by default (bench_training measures its cost).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>

#include "base/group.hpp"
#include "diag/call_log.hpp"

namespace fsdp {

class CollectiveCheck {
 public:
  explicit CollectiveCheck(const Group& world);  // collective: duplicates the communicator
  ~CollectiveCheck();
  CollectiveCheck(const CollectiveCheck&) = delete;
  CollectiveCheck& operator=(const CollectiveCheck&) = delete;

  // Collective over the world group. Throws Errc::Mismatch on every rank when the ranks' calls
  // differ; Errc::Timeout when some rank has not arrived after `timeout_s` seconds (<= 0: no
  // limit), naming it; the error `stop()` returns (an abort) when it returns one while waiting.
  // After a timeout or a stop, the exchange is left unfinished and the check refuses further use.
  void check(const CallInfo& call, double timeout_s, const CallLog& log,
             const std::function<void()>& stop);

 private:
  Group world_;
  uint64_t checked_ = 0;
  bool broken_ = false;  // an exchange was abandoned
};

}  // namespace fsdp
