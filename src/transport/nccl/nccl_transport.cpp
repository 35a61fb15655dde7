#include "transport/nccl/nccl_transport.hpp"

#include <dlfcn.h>

#include <chrono>
#include <string>

#include "base/error.hpp"
#include "base/mpi_check.hpp"
#include "memory/cuda/cuda_check.hpp"
#include "memory/cuda/device_guard.hpp"
#include "transport/nccl/nccl_factory.hpp"

namespace fsdp::cuda {
namespace {

void nccl_check(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return;
  std::string text = std::string(what) + ": " + ncclGetErrorString(r);
  if (const char* last = ncclGetLastError(nullptr); last && *last)
    text += " (" + std::string(last) + ")";
  fail(Errc::Nccl, text);
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::Float32: return ncclFloat32;
    case DType::Float64: return ncclFloat64;
    case DType::BFloat16: return ncclBfloat16;
    case DType::Float16: return ncclFloat16;
  }
  fail(Errc::Internal, "NCCL transport: unknown dtype");
}

char* at(void* base, std::size_t bytes) {
  return static_cast<char*>(base) + bytes;
}

// Every rank of the group ends alike: rank 0's failure to make the id reaches the others with the
// id (they would otherwise wait in MPI_Bcast), and after ncclCommInitRank the group agrees on
// success, so a rank whose initialization failed after NCCL's bootstrap does not leave the others
// to go on alone. (A rank failing inside NCCL's bootstrap can still leave the others blocked in
// ncclCommInitRank: NCCL itself waits for every rank there.)
ncclComm_t create_comm(const Group& g) {
  struct {
    int ok;
    ncclUniqueId id;
  } msg{};
  std::string why;
  if (g.rank == 0) {
    const ncclResult_t r = ncclGetUniqueId(&msg.id);
    msg.ok = r == ncclSuccess;
    if (!msg.ok) why = ncclGetErrorString(r);
  }
  mpi_check(MPI_Bcast(&msg, sizeof msg, MPI_BYTE, 0, g.comm), "MPI_Bcast (NCCL unique id)");
  if (!msg.ok)
    fail(Errc::Nccl, "ncclGetUniqueId failed on rank 0 of the group" +
                         (why.empty() ? std::string() : ": " + why));
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRank(&comm, g.size, msg.id, g.rank);
  int ok = r == ncclSuccess, all = 0;
  mpi_check(MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, g.comm),
            "MPI_Allreduce (NCCL initialization agreed)");
  if (all) return comm;
  if (ok) ncclCommAbort(comm);  // the others failed: this rank's communicator is unusable
  if (!ok) nccl_check(r, "ncclCommInitRank");
  fail(Errc::Nccl, "ncclCommInitRank failed on another rank of the group");
}

// ncclCommRevoke where the loaded NCCL has it (>= 2.28), else nullptr.
using RevokeFn = ncclResult_t (*)(ncclComm_t, int);
RevokeFn revoke_call() {
  static const RevokeFn fn = [] {
    int version = 0;
    if (ncclGetVersion(&version) != ncclSuccess || version < 22800) return RevokeFn(nullptr);
    return reinterpret_cast<RevokeFn>(dlsym(RTLD_DEFAULT, "ncclCommRevoke"));
  }();
  return fn;
}

}  // namespace

NcclTransport::NcclTransport(CudaMemorySpace& memory, const std::vector<const Group*>& groups)
    : memory_(memory) {
  DeviceGuard device(memory_.device());
  try {
    for (const Group* g : groups) {
      bool made = false;
      for (const auto& entry : comms_) made = made || entry.first == g->comm;
      if (g->comm != MPI_COMM_NULL && g->size > 1 && !made)
        comms_.emplace_back(g->comm, create_comm(*g));
    }
  } catch (...) {
    for (auto it = comms_.rbegin(); it != comms_.rend(); ++it) ncclCommDestroy(it->second);
    throw;
  }
  memory_.set_wait_check([this] { check_while_waiting(); });
}

NcclTransport::~NcclTransport() {
  memory_.set_wait_check(nullptr);
  if (aborted_) return;  // ncclCommAbort already freed them
  DeviceGuard device(memory_.device());
  cudaStreamSynchronize(memory_.stream());
  for (auto it = comms_.rbegin(); it != comms_.rend(); ++it) ncclCommDestroy(it->second);
}

void NcclTransport::abort() {
  if (aborted_.exchange(true)) return;
  std::unique_lock<std::timed_mutex> lock(enqueue_, std::defer_lock);
  // A call stuck inside NCCL for this long is abandoned: aborting is then the only way out
  // (ncclCommAbort is what ends a call blocked in NCCL on another thread).
  (void)lock.try_lock_for(std::chrono::seconds(10));
  std::lock_guard<std::mutex> comms(comms_mutex_);  // no wait's check is reading them now
  // Every communicator's in-flight work stopped first (ncclCommRevoke, NCCL >= 2.28, looked up
  // at run time so that an older libnccl still loads), then each aborted: aborting one while a
  // kernel of another still waits for a peer could wait on that kernel.
  if (const auto revoke = revoke_call())
    for (auto& [mpi, comm] : comms_) revoke(comm, 0 /* NCCL_REVOKE_DEFAULT */);
  for (auto& [mpi, comm] : comms_) ncclCommAbort(comm);
}

void NcclTransport::interrupt_for_timeout() {
  timed_out_ = true;
  abort();
}

namespace {
[[noreturn]] void fail_aborted(bool timed_out, const char* where) {
  if (timed_out)
    fail(Errc::Timeout, std::string("NCCL communicators were aborted by the watchdog's timeout ") +
                            where + " (fsdp_config_t.timeout_s; doc/debugging.md)");
  fail(Errc::Aborted, std::string("NCCL communicators were aborted (fsdp_abort) ") + where);
}
}  // namespace

void NcclTransport::check_while_waiting() {
  ncclResult_t error = ncclSuccess;
  {
    std::lock_guard<std::mutex> comms(comms_mutex_);
    if (aborted_) fail_aborted(timed_out_, "while waiting for the device");
    for (auto& [mpi, comm] : comms_) {
      ncclResult_t async = ncclSuccess;
      if (ncclCommGetAsyncError(comm, &async) != ncclSuccess) continue;
      if (async != ncclSuccess && async != ncclInProgress) error = async;
    }
  }
  if (error != ncclSuccess) {
    abort();  // the stream's collectives return, and every later call is refused
    fail(Errc::Nccl, std::string("NCCL asynchronous error while waiting for the device (a peer "
                                 "failed or left?): ") +
                         ncclGetErrorString(error) + "; the communicators were aborted");
  }
}

ncclComm_t NcclTransport::comm_for(const Group& g) {
  if (aborted_) fail_aborted(timed_out_, "before this call");
  ncclComm_t comm = nullptr;
  for (const auto& entry : comms_)
    if (entry.first == g.comm) comm = entry.second;
  if (!comm) fail(Errc::Internal, "NCCL transport: no communicator for the group");
  ncclResult_t async = ncclSuccess;
  nccl_check(ncclCommGetAsyncError(comm, &async), "ncclCommGetAsyncError");
  nccl_check(async, "NCCL asynchronous error (an earlier collective failed)");
  return comm;
}

void NcclTransport::all_gather(const void* shard, const Located& full_at, std::size_t count,
                               DType t, const Group& g) {
  void* full = full_at.data;
  const std::size_t block = count * dtype_size(t);
  void* own = at(full, block * static_cast<std::size_t>(g.rank));
  if (g.size == 1) {
    if (shard) memory_.copy(own, shard, block);
    return;
  }
  std::lock_guard<std::timed_mutex> lock(enqueue_);
  ncclComm_t comm = comm_for(g);
  DeviceGuard device(memory_.device());
  // In place when shard == nullptr: NCCL's in-place all-gather is sendbuff == recvbuff + rank*n.
  nccl_check(ncclAllGather(shard ? shard : own, full, count, nccl_type(t), comm, memory_.stream()),
             "ncclAllGather");
}

void NcclTransport::reduce_scatter(const Located& full_at, std::size_t block_count, DType t,
                                   const Group& g, const ReduceEpilogue& epilogue) {
  void* full = full_at.data;
  void* own = at(full, block_count * dtype_size(t) * static_cast<std::size_t>(g.rank));
  if (g.size > 1) {
    std::lock_guard<std::timed_mutex> lock(enqueue_);
    ncclComm_t comm = comm_for(g);
    DeviceGuard device(memory_.device());
    // In place: recvbuff == sendbuff + rank * recvcount.
    nccl_check(
        ncclReduceScatter(full, own, block_count, nccl_type(t), ncclSum, comm, memory_.stream()),
        "ncclReduceScatter");
  }
  memory_.kernels().scaled(epilogue.out, epilogue.out_dtype, own, t, block_count, epilogue.divisor,
                           epilogue.store);
}

void NcclTransport::all_reduce(void* buf, std::size_t count, DType t, const Group& g) {
  if (g.size == 1) return;
  std::lock_guard<std::timed_mutex> lock(enqueue_);
  ncclComm_t comm = comm_for(g);
  DeviceGuard device(memory_.device());
  nccl_check(ncclAllReduce(buf, buf, count, nccl_type(t), ncclSum, comm, memory_.stream()),
             "ncclAllReduce");
}

std::unique_ptr<Transport> make_nccl_transport(MemorySpace& device_memory,
                                               const std::vector<const Group*>& groups) {
  return std::make_unique<NcclTransport>(static_cast<CudaMemorySpace&>(device_memory), groups);
}

}  // namespace fsdp::cuda
