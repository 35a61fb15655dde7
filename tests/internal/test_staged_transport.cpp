// The staged transport (device buffers over MPI through host staging) over plain host memory,
// where it must give the host transport's results bit for bit: the same collectives on copies of
// the same data, every dtype, in-place and out-of-place all-gathers, reduce-scatter epilogues that
// assign and accumulate, convert and divide, and all-reduce. On a GPU the same code runs with
// device memory (tests/gpu).
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "memory/host/host_kernels.hpp"
#include "memory/host/host_memory_space.hpp"
#include "runtime/scratch.hpp"
#include "transport/mpi/mpi_transport.hpp"
#include "transport/staged/staged_transport.hpp"

using namespace fsdp;

namespace {

int failures = 0;

void check(bool ok, const char* what, DType t, std::size_t n) {
  if (ok) return;
  ++failures;
  std::fprintf(stderr, "FAILED: %s (%s, %zu elements per rank)\n", what, dtype_name(t), n);
}

// Deterministic values of dtype t, different on every rank, with a fraction that exercises
// rounding in the 16-bit types.
std::vector<char> values(DType t, std::size_t n, int rank, int salt) {
  std::vector<double> d(n);
  for (std::size_t i = 0; i < n; ++i)
    d[i] = ((static_cast<double>((i * 2654435761u + static_cast<std::size_t>(rank) * 977 +
                                  static_cast<std::size_t>(salt)) %
                                 10007)) -
            5003.0) /
           257.0;
  std::vector<char> out(n * dtype_size(t));
  host::convert(out.data(), t, d.data(), DType::Float64, n);
  return out;
}

bool same(const std::vector<char>& a, const std::vector<char>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Group g;
  g.comm = MPI_COMM_WORLD;
  MPI_Comm_rank(g.comm, &g.rank);
  MPI_Comm_size(g.comm, &g.size);
  MemoryAccounting accounting;
  HostMemorySpace device, staging;  // "device" memory the host transport is not handed directly
  Scratch host_scratch(staging, accounting), reference_scratch(staging, accounting);
  MpiTransportOptions options;
  MpiTransport host(host_scratch, options), reference(reference_scratch, options);
  StagedTransport staged(device, staging, accounting, host, /*direct_all_gather=*/false);
  const std::size_t W = static_cast<std::size_t>(g.size);

  for (DType t : {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16}) {
    for (std::size_t n : {std::size_t(1), std::size_t(1000), std::size_t(70001)}) {
      const std::size_t es = dtype_size(t);
      // All-gather from a separate shard, and in place.
      const std::vector<char> shard = values(t, n, g.rank, 1);
      std::vector<char> want(n * W * es), got(n * W * es, 0);
      reference.all_gather(shard.data(), Located::private_memory(want.data()), n, t, g);
      staged.all_gather(shard.data(), Located::private_memory(got.data()), n, t, g);
      check(same(want, got), "all_gather", t, n);
      std::fill(got.begin(), got.end(), 0);
      std::memcpy(got.data() + static_cast<std::size_t>(g.rank) * n * es, shard.data(), n * es);
      staged.all_gather(nullptr, Located::private_memory(got.data()), n, t, g);
      check(same(want, got), "all_gather in place", t, n);

      // Reduce-scatter into a float32 (or float64) shard: assign with the mean's division, then
      // accumulate without division.
      const DType out_t = t == DType::Float64 ? DType::Float64 : DType::Float32;
      for (Store store : {Store::Assign, Store::Accumulate}) {
        const double divisor = store == Store::Assign ? static_cast<double>(W) : 1.0;
        std::vector<char> full_a = values(t, n * W, g.rank, 2), full_b = full_a;
        std::vector<char> out_a = values(out_t, n, g.rank, 3), out_b = out_a;
        reference.reduce_scatter(Located::private_memory(full_a.data()), n, t, g,
                                 {out_a.data(), out_t, divisor, store});
        staged.reduce_scatter(Located::private_memory(full_b.data()), n, t, g,
                              {out_b.data(), out_t, divisor, store});
        check(same(out_a, out_b),
              store == Store::Assign ? "reduce_scatter, assign / W" : "reduce_scatter, accumulate",
              t, n);
      }
      std::vector<char> sum_a = values(t, n, g.rank, 4), sum_b = sum_a;
      reference.all_reduce(sum_a.data(), n, t, g);
      staged.all_reduce(sum_b.data(), n, t, g);
      check(same(sum_a, sum_b), "all_reduce", t, n);
    }
  }
  // Steady state reuses the staging buffers: a second round of the largest size allocates none.
  const uint64_t calls = staging.allocation_calls();
  std::vector<char> full = values(DType::Float32, 70001 * W, g.rank, 5), out(70001 * 4);
  staged.reduce_scatter(Located::private_memory(full.data()), 70001, DType::Float32, g,
                        {out.data(), DType::Float32, 1.0, Store::Assign});
  check(staging.allocation_calls() == calls, "staging buffers reused", DType::Float32, 70001);

  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, g.comm);
  if (g.rank == 0) std::printf("test_staged_transport: %d failure(s) on %d ranks\n", total, g.size);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
