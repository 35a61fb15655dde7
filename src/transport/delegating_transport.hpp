// A transport that carries only some operations itself and hands the rest to a delegate (libCEED's
// CeedSetDelegate): the shared-memory transport (the shard group's node-local part; MPI for every
// other group, the inter-node steps, and what node shared memory cannot hold) and the staged
// transport (device memory through host staging; MPI moves the staged bytes).
//
// The delegate is the transport of the table entry the delegating entry names
// (placement/transport_table.hpp, "delegate"); the table builds it and it outlives this transport.
// Every operation here goes to the delegate unchanged: a subclass overrides the ones it carries and
// calls delegate() for the cases it does not. abort() and interrupt_for_timeout() reach the
// delegate too, so an operation stuck in it returns; a subclass that overrides them calls these.
#pragma once

#include "transport/transport.hpp"

namespace fsdp {

class DelegatingTransport : public Transport {
 public:
  explicit DelegatingTransport(Transport& delegate) : delegate_(delegate) {}

  void all_gather(const void* shard, const Located& full, std::size_t count, DType t,
                  const Group& g) override {
    delegate_.all_gather(shard, full, count, t, g);
  }
  bool places_pieces(const Group& g) override { return delegate_.places_pieces(g); }
  void all_gather_pieces(const void* shard, const Located& full, std::size_t count, DType t,
                         const Group& g, const std::vector<BlockPiece>& pieces) override {
    delegate_.all_gather_pieces(shard, full, count, t, g, pieces);
  }
  void reduce_scatter(const Located& full, std::size_t block_count, DType t, const Group& g,
                      const ReduceEpilogue& epilogue) override {
    delegate_.reduce_scatter(full, block_count, t, g, epilogue);
  }
  void all_reduce(void* buf, std::size_t count, DType t, const Group& g) override {
    delegate_.all_reduce(buf, count, t, g);
  }
  void abort() override { delegate_.abort(); }
  void interrupt_for_timeout() override { delegate_.interrupt_for_timeout(); }

 protected:
  Transport& delegate() { return delegate_; }

 private:
  Transport& delegate_;
};

}  // namespace fsdp
