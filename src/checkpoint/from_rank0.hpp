// What rank 0 reads or decides, given to every rank: so that all ranks act on the same file, the
// same timestamp and the same error.
#pragma once

#include <mpi.h>

#include <string>

#include "checkpoint/catalog_reader.hpp"

namespace fsdp::ckpt {

// Collective over comm: rank 0's string.
std::string broadcast_string(MPI_Comm comm, std::string s);

// Collective over comm: rank 0 reads the catalog (read_catalog) and every rank gets it, or the
// error rank 0 met.
Catalog shared_catalog(MPI_Comm comm, const std::string& path,
                       CatalogSource source = CatalogSource::Index);

}  // namespace fsdp::ckpt
