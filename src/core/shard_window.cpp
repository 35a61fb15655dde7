#include "core/shard_window.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "base/error.hpp"
#include "base/mpi_check.hpp"

namespace fsdp {

ShardWindow::ShardWindow(const ShardPeers& peers, std::size_t bytes) {
  MPI_Info info;
  mpi_check(MPI_Info_create(&info), "MPI_Info_create");
  MPI_Info_set(info, "alloc_shared_noncontig", "true");
  const MPI_Aint size = static_cast<MPI_Aint>(std::max<std::size_t>(bytes, 8));
  int rc = MPI_Win_allocate_shared(size, 1, info, peers.node, &base_, &shared_);
  MPI_Info_free(&info);
  mpi_check(rc, "MPI_Win_allocate_shared (the shard of a unit used by any subset of ranks)");
  mpi_check(MPI_Win_lock_all(MPI_MODE_NOCHECK, shared_), "MPI_Win_lock_all");
  local_.assign(peers.node_index.size(), nullptr);
  for (std::size_t r = 0; r < peers.node_index.size(); ++r) {
    if (peers.node_index[r] < 0) continue;
    MPI_Aint got = 0;
    int unit = 1;
    void* p = nullptr;
    mpi_check(MPI_Win_shared_query(shared_, peers.node_index[r], &got, &unit, &p),
              "MPI_Win_shared_query");
    local_[r] = static_cast<char*>(p);
  }
  if (!peers.spans_nodes) return;
  MPI_Info rinfo;
  mpi_check(MPI_Info_create(&rinfo), "MPI_Info_create");
  MPI_Info_set(rinfo, "accumulate_ordering", "none");  // gets only
  rc = MPI_Win_create(base_, size, 1, rinfo, peers.shard, &rma_);
  MPI_Info_free(&rinfo);
  mpi_check(rc, "MPI_Win_create (the shard of a unit used by any subset of ranks)");
  int* model = nullptr;
  int found = 0;
  MPI_Win_get_attr(rma_, MPI_WIN_MODEL, &model, &found);
  if (found && *model != MPI_WIN_UNIFIED)
    fail(Errc::Unsupported,
         "this MPI gives RMA windows the separate memory model; units used by any subset of "
         "ranks (FSDP_USED_BY_ANY_RANKS) whose shard group spans nodes need the unified one");
  mpi_check(MPI_Win_lock_all(MPI_MODE_NOCHECK, rma_), "MPI_Win_lock_all");
}

ShardWindow::~ShardWindow() {
  release();
}

void ShardWindow::release() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized || !freeable_) return;
  if (rma_ != MPI_WIN_NULL) {
    MPI_Win_unlock_all(rma_);
    MPI_Win_free(&rma_);
  }
  if (shared_ != MPI_WIN_NULL) {
    MPI_Win_unlock_all(shared_);
    MPI_Win_free(&shared_);
  }
  base_ = nullptr;
}

void ShardWindow::get(int rank, std::size_t offset, std::size_t bytes, void* out) {
  if (const char* p = local_[static_cast<std::size_t>(rank)]) {
    std::atomic_thread_fence(std::memory_order_acquire);
    std::memcpy(out, p + offset, bytes);
    return;
  }
  constexpr std::size_t kChunk = std::size_t{1} << 30;  // counts are ints
  char* o = static_cast<char*>(out);
  for (std::size_t done = 0; done < bytes; done += kChunk) {
    const int n = static_cast<int>(std::min(kChunk, bytes - done));
    mpi_check(MPI_Get(o + done, n, MPI_BYTE, rank, static_cast<MPI_Aint>(offset + done), n,
                      MPI_BYTE, rma_),
              "MPI_Get (a one-sided unshard)");
  }
  pending_gets_ = true;
}

void ShardWindow::flush() {
  if (!pending_gets_) return;
  mpi_check(MPI_Win_flush_all(rma_), "MPI_Win_flush_all (a one-sided unshard)");
  pending_gets_ = false;
}

void ShardWindow::sync() {
  std::atomic_thread_fence(std::memory_order_release);
  mpi_check(MPI_Win_sync(shared_), "MPI_Win_sync");
  if (rma_ != MPI_WIN_NULL) mpi_check(MPI_Win_sync(rma_), "MPI_Win_sync");
}

}  // namespace fsdp
