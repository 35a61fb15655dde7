#include "transport/shm/resident_arena.hpp"

#include <algorithm>
#include <new>

namespace fsdp::shm {
namespace {

// Release counts per chunk: one page of them ahead of the blocks, so blocks stay page-aligned
// (debug mode seals them with mprotect).
std::size_t counts_per_chunk() {
  return page_bytes() / sizeof(std::atomic<uint32_t>);
}

}  // namespace

void ResidentArena::take_back(Lease& lease) noexcept {
  auto* count = reinterpret_cast<std::atomic<uint32_t>*>(ticket(lease));
  count->fetch_add(1, std::memory_order_release);  // read by the next acquire's collect
}

ResidentArena::~ResidentArena() {
  if (team_.aborted())
    for (Chunk& c : chunks_) c.window->abandon();
  chunks_.clear();  // in creation order on every team rank: MPI_Win_free is collective
}

void ResidentArena::acquire(std::size_t bytes, Lease& lease) {
  const std::size_t span = round_to_pages(std::max<std::size_t>(bytes, 1));
  team_.barrier();  // every rank's releases before this creation are in the counts
  collect();
  std::size_t chunk = 0, record = 0;
  while (chunk < chunks_.size() && !carve(chunks_[chunk], span, &record)) ++chunk;
  if (chunk == chunks_.size()) {
    add_chunk(span);  // the same decision on every team rank: the same counts and ranges
    carve(chunks_.back(), span, &record);
  }
  Chunk& c = chunks_[chunk];
  Located at;
  at.data = c.window->segment(0) + c.records[record].offset;
  at.where.kind = Where::Kind::NodeCopy;
  lend(lease, at, bytes, span, reinterpret_cast<uintptr_t>(&c.counts[record]));
  team_.barrier();  // every rank read the counts before any rank can release again
}

void ResidentArena::collect() {
  const auto team = static_cast<uint32_t>(team_.size());
  for (Chunk& c : chunks_)
    for (std::size_t i = 0; i < c.records.size(); ++i) {
      Record& r = c.records[i];
      if (!r.used || c.counts[i].load(std::memory_order_acquire) - r.base != team) continue;
      c.free.give(r.offset, r.span);
      r.used = false;
      r.base += team;  // the count is never reset: a rank may release the next block any time
    }
}

bool ResidentArena::carve(Chunk& c, std::size_t span, std::size_t* record) {
  std::size_t i = 0;
  while (i < c.records.size() && c.records[i].used) ++i;
  if (i == counts_per_chunk()) return false;
  const std::optional<std::size_t> offset = c.free.take(span);
  if (!offset) return false;
  if (i == c.records.size()) c.records.emplace_back();
  Record& r = c.records[i];
  r.offset = *offset;
  r.span = span;
  r.used = true;
  *record = i;
  return true;
}

void ResidentArena::add_chunk(std::size_t span) {
  const std::size_t head = page_bytes(), bytes = std::max(kChunkBytes, head + span);
  Chunk c;
  c.window = std::make_unique<SharedWindow>(team_.comm(), team_.rank() == 0 ? bytes : 0);
  allocation_calls_.fetch_add(1, std::memory_order_relaxed);
  c.counts = reinterpret_cast<std::atomic<uint32_t>*>(c.window->segment(0));
  if (team_.rank() == 0)  // the others touch the counts only after acquire's second barrier
    for (std::size_t i = 0; i < counts_per_chunk(); ++i)
      new (&c.counts[i]) std::atomic<uint32_t>(0);
  c.free.give(head, bytes - head);
  chunks_.push_back(std::move(c));
}

void ResidentArena::seal(Lease& lease) {
  if (protect_) Lender::seal(lease);
}

}  // namespace fsdp::shm
