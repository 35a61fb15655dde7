#include "transport/staged/staged_transport.hpp"

namespace fsdp {
namespace {

char* at(void* base, std::size_t bytes) {
  return static_cast<char*>(base) + bytes;
}

// A staging buffer of at least `bytes`. Growing frees the old one, which a copy queued by the
// previous operation (out of the buffer into device memory) may still read: the device finishes
// first.
void* staging(Scratch& s, std::size_t bytes, MemorySpace& device) {
  if (bytes > s.capacity()) device.synchronize();
  return s.get(bytes);
}

}  // namespace

StagedTransport::StagedTransport(MemorySpace& device, MemorySpace& staging,
                                 MemoryAccounting& accounting, Transport& host,
                                 bool direct_all_gather)
    : DelegatingTransport(host),
      device_(device),
      direct_all_gather_(direct_all_gather),
      stage_(staging, accounting),
      stage_out_(staging, accounting) {}

// Every operation first queues its copies into the staging buffers and synchronizes: that also
// waits for the previous operation's copies out of them (one stream, in order), so a staging
// buffer is never overwritten while a copy still reads it.
void StagedTransport::all_gather(const void* shard, const Located& full_at, std::size_t count,
                                 DType t, const Group& g) {
  void* full = full_at.data;
  const std::size_t block = count * dtype_size(t), own = block * static_cast<std::size_t>(g.rank);
  if (direct_all_gather_) {
    device_.synchronize();  // the shard (or this rank's block) is written by queued work
    delegate().all_gather(shard, full_at, count, t, g);
    return;
  }
  void* stage = staging(stage_, block * static_cast<std::size_t>(g.size), device_);
  device_.copy(at(stage, own), shard ? shard : at(full, own), block);
  device_.synchronize();
  delegate().all_gather(nullptr, Located::private_memory(stage), count, t, g);
  device_.copy(full, stage, block * static_cast<std::size_t>(g.size));
}

void StagedTransport::reduce_scatter(const Located& full_at, std::size_t block_count, DType t,
                                     const Group& g, const ReduceEpilogue& epilogue) {
  void* full = full_at.data;
  const std::size_t total = block_count * dtype_size(t) * static_cast<std::size_t>(g.size);
  const std::size_t out_bytes = block_count * dtype_size(epilogue.out_dtype);
  void* stage = staging(stage_, total, device_);
  void* out = staging(stage_out_, out_bytes, device_);
  device_.copy(stage, full, total);
  if (epilogue.store == Store::Accumulate) device_.copy(out, epilogue.out, out_bytes);
  device_.synchronize();
  delegate().reduce_scatter(Located::private_memory(stage), block_count, t, g,
                            {out, epilogue.out_dtype, epilogue.divisor, epilogue.store});
  device_.copy(epilogue.out, out, out_bytes);
}

void StagedTransport::all_reduce(void* buf, std::size_t count, DType t, const Group& g) {
  if (g.size == 1) return;
  const std::size_t bytes = count * dtype_size(t);
  void* stage = staging(stage_, bytes, device_);
  device_.copy(stage, buf, bytes);
  device_.synchronize();
  delegate().all_reduce(stage, count, t, g);
  device_.copy(buf, stage, bytes);
}

}  // namespace fsdp
