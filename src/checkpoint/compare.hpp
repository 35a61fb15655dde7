// fsdp_checkpoint_diff: two checkpoints compared dataset by dataset (the largest absolute and
// relative difference of each) and in their metadata, optimizers and scaler (fsdp-ckpt diff).
#pragma once

#include <mpi.h>

#include <string>

#include "checkpoint/verify.hpp"

namespace fsdp::ckpt {

// Collective over comm: true when the checkpoints differ (in their parameters alone with
// model_only), the same on every rank; the report on rank 0 names every difference.
bool checkpoints_differ(MPI_Comm comm, const std::string& a, const std::string& b, bool model_only,
                        const ReportSink& out);

}  // namespace fsdp::ckpt
