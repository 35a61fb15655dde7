// This rank's recent collective calls and waits: what the watchdog reports when one does not
// complete, and what a debug-mode mismatch names. Thread-safe: the caller's thread writes, the
// watchdog thread reads.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>

#include "base/error.hpp"

namespace fsdp {

// The unit id of an operation on no unit (a checkpoint save), in calls and requests alike.
constexpr uint64_t kNoUnit = ~uint64_t{0};

// One call as the ranks compare it (debug mode) and as reports name it.
struct CallInfo {
  const char* call = "";       // the C entry point, e.g. "fsdp_unshard"
  uint64_t unit_id = kNoUnit;  // the unit it works on, if any
  std::string unit;            // the unit's label, for messages
  uint64_t bytes = 0;          // bytes the collective moves (the unit's unsharded bytes...)
  int dtype = -1;              // element type it moves; -1: none
  uint64_t fingerprint = 0;    // of its other arguments (a checkpoint's path...)
  bool collective = true;      // false: a local wait, logged but not compared across ranks
  // What the call does to the update phase fsdp_step_boundary opens (core/step_boundary.hpp).
  enum class Phase : unsigned char {
    Ends,       // a call after the update (an unshard, a collective of the caller's...)
    Continues,  // a call of the update that waits for nobody before writing (an optimizer step)
    Restarts,   // a collective of the update (a norm, the grad scaler): the phase restarts
  } phase = Phase::Ends;
  // Debug mode: why this rank cannot make the call (its state, found before communicating).
  // Sent with the call, so the other ranks fail too instead of waiting in the collective.
  std::optional<Error> refusal;

  std::string text() const;  // "fsdp_unshard(unit 3 'layer3', 4096 bytes float32)"
};

class CallLog {
 public:
  static constexpr std::size_t kKept = 16;  // finished calls kept for reports

  // The call starts now: returns its sequence number (1, 2, ...; the same on every rank as long
  // as the ranks make the same calls).
  uint64_t begin(const CallInfo& call);
  void end(uint64_t seq);
  // The oldest call in progress for at least `age`, as "<text>" with its sequence number.
  struct Overdue {
    uint64_t seq = 0;
    std::string what;
    double seconds = 0.0;
  };
  std::optional<Overdue> overdue(std::chrono::duration<double> age) const;
  bool in_progress(uint64_t seq) const;
  // The last calls, oldest first, one per line: "#12 fsdp_reduce_grads(unit 2 ...) done in 3 ms".
  std::string recent() const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Entry {
    uint64_t seq;
    CallInfo call;
    Clock::time_point start, stop;
    bool done;
  };
  mutable std::mutex mutex_;
  std::deque<Entry> entries_;  // the calls in progress and the last kKept finished ones
  uint64_t next_ = 0;
};

// Logs one call for its scope.
class CallScope {
 public:
  CallScope(CallLog& log, const CallInfo& call) : log_(log), seq_(log.begin(call)) {}
  ~CallScope() { log_.end(seq_); }
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;
  uint64_t seq() const { return seq_; }

 private:
  CallLog& log_;
  uint64_t seq_;
};

}  // namespace fsdp
