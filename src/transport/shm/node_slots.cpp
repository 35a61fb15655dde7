#include "transport/shm/node_slots.hpp"

#include <mpi.h>

#include <string>

#include "base/error.hpp"

namespace fsdp::shm {

void NodeSlots::Lease::reset() {
  if (owner_) owner_->release(*this);
  if (accounting_) accounting_->sub(MemoryKind::Unsharded, charged_);
  accounting_ = nullptr;
  owner_ = nullptr;
  data_ = nullptr;
  capacity_ = bytes_ = charged_ = 0;
  index_ = -1;
  claimed_ = false;
  seal_ = SealedRegion();
}

NodeSlots::NodeSlots(NodeTeam& team, MemoryAccounting& accounting, bool protect, bool fall_back)
    : team_(team), accounting_(accounting), protect_(protect), fall_back_(fall_back) {}

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
      // One node (the team is the whole group): every rank takes the same way out.
      if (!fall_back_ || e.code() != Errc::OutOfMemory || team_.cross().size != 1) throw;
      acquire_private(bytes, lease, e.what());
      return;
    }
  }
  const Slot& s = slots_[static_cast<std::size_t>(index)];
  lease.owner_ = this;
  lease.data_ = s.data();
  lease.capacity_ = s.capacity;
  lease.bytes_ = bytes;
  lease.index_ = index;
  held_.fetch_or(uint64_t{1} << index, std::memory_order_acq_rel);
}

void NodeSlots::claim(Lease& lease, std::size_t bytes) {
  // Each rank is charged its share, so memory stats summed over a node give the node's memory.
  lease.claimed_ = true;
  lease.charged_ = bytes / static_cast<std::size_t>(team_.size());
  lease.accounting_ = &accounting_;
  accounting_.add(MemoryKind::Unsharded, lease.charged_);
}

void NodeSlots::acquire_private(std::size_t bytes, Lease& lease, const std::string& why) {
  void* data = nullptr;
  try {
    data = private_memory_.allocate(bytes);
  } catch (const Error&) {  // OutOfMemory: this rank only, so agreed below
  }
  int ok = data != nullptr;
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, team_.comm());
  if (!ok) {
    if (data) private_memory_.deallocate(data, bytes);
    fail(Errc::OutOfMemory, why + "; and a private buffer of " + std::to_string(bytes) +
                                " bytes could not be allocated on every rank either");
  }
  warn_fallback_once(warned_, team_.rank() == 0, why,
                     "unsharded parameters that do not fit are all-gathered");
  lease.owner_ = this;
  lease.data_ = static_cast<char*>(data);
  lease.capacity_ = lease.bytes_ = bytes;
  lease.index_ = -1;
  // This rank holds the whole buffer, not a share of the node's copy.
  accounting_.add(MemoryKind::Unsharded, bytes - lease.charged_);
  lease.charged_ = bytes;
}

void NodeSlots::seal(Lease& lease) {
  if (protect_ && lease.index_ >= 0) lease.seal_.seal(lease.data_, lease.capacity_, lease.bytes_);
}

void NodeSlots::release(Lease& lease) {
  if (lease.index_ < 0) {  // a private buffer
    private_memory_.deallocate(lease.data_, lease.capacity_);
    return;
  }
  lease.seal_.unseal(lease.data_, lease.capacity_);
  held_.fetch_and(~(uint64_t{1} << lease.index_), std::memory_order_acq_rel);
}

bool NodeSlots::contains(const void* p) const {
  const char* c = static_cast<const char*>(p);
  std::lock_guard<std::mutex> lock(mutex_);
  for (const Slot& s : slots_)
    if (s.window && c >= s.data() && c < s.data() + s.capacity) return true;
  return false;
}

}  // namespace fsdp::shm
