#include "transport/shm/shm_transport.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "base/mpi_check.hpp"
#include "base/mpi_datatypes.hpp"
#include "memory/host/host_kernels.hpp"

namespace fsdp::shm {
namespace {

// Elements per accumulation chunk: the accumulator stays in L1/L2 while the team's blocks stream.
constexpr std::size_t kChunkBytes = std::size_t(32) << 10;

}  // namespace

ShmTransport::ShmTransport(const Group& shard, int node_key, Transport& delegate,
                           MemoryAccounting& accounting, bool protect_slots, bool tried)
    : DelegatingTransport(delegate) {
  team_ = std::make_unique<NodeTeam>(shard, node_key);
  fallback_ = std::make_unique<Fallback>(*team_, tried);
  slots_ = std::make_unique<NodeSlots>(*team_, protect_slots, *fallback_);
  resident_ = std::make_unique<ResidentArena>(*team_, protect_slots);
  arena_ = std::make_unique<SharedArena>(*team_);
  arena_memory_ = std::make_unique<ArenaMemorySpace>(*arena_);
  sums_ = std::make_unique<Scratch>(scratch_memory_, accounting);
  chunk_ = std::make_unique<Scratch>(scratch_memory_, accounting);
}

ShmTransport::~ShmTransport() {
  chunk_.reset();
  sums_.reset();
  slots_.reset();
  resident_.reset();
  arena_memory_.reset();
  arena_.reset();
  fallback_.reset();
  team_.reset();
}

uint64_t ShmTransport::allocation_calls() const {
  return slots_->allocation_calls() + resident_->allocation_calls() + arena_->windows() +
         scratch_memory_.allocation_calls();
}

void ShmTransport::abort() {
  team_->abort(Errc::Aborted);
  DelegatingTransport::abort();
}

void ShmTransport::interrupt_for_timeout() {
  team_->abort(Errc::Timeout);
  DelegatingTransport::interrupt_for_timeout();
}

void ShmTransport::all_gather(const void* shard, const Located& full, std::size_t count, DType t,
                              const Group& g) {
  const bool node_only = !carries(g) && full.where.kind == Where::Kind::NodeCopy && is_team(g);
  if (!node_only && (!carries(g) || full.where.kind != Where::Kind::NodeCopy))
    return DelegatingTransport::all_gather(shard, full, count, t, g);
  const std::size_t block = count * dtype_size(t);
  char* out = static_cast<char*>(full.data);
  if (shard) std::memcpy(out + static_cast<std::size_t>(g.rank) * block, shard, block);
  team_->barrier();  // every block of this node is in place
  const Group& cross = team_->cross();
  if (node_only || cross.size == 1) return;
  // The blocks of this team index on the other nodes, at their group ranks' places.
  const MpiCount c(count, t);
  MPI_Datatype block_type = MPI_DATATYPE_NULL;
  mpi_check(MPI_Type_contiguous(c.n(), c.type(), &block_type), "MPI_Type_contiguous");
  MPI_Type_commit(&block_type);
  std::vector<int> counts(static_cast<std::size_t>(cross.size), 1);
  const int rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out, counts.data(),
                                team_->cross_group_ranks().data(), block_type, cross.comm);
  MPI_Type_free(&block_type);
  mpi_check(rc, "MPI_Allgatherv");
  team_->barrier();  // and every block from the other nodes
}

void ShmTransport::all_gather_pieces(const void* shard, const Located& full, std::size_t count,
                                     DType t, const Group& g,
                                     const std::vector<BlockPiece>& pieces) {
  if (!carries(g) || full.where.kind != Where::Kind::NodeCopy)
    return DelegatingTransport::all_gather_pieces(shard, full, count, t, g, pieces);
  const std::size_t es = dtype_size(t);
  char* out = static_cast<char*>(full.data);
  // The pieces of group rank r's block, found at `block`.
  auto place = [&](const char* block, int r) {
    const std::size_t base = static_cast<std::size_t>(r) * count;
    for_each_piece(
        pieces, count, r, r + 1,
        [&](std::size_t to, std::size_t from, std::size_t n) {
          std::memcpy(out + to * es, block + (from - base) * es, n * es);
        },
        [](std::size_t, std::size_t) {});
  };
  place(static_cast<const char*>(shard), g.rank);
  team_->barrier();  // every block of this node is in place
  const Group& cross = team_->cross();
  if (cross.size == 1) return;
  const MpiCount c(count, t);
  char* blocks = static_cast<char*>(chunk_->get(count * es * static_cast<std::size_t>(cross.size)));
  mpi_check(MPI_Allgather(shard, c.n(), c.type(), blocks, c.n(), c.type(), cross.comm),
            "MPI_Allgather");
  const std::vector<int>& ranks = team_->cross_group_ranks();
  for (int j = 0; j < cross.size; ++j)
    if (j != cross.rank) place(blocks + static_cast<std::size_t>(j) * count * es, ranks[j]);
  team_->barrier();  // and every block from the other nodes
}

bool ShmTransport::is_team(const Group& g) {
  if (g.comm != team_comm_seen_) {
    int result = MPI_UNEQUAL;
    mpi_check(MPI_Comm_compare(g.comm, team_->comm(), &result), "MPI_Comm_compare");
    team_comm_seen_ = g.comm;
    team_comm_is_team_ = result == MPI_IDENT || result == MPI_CONGRUENT;
  }
  return team_comm_is_team_;
}

void ShmTransport::team_sum(const std::vector<const char*>& x, std::size_t offset,
                            std::size_t count, DType t, const ReduceEpilogue& e) {
  const int n = team_->size(), r = team_->rank();
  auto at = [&](int k) { return x[static_cast<std::size_t>((r + k) % n)] + offset; };
  if (n == 1) {
    host::scaled(e.out, e.out_dtype, at(0), t, count, e.divisor, e.store);
    return;
  }
  if (n == 2) {  // the ring's only step: own block plus the partner's
    host::add_pair_scaled(e.out, e.out_dtype, at(0), at(1), t, count, e.divisor, e.store);
    return;
  }
  const std::size_t esize = dtype_size(t), out_size = dtype_size(e.out_dtype);
  const std::size_t piece = std::max<std::size_t>(1, kChunkBytes / esize);
  char* acc = static_cast<char*>(chunk_->get(std::min(piece, count) * esize));
  for (std::size_t done = 0; done < count; done += piece) {
    const std::size_t m = std::min(piece, count - done), skip = done * esize;
    // The ring: rank r+1's value, plus r+2's, ..., plus r-1's, and finally r's own.
    std::memcpy(acc, at(2) + skip, m * esize);
    host::add_into(acc, at(1) + skip, m, t);
    for (int k = 3; k < n; ++k) host::add_into(acc, at(k) + skip, m, t);
    host::add_pair_scaled(static_cast<char*>(e.out) + done * out_size, e.out_dtype, at(0) + skip,
                          acc, t, m, e.divisor, e.store);
  }
}

void ShmTransport::reduce_scatter(const Located& full, std::size_t block_count, DType t,
                                  const Group& g, const ReduceEpilogue& epilogue) {
  if (!carries(g)) return DelegatingTransport::reduce_scatter(full, block_count, t, g, epilogue);
  const std::size_t esize = dtype_size(t), block = block_count * esize;
  const std::size_t bytes = block * static_cast<std::size_t>(g.size);
  NodeTeam& team = *team_;
  Mailbox& mine = team.mailbox(team.rank());
  const bool shared = full.where.kind == Where::Kind::NodeArena;
  uint64_t window = full.where.window, offset = full.where.offset;
  void* staged = nullptr;
  auto stage = [&] {
    const Located copy = arena_->allocate(bytes);
    staged = copy.data;
    if (!staged) return;
    std::memcpy(staged, full.data, bytes);
    window = copy.where.window;
    offset = copy.where.offset;
  };
  try {
    if (!shared) stage();
    const std::size_t grow = arena_->wanted();
    mine.segment = window;
    mine.offset = offset;
    mine.grow_bytes = grow;
    team.barrier();
    bool growing = false;
    for (int j = 0; j < team.size(); ++j) growing |= team.mailbox(j).grow_bytes != 0;
    if (growing) {  // collective: some rank's gradient (or an earlier one) did not fit
      std::size_t most = 0;
      for (int j = 0; j < team.size(); ++j) most = std::max(most, team.mailbox(j).grow_bytes);
      bool fall_back = fallback_->allowed() && most >= mpi_from_bytes_;
      if (fall_back) {
        arena_->forget_refused();  // no new attempt: it failed at this size before
      } else {
        try {
          arena_->grow(grow);
        } catch (const Error& e) {
          fallback_->allow_or_rethrow(e);
          mpi_from_bytes_ = std::min(mpi_from_bytes_, most);
          fallback_->warn_once(e, Fallback::Buffers::Gradients);
          fall_back = true;
        }
      }
      if (fall_back) {
        team.barrier();  // every rank read the mailboxes before any posts again
        if (staged) arena_->deallocate(staged, bytes);
        staged = nullptr;
        return DelegatingTransport::reduce_scatter(full, block_count, t, g, epilogue);
      }
      if (!shared && !staged) {
        stage();  // fits now: the growth covers every refused request, this one included
        if (!staged) fail(Errc::OutOfMemory, "node-shared gradient arena: no room after growth");
      }
      mine.segment = window;
      mine.offset = offset;
      team.barrier();
    }
    std::vector<const char*> x(static_cast<std::size_t>(team.size()));
    for (int j = 0; j < team.size(); ++j)
      x[static_cast<std::size_t>(j)] =
          arena_->peer(j, team.mailbox(j).segment, team.mailbox(j).offset);
    const Group& cross = team.cross();
    if (cross.size == 1) {
      team_sum(x, static_cast<std::size_t>(g.rank) * block, block_count, t, epilogue);
    } else {
      char* partial = static_cast<char*>(sums_->get(block * static_cast<std::size_t>(cross.size)));
      for (int c = 0; c < cross.size; ++c) {
        const auto where = static_cast<std::size_t>(team.cross_group_ranks()[c]) * block;
        team_sum(x, where, block_count, t,
                 {partial + static_cast<std::size_t>(c) * block, t, 1.0, Store::Assign});
      }
      delegate().reduce_scatter(Located::private_memory(partial), block_count, t, cross, epilogue);
    }
    team.barrier();  // every rank is done reading the others' gradients
  } catch (...) {
    if (staged) arena_->deallocate(staged, bytes);
    throw;
  }
  if (staged) arena_->deallocate(staged, bytes);
}

}  // namespace fsdp::shm
