#include "transport/mpi/mpi_transport.hpp"

#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

#include "base/mpi_check.hpp"
#include "base/mpi_datatypes.hpp"
#include "memory/host/host_kernels.hpp"
#include "transport/mpi/mpi_half_ops.hpp"

namespace fsdp {
namespace {

char* bytes_at(void* base, std::size_t block, std::size_t block_bytes) {
  return static_cast<char*>(base) + block * block_bytes;
}

}  // namespace

void MpiTransport::all_gather(const void* shard, const Located& full_at, std::size_t count, DType t,
                              const Group& g) {
  void* full = full_at.data;
  const MpiCount c(count, t);
  mpi_check(
      MPI_Allgather(shard ? shard : MPI_IN_PLACE, c.n(), c.type(), full, c.n(), c.type(), g.comm),
      "MPI_Allgather");
}

void MpiTransport::all_gather_pieces(const void* shard, const Located& full, std::size_t count,
                                     DType t, const Group& g,
                                     const std::vector<BlockPiece>& pieces) {
  (void)count;
  const std::size_t es = dtype_size(t), most = static_cast<std::size_t>(INT_MAX);
  const MPI_Datatype type = mpi_type(t);
  char* out = static_cast<char*>(full.data);
  const char* own = static_cast<const char*>(shard);
  std::vector<MPI_Request> requests;
  auto runs = [&](std::size_t first, std::size_t length, auto&& post) {
    while (length) {
      const std::size_t m = std::min(length, most);
      post(first, static_cast<int>(m));
      first += m;
      length -= m;
    }
  };
  // Every piece is one contiguous message (or runs of INT_MAX elements) straight to its place:
  // derived types (MPI_Alltoallw) cost MPICH a packing pass, 0.6x the flat layout's all-gather
  // (bench_layout). One tag: messages between two ranks are matched in the order both post them.
  // A failure while posting: what was posted is cancelled and completed before the buffers go.
  auto post = [&](int rc, const char* call) {
    if (rc == MPI_SUCCESS) return;
    for (MPI_Request& r : requests)
      if (r != MPI_REQUEST_NULL) MPI_Cancel(&r);
    MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
    mpi_check(rc, call);
  };
  for (int step = 1; step < g.size; ++step) {
    const int from = (g.rank - step + g.size) % g.size, to = (g.rank + step) % g.size;
    for (const BlockPiece& p : pieces) {
      runs(p.out_offset + static_cast<std::size_t>(from) * p.stride, p.length(from),
           [&](std::size_t at, int m) {
             requests.push_back(MPI_REQUEST_NULL);
             post(MPI_Irecv(out + at * es, m, type, from, 0, g.comm, &requests.back()),
                  "MPI_Irecv");
           });
      runs(p.block_offset, p.length(g.rank), [&](std::size_t at, int m) {
        requests.push_back(MPI_REQUEST_NULL);
        post(MPI_Isend(own + at * es, m, type, to, 0, g.comm, &requests.back()), "MPI_Isend");
      });
    }
  }
  for (const BlockPiece& p : pieces) {
    const std::size_t m = p.length(g.rank);
    if (m)
      std::memcpy(out + (p.out_offset + static_cast<std::size_t>(g.rank) * p.stride) * es,
                  own + p.block_offset * es, m * es);
  }
  mpi_check(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE),
            "MPI_Waitall");
}

void MpiTransport::reduce_scatter(const Located& full_at, std::size_t block_count, DType t,
                                  const Group& g, const ReduceEpilogue& epilogue) {
  void* full = full_at.data;
  if (g.size == 1) {
    host::scaled(epilogue.out, epilogue.out_dtype, full, t, block_count, epilogue.divisor,
                 epilogue.store);
    return;
  }
  if (reduce_scatter_uses_ring(options_, block_count, t, g.size))
    ring_reduce_scatter(full, block_count, t, g, epilogue);
  else
    mpi_reduce_scatter(full, block_count, t, g, epilogue);
}

// Step s: send block (r-s-1) to the next rank, receive block (r-s-2) from the previous one and add
// it to our own copy, which we send on at step s+1. After n-1 steps the block received is our own
// (r), summed over all ranks in a fixed order: deterministic. Each step goes in pieces (see
// MpiTransportOptions::ring_piece_bytes); the sum order per element does not depend on them.
void MpiTransport::ring_reduce_scatter(void* full, std::size_t block_count, DType t, const Group& g,
                                       const ReduceEpilogue& epilogue) {
  const int n = g.size, r = g.rank;
  const int next = (r + 1) % n, prev = (r - 1 + n) % n;
  const std::size_t esize = dtype_size(t), block_bytes = block_count * esize;
  const std::size_t piece = ring_piece_numel(options_, block_count, t);
  void* incoming = scratch_.get(piece * esize);
  for (int s = 0; s < n - 1; ++s) {
    const int send_block = (r - s - 1 + 2 * n) % n, recv_block = (r - s - 2 + 2 * n) % n;
    char* send = bytes_at(full, send_block, block_bytes);
    char* own = bytes_at(full, recv_block, block_bytes);
    for (std::size_t done = 0; done < block_count; done += piece) {
      const std::size_t m = std::min(piece, block_count - done);
      const MpiCount c(m, t);
      mpi_check(MPI_Sendrecv(send + done * esize, c.n(), c.type(), next, 0, incoming, c.n(),
                             c.type(), prev, 0, g.comm, MPI_STATUS_IGNORE),
                "MPI_Sendrecv");
      if (s < n - 2)
        host::add_into(own + done * esize, incoming, m, t);
      else
        host::add_pair_scaled(
            static_cast<char*>(epilogue.out) + done * dtype_size(epilogue.out_dtype),
            epilogue.out_dtype, own + done * esize, incoming, t, m, epilogue.divisor,
            epilogue.store);
    }
  }
}

void MpiTransport::mpi_reduce_scatter(void* full, std::size_t block_count, DType t, const Group& g,
                                      const ReduceEpilogue& epilogue) {
  void* reduced = scratch_.get(block_count * dtype_size(t));
  mpi_check(MPI_Reduce_scatter_block(full, reduced, static_cast<int>(block_count), mpi_type(t),
                                     MPI_SUM, g.comm),
            "MPI_Reduce_scatter_block");
  host::scaled(epilogue.out, epilogue.out_dtype, reduced, t, block_count, epilogue.divisor,
               epilogue.store);
}

void MpiTransport::all_reduce(void* buf, std::size_t count, DType t, const Group& g) {
  if (g.size == 1) return;
  const MPI_Op op = sum_op(t);
  // MPI_SUM applies to predefined types only, so counts beyond INT_MAX go in pieces.
  const std::size_t piece = static_cast<std::size_t>(INT_MAX);
  for (std::size_t done = 0; done < count; done += piece) {
    const std::size_t n = std::min(piece, count - done);
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, bytes_at(buf, done, dtype_size(t)), static_cast<int>(n),
                            mpi_type(t), op, g.comm),
              "MPI_Allreduce");
  }
}

}  // namespace fsdp
