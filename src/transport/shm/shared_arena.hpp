// This rank's full-gradient buffers for the shared-memory transport: carved from segments of
// shared windows, so that at a reduce every team rank reads its own block straight out of every
// other rank's buffer.
//
// Windows are created collectively, but buffers are requested locally (fsdp_grad_data), so the
// arena grows only inside a reduce: a request that does not fit is served from private memory
// (and remembered), the reduce that meets such a buffer copies it into the arena after growing
// it by what was missed, and the pool does not keep private buffers (keep_in_pool), so the next
// request lands in the arena. In a steady training loop every gradient is in the arena and a
// reduce copies nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "memory/host/host_memory_space.hpp"
#include "memory/located.hpp"
#include "transport/shm/free_ranges.hpp"
#include "transport/shm/node_team.hpp"
#include "transport/shm/shared_window.hpp"

namespace fsdp::shm {

class SharedArena {
 public:
  explicit SharedArena(NodeTeam& team) : team_(team) {}
  ~SharedArena();
  SharedArena(const SharedArena&) = delete;
  SharedArena& operator=(const SharedArena&) = delete;

  // Local and thread-safe. No data when no segment has room (the request is remembered).
  Located allocate(std::size_t bytes);
  // false when `p` is not from the arena.
  bool deallocate(void* p, std::size_t bytes);
  // Where `p` is, for team peers (Where::Kind::NodeArena); private when not in the arena.
  Where locate(const void* p) const;
  // Address of a peer's operand it announced as (window, offset).
  const char* peer(int team_rank, uint64_t window, uint64_t offset) const;
  // Growth this rank asks for at the next reduce: what was refused since the last growth.
  std::size_t wanted() const;
  // Collective over the team: every rank adds a segment of its own `bytes` (0 allowed).
  void grow(std::size_t bytes);  // (throws as SharedWindow, on every team rank; refusals forgotten)
  // Forgets the refused requests without growing (the caller went another way). Local.
  void forget_refused();
  uint64_t windows() const;

 private:
  struct Segment {
    std::unique_ptr<SharedWindow> window;
    FreeRanges free;
  };
  NodeTeam& team_;
  mutable std::mutex mutex_;
  std::vector<Segment> segments_;  // by window index, identical on every team rank
  std::size_t refused_ = 0;
};

// Host memory whose allocations come from the arena when it has room.
class ArenaMemorySpace final : public HostMemorySpace {
 public:
  explicit ArenaMemorySpace(SharedArena& arena) : arena_(arena) {}
  const char* name() const override { return "host (node-shared)"; }
  void deallocate(void* p, std::size_t bytes) override;
  bool keep_in_pool(const void* p) const override;
  Where where(const void* p) const override { return arena_.locate(p); }

 protected:
  void* allocate_bytes(std::size_t bytes) override;

 private:
  SharedArena& arena_;
};

}  // namespace fsdp::shm
