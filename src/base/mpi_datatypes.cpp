#include "base/mpi_datatypes.hpp"

#include <climits>

#include "base/error.hpp"
#include "base/mpi_check.hpp"

namespace fsdp {

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::Float32: return MPI_FLOAT;
    case DType::Float64: return MPI_DOUBLE;
    // Moved as raw 16-bit words; reductions on them are done by the library, never by MPI.
    case DType::BFloat16:
    case DType::Float16: return MPI_UINT16_T;
  }
  fail(Errc::Internal, "mpi_type: unknown dtype");
}

MpiCount::MpiCount(std::size_t count, DType t) {
  const MPI_Datatype base = mpi_type(t);
  if (count <= static_cast<std::size_t>(INT_MAX)) {
    n_ = static_cast<int>(count);
    type_ = base;
    return;
  }
  constexpr std::size_t kChunk = std::size_t(1) << 30;
  const std::size_t chunks = count / kChunk, rest = count % kChunk;
  MPI_Datatype chunk_t = MPI_DATATYPE_NULL, body_t = MPI_DATATYPE_NULL;
  mpi_check(MPI_Type_contiguous(static_cast<int>(kChunk), base, &chunk_t), "MPI_Type_contiguous");
  int rc = MPI_Type_contiguous(static_cast<int>(chunks), chunk_t, &body_t);
  if (rc == MPI_SUCCESS) {
    int lengths[2] = {1, static_cast<int>(rest)};
    MPI_Aint displs[2] = {0, static_cast<MPI_Aint>(chunks * kChunk * dtype_size(t))};
    MPI_Datatype types[2] = {body_t, base};
    rc = MPI_Type_create_struct(rest ? 2 : 1, lengths, displs, types, &type_);
    if (rc == MPI_SUCCESS) rc = MPI_Type_commit(&type_);
  }
  if (body_t != MPI_DATATYPE_NULL) MPI_Type_free(&body_t);
  MPI_Type_free(&chunk_t);
  mpi_check(rc, "MPI_Type_create_struct");
  n_ = 1;
  owned_ = true;
}

MpiCount::~MpiCount() {
  if (owned_) MPI_Type_free(&type_);
}

}  // namespace fsdp
