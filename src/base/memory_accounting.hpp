// What the library holds for a context, by category, with each category's peak, the peak of the
// parameter memory (shards plus unsharded parameters: the quantity of FSDP's memory formula) and
// the peak of the total.
#pragma once

#include <cstddef>
#include <mutex>

namespace fsdp {

enum class MemoryKind {
  Shard,           // parameter shards (the float32 master when mixed precision is on)
  GradShard,       // gradient shards
  Unsharded,       // unsharded parameter buffers on loan
  FullGrad,        // full gradient buffers on loan (and their reduce-dtype copies)
  PoolCached,      // released buffers kept for reuse
  OptimizerState,  // sharded optimizer state
  Scratch,         // communication scratch
  Secondary,       // hpZ's secondary partitions (core/secondary_partition.hpp) on loan
  Init,            // initialization's full-size unit (inside unit creation): in no other peak
  Count
};
constexpr int kMemoryKinds = static_cast<int>(MemoryKind::Count);

// Thread-safe: the progress thread grows communication scratch while the caller reads stats.
class MemoryAccounting {
 public:
  void add(MemoryKind k, std::size_t n) {
    std::lock_guard<std::mutex> lock(mutex_);
    const int i = static_cast<int>(k);
    bytes_[i] += n;
    if (bytes_[i] > peaks_[i]) peaks_[i] = bytes_[i];
    const std::size_t total = training_total();
    if (total > peak_) peak_ = total;
    const std::size_t params = parameters();
    if (params > peak_params_) peak_params_ = params;
  }
  void sub(MemoryKind k, std::size_t n) {
    std::lock_guard<std::mutex> lock(mutex_);
    bytes_[static_cast<int>(k)] -= n;
  }
  std::size_t bytes(MemoryKind k) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return bytes_[static_cast<int>(k)];
  }
  std::size_t peak(MemoryKind k) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return peaks_[static_cast<int>(k)];
  }
  std::size_t peak() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return peak_;
  }
  std::size_t peak_parameters() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return peak_params_;
  }
  // Peaks restart from the current values (fsdp_reset_peak_memory).
  void reset_peaks() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int i = 0; i < kMemoryKinds; ++i) peaks_[i] = bytes_[i];
    peak_ = training_total();
    peak_params_ = parameters();
  }

 private:
  std::size_t training_total() const {
    std::size_t total = 0;
    for (int i = 0; i < kMemoryKinds; ++i)
      if (static_cast<MemoryKind>(i) != MemoryKind::Init) total += bytes_[i];
    return total;
  }
  std::size_t parameters() const {
    return bytes_[static_cast<int>(MemoryKind::Shard)] +
           bytes_[static_cast<int>(MemoryKind::Unsharded)];
  }

  mutable std::mutex mutex_;
  std::size_t bytes_[kMemoryKinds] = {};
  std::size_t peaks_[kMemoryKinds] = {};
  std::size_t peak_ = 0;
  std::size_t peak_params_ = 0;
};

}  // namespace fsdp
