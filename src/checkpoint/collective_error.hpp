// Turning one rank's failure into the same error on every rank of a communicator, so that a
// checkpoint operation never leaves some ranks waiting in a collective the others abandoned.
#pragma once

#include <mpi.h>

#include <functional>
#include <optional>

#include "core/error.hpp"

namespace fsdp::ckpt {

// Collective over comm. When any rank passes an error, every rank throws the error of the lowest
// such rank (its code; its message, prefixed "rank r: " on the other ranks).
void unify_error(MPI_Comm comm, const std::optional<Error>& local);

// Runs `body`, catching its Error (and out-of-memory), then unify_error.
void run_unified(MPI_Comm comm, const std::function<void()>& body);

}  // namespace fsdp::ckpt
