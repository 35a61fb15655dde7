#include "transport/shm/node_slots.hpp"

#include <mpi.h>

#include <string>

#include "base/error.hpp"

namespace fsdp::shm {

NodeSlots::NodeSlots(NodeTeam& team, bool protect, Fallback& fallback)
    : team_(team), protect_(protect), fallback_(fallback) {}

NodeSlots::~NodeSlots() {
  const bool abandon = team_.aborted();
  for (Slot& s : slots_)  // in index order on every team rank: MPI_Win_free is collective
    if (s.window && abandon) s.window->abandon();
  slots_.clear();
}

int NodeSlots::create(std::size_t bytes) {
  std::size_t index = 0;
  while (index < slots_.size() && slots_[index].window) ++index;
  if (index >= static_cast<std::size_t>(kMaxSlots))
    fail(Errc::OutOfMemory, "node shared memory: more than " + std::to_string(kMaxSlots) +
                                " unsharded units held at once on one node");
  Slot s;
  s.window = std::make_unique<SharedWindow>(team_.comm(), team_.rank() == 0 ? bytes : 0);
  s.capacity = bytes;
  allocation_calls_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mutex_);
  if (index == slots_.size())
    slots_.push_back(std::move(s));
  else
    slots_[index] = std::move(s);
  return static_cast<int>(index);
}

void NodeSlots::acquire(std::size_t bytes, Lease& lease) {
  team_.mailbox(team_.rank()).held_slots = held_.load(std::memory_order_acquire);
  team_.barrier();
  uint64_t held = 0;  // by any team rank; read before the gather's barrier, rewritten after it
  for (int r = 0; r < team_.size(); ++r) held |= team_.mailbox(r).held_slots;
  int index = -1;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    if (!s.window || s.capacity < bytes || (held >> i & 1u)) continue;
    if (index < 0 || s.capacity < slots_[static_cast<std::size_t>(index)].capacity)
      index = static_cast<int>(i);
  }
  if (index < 0) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (std::size_t i = 0; i < slots_.size(); ++i)
        if (slots_[i].window && !(held >> i & 1u)) slots_[i] = Slot();  // collective free
    }
    try {
      index = create(round_to_pages(bytes));  // throws on every team rank alike
    } catch (const Error& e) {
      fallback_.allow_or_rethrow(e);
      acquire_private(bytes, lease, e);
      return;
    }
  }
  const Slot& s = slots_[static_cast<std::size_t>(index)];
  Located at;
  at.data = s.data();
  at.where.kind = Where::Kind::NodeCopy;
  lend(lease, at, bytes, s.capacity, static_cast<uintptr_t>(index));
  held_.fetch_or(uint64_t{1} << index, std::memory_order_acq_rel);
}

void NodeSlots::acquire_private(std::size_t bytes, Lease& lease, const Error& why) {
  void* data = nullptr;
  try {
    data = private_memory_.allocate(bytes);
  } catch (const Error&) {  // OutOfMemory: this rank only, so agreed below
  }
  int ok = data != nullptr;
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, team_.comm());
  if (!ok) {
    if (data) private_memory_.deallocate(data, bytes);
    fail(Errc::OutOfMemory, std::string(why.what()) + "; and a private buffer of " +
                                std::to_string(bytes) +
                                " bytes could not be allocated on every rank either");
  }
  fallback_.warn_once(why, Fallback::Buffers::Unsharded);
  lend(lease, Located::private_memory(data), bytes, bytes, kPrivate);
}

void NodeSlots::seal(Lease& lease) {
  if (protect_ && ticket(lease) != kPrivate) Lender::seal(lease);
}

void NodeSlots::take_back(Lease& lease) noexcept {
  if (ticket(lease) == kPrivate) {
    private_memory_.deallocate(lease.data(), lease.capacity());
    return;
  }
  held_.fetch_and(~(uint64_t{1} << ticket(lease)), std::memory_order_acq_rel);
}

}  // namespace fsdp::shm
