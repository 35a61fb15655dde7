// The timeline: with FSDP_TRACE=<dir>, each rank writes <dir>/fsdp-trace-rank<R>.json at
// fsdp_finalize, a Chrome trace (Perfetto, chrome://tracing) of the library's spans: unshard,
// all_gather, all_gather_node (hpZ: over the shard group's ranks on this node), wait, reshard,
// reduce, reduce_scatter, clip_grad_norm, optimizer_step, unscale, prefetch_unused,
// prefetch_skipped_limit, each with its unit's name and bytes; and a checkpoint load's phases
// (checkpoint_load_prepare, _catalog, _match, _verify, _place, _apply) with the file's path. Thread
// 0 is the caller, thread 1 the progress thread. Recording costs one clock read and one append per
// span; nothing when FSDP_TRACE is unset.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace fsdp {

class Trace {
 public:
  // Reads FSDP_TRACE; `rank` names the file.
  explicit Trace(int rank);
  ~Trace();  // writes the file (errors go to stderr: there is no caller to tell)
  bool enabled() const { return enabled_; }
  int64_t now_us() const;
  void record(const char* name, const std::string& unit, std::size_t bytes, int64_t start_us,
              int64_t end_us, int thread);
  const std::string& path() const { return path_; }

 private:
  struct Event {
    const char* name;
    std::string unit;
    std::size_t bytes;
    int64_t start_us, dur_us;
    int thread;
  };
  bool enabled_ = false;
  int rank_ = 0;
  std::string path_;
  std::chrono::steady_clock::time_point origin_;
  std::mutex mutex_;
  std::vector<Event> events_;
};

// A span from construction to destruction.
class TraceSpan {
 public:
  TraceSpan(Trace& t, const char* name, const std::string& unit, std::size_t bytes, int thread = 0)
      : trace_(t), name_(name), bytes_(bytes), thread_(thread) {
    if (!t.enabled()) return;
    unit_ = unit;
    start_ = t.now_us();
  }
  ~TraceSpan() {
    if (trace_.enabled()) trace_.record(name_, unit_, bytes_, start_, trace_.now_us(), thread_);
  }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  Trace& trace_;
  const char* name_;
  std::string unit_;
  std::size_t bytes_;
  int thread_;
  int64_t start_ = 0;
};

}  // namespace fsdp
