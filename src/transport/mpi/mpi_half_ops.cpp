#include "transport/mpi/mpi_half_ops.hpp"

#include "base/mpi_check.hpp"
#include "memory/host/host_kernels.hpp"

namespace fsdp {
namespace {

template <DType T>
void sum(void* in, void* inout, int* len, MPI_Datatype*) {
  host::add_into(inout, in, static_cast<std::size_t>(*len), T);
}

MPI_Op create(MPI_User_function* f) {
  MPI_Op op = MPI_OP_NULL;
  mpi_check(MPI_Op_create(f, /*commute=*/1, &op), "MPI_Op_create");
  return op;
}

}  // namespace

MPI_Op sum_op(DType t) {
  switch (t) {
    case DType::Float32:
    case DType::Float64: return MPI_SUM;
    case DType::BFloat16: {
      static const MPI_Op op = create(sum<DType::BFloat16>);  // thread-safe one-time creation
      return op;
    }
    case DType::Float16: {
      static const MPI_Op op = create(sum<DType::Float16>);
      return op;
    }
  }
  return MPI_SUM;
}

}  // namespace fsdp
