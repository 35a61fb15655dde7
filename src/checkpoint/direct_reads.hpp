// The pieces a checkpoint load reads from the disk straight into their destination (a shard or an
// optimizer state buffer that exists already, in host memory, of the file's dtype) before they are
// verified, with the values they replace: the disk read is then the one copy of those bytes, as in
// a plain read, where reading into a scratch buffer and copying again after verification passes
// over each byte twice. restore() puts every replaced value back when the load fails, so nothing
// changes unless every rank verified (checkpoint_load.cpp). The kept values take at most a quarter
// of the memory free when the load starts; pieces past that are copied in the place phase.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace fsdp::ckpt {

// The pieces a load reads and checksums one at a time.
constexpr uint64_t kLoadPiece = uint64_t{1} << 20;

inline uint64_t load_piece_count(uint64_t bytes) {
  return (bytes + kLoadPiece - 1) / kLoadPiece;
}

class DirectReads {
 public:
  // `destination[i]`: where range i of the load goes, or nullptr where it cannot be read into
  // directly.
  explicit DirectReads(std::vector<char*> destination);
  DirectReads(const DirectReads&) = delete;
  DirectReads& operator=(const DirectReads&) = delete;

  // Where piece `piece` (n bytes) of range i (range_bytes long) may be read into, once what is
  // there is kept; nullptr where it may not (no destination, past the memory budget).
  char* claim(std::size_t i, uint64_t range_bytes, uint64_t piece, uint64_t n);
  // Whether piece `piece` of range i was claimed.
  bool direct(std::size_t i, uint64_t piece) const {
    const Kept& k = ranges_[i];
    return k.values && k.direct[piece];
  }
  // Puts back every claimed piece's kept values.
  void restore() noexcept;

 private:
  struct Kept {
    std::unique_ptr<char[]> values;  // the range's replaced bytes, at their offsets
    std::vector<bool> direct;        // which pieces were claimed
    uint64_t bytes = 0;
  };
  std::vector<char*> destination_;
  std::vector<Kept> ranges_;
  uint64_t budget_ = 0;
};

}  // namespace fsdp::ckpt
