#include "transport/shm/shared_arena.hpp"

namespace fsdp::shm {
namespace {

constexpr std::size_t kAlign = 4096;  // page: buffers never share a page with another's
constexpr std::size_t kMinSegment = std::size_t(1) << 20;

std::size_t aligned(std::size_t bytes) {
  return (bytes + kAlign - 1) / kAlign * kAlign;
}

}  // namespace

SharedArena::~SharedArena() {
  if (team_.aborted())
    for (Segment& s : segments_) s.window->abandon();
  segments_.clear();  // in window order on every team rank: MPI_Win_free is collective
}

Located SharedArena::allocate(std::size_t bytes) {
  const std::size_t want = aligned(bytes == 0 ? 1 : bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  const int me = team_.rank();
  for (std::size_t i = 0; i < segments_.size(); ++i)
    if (std::optional<std::size_t> offset = segments_[i].free.take(want))
      return Located{segments_[i].window->segment(me) + *offset,
                     Where{Where::Kind::NodeArena, i, *offset}};
  refused_ += want;
  return Located();
}

bool SharedArena::deallocate(void* p, std::size_t bytes) {
  const char* c = static_cast<const char*>(p);
  std::lock_guard<std::mutex> lock(mutex_);
  const int me = team_.rank();
  for (Segment& s : segments_) {
    const char* base = s.window->segment(me);
    if (c < base || c >= base + s.window->segment_bytes(me)) continue;
    s.free.give(static_cast<std::size_t>(c - base), aligned(bytes == 0 ? 1 : bytes));
    return true;
  }
  return false;
}

Where SharedArena::locate(const void* p) const {
  const char* c = static_cast<const char*>(p);
  std::lock_guard<std::mutex> lock(mutex_);
  const int me = team_.rank();
  for (std::size_t i = 0; i < segments_.size(); ++i) {
    const char* base = segments_[i].window->segment(me);
    if (c >= base && c < base + segments_[i].window->segment_bytes(me))
      return Where{Where::Kind::NodeArena, i, static_cast<uint64_t>(c - base)};
  }
  return Where{};
}

const char* SharedArena::peer(int team_rank, uint64_t window, uint64_t offset) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return segments_[static_cast<std::size_t>(window)].window->segment(team_rank) + offset;
}

std::size_t SharedArena::wanted() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return refused_;
}

void SharedArena::grow(std::size_t bytes) {
  const std::size_t size = bytes ? std::max(aligned(bytes), kMinSegment) : 0;
  Segment s;
  try {
    s.window = std::make_unique<SharedWindow>(team_.comm(), size);
  } catch (...) {
    forget_refused();  // what was refused is not asked for again by the next growth
    throw;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (size) s.free.give(0, s.window->segment_bytes(team_.rank()));
  segments_.push_back(std::move(s));
  refused_ = 0;
}

void SharedArena::forget_refused() {
  std::lock_guard<std::mutex> lock(mutex_);
  refused_ = 0;
}

uint64_t SharedArena::windows() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return segments_.size();
}

void* ArenaMemorySpace::allocate_bytes(std::size_t bytes) {
  if (void* p = arena_.allocate(bytes).data) return p;
  return HostMemorySpace::allocate_bytes(bytes);
}

void ArenaMemorySpace::deallocate(void* p, std::size_t bytes) {
  if (!arena_.deallocate(p, bytes)) HostMemorySpace::deallocate(p, bytes);
}

bool ArenaMemorySpace::keep_in_pool(const void* p) const {
  return arena_.locate(p).kind == Where::Kind::NodeArena;
}

}  // namespace fsdp::shm
