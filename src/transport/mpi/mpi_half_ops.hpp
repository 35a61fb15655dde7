// MPI reduction operators for bfloat16 and float16, which MPI does not know: element-wise sums of
// 16-bit words (moved as MPI_UINT16_T), computed in float and rounded once per pair.
#pragma once

#include <mpi.h>

#include "base/dtype.hpp"

namespace fsdp {

// MPI_SUM for float32 and float64; the library's operator for the 16-bit types (created on first
// use, kept until MPI_Finalize).
MPI_Op sum_op(DType t);

}  // namespace fsdp
