// MPI datatypes for our dtypes, and counts beyond INT_MAX elements for the MPI-3 int interfaces
// (the "BigMPI" construction: one derived type describing the whole contiguous range).
#pragma once

#include <mpi.h>

#include <cstddef>

#include "base/dtype.hpp"

namespace fsdp {

MPI_Datatype mpi_type(DType t);

// `count` elements of `t` as (n, type): n = count and the predefined type when count fits an int,
// else n = 1 and a committed derived type that this object frees.
class MpiCount {
 public:
  MpiCount(std::size_t count, DType t);
  ~MpiCount();
  MpiCount(const MpiCount&) = delete;
  MpiCount& operator=(const MpiCount&) = delete;
  int n() const { return n_; }
  MPI_Datatype type() const { return type_; }

 private:
  int n_ = 0;
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
  bool owned_ = false;
};

}  // namespace fsdp
