// A buffer on loan, and where it is: the one lease type of every lender (the buffer pool, the
// node's slots, the zero-copy blocks). The lease gives itself back when reset or destroyed; what
// a lender keeps about each loan (a pool's use, a slot's index, a block's release count) travels
// in the lease as its ticket, so every lender hands out the same type and a transport learns
// where the bytes are from the lease itself (Located), not from its address.
#pragma once

#include <cstddef>
#include <cstdint>

#include "memory/located.hpp"
#include "runtime/sealed_region.hpp"

namespace fsdp {

class Lease;

class Lender {
 protected:
  ~Lender() = default;
  // Local; called once per loan, from Lease::reset.
  virtual void take_back(Lease& lease) noexcept = 0;
  // Fills `lease` (empty) with a loan of `bytes` (`capacity` taken) at `at`.
  void lend(Lease& lease, Located at, std::size_t bytes, std::size_t capacity, uintptr_t ticket);
  static uintptr_t ticket(const Lease& lease);
  // Debug mode (node-shared memory): the loan read-only in this process and checksummed, until
  // unsealed (at the latest when it is given back).
  static void seal(Lease& lease);
  static void unseal(Lease& lease);
  friend class Lease;
};

class Lease {
 public:
  Lease() = default;
  Lease(Lease&& o) noexcept { *this = static_cast<Lease&&>(o); }
  Lease& operator=(Lease&& o) noexcept {
    if (this != &o) {
      reset();
      lender_ = o.lender_;
      at_ = o.at_;
      bytes_ = o.bytes_;
      capacity_ = o.capacity_;
      ticket_ = o.ticket_;
      seal_ = o.seal_;
      o.seal_ = SealedRegion();
      o.lender_ = nullptr;
      o.at_ = Located();
      o.bytes_ = o.capacity_ = 0;
    }
    return *this;
  }
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  ~Lease() { reset(); }

  void* data() const { return at_.data; }
  const Located& located() const { return at_; }
  std::size_t bytes() const { return bytes_; }        // as asked for
  std::size_t capacity() const { return capacity_; }  // as taken, >= bytes()
  explicit operator bool() const { return lender_ != nullptr; }
  // Debug mode: whether a sealed loan still holds what it held when sealed (a node peer wrote
  // into it while this rank held it); true when not sealed.
  bool intact() const { return seal_.intact(static_cast<const char*>(at_.data), bytes_); }
  // Gives the buffer back to its lender. Local.
  void reset() {
    if (!lender_) return;
    Lender* l = lender_;
    seal_.unseal(static_cast<char*>(at_.data), capacity_);
    l->take_back(*this);
    lender_ = nullptr;
    at_ = Located();
    bytes_ = capacity_ = 0;
    ticket_ = 0;
  }

 private:
  friend class Lender;
  Lender* lender_ = nullptr;
  Located at_;
  std::size_t bytes_ = 0, capacity_ = 0;
  uintptr_t ticket_ = 0;
  SealedRegion seal_;
};

inline void Lender::lend(Lease& lease, Located at, std::size_t bytes, std::size_t capacity,
                         uintptr_t ticket) {
  lease.reset();
  lease.lender_ = this;
  lease.at_ = at;
  lease.bytes_ = bytes;
  lease.capacity_ = capacity;
  lease.ticket_ = ticket;
}

inline uintptr_t Lender::ticket(const Lease& lease) {
  return lease.ticket_;
}

inline void Lender::seal(Lease& lease) {
  lease.seal_.seal(static_cast<char*>(lease.at_.data), lease.capacity_, lease.bytes_);
}

inline void Lender::unseal(Lease& lease) {
  lease.seal_.unseal(static_cast<char*>(lease.at_.data), lease.capacity_);
}

}  // namespace fsdp
