// Collective agreement: the one way a failure or a divergence on some ranks becomes the same
// outcome on every rank, so that no rank waits in a collective the others abandoned. Each rank
// brings what it found locally (an error, and a fingerprint of its arguments); one exchange later
// every rank throws, or every rank goes on.
//
//   std::optional<Error> local = attempt([&] { ...checks or work that may throw on this rank... });
//   agree(world, "unit descriptors", fingerprint, local);   // throws on every rank, or none
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <optional>

#include "base/error.hpp"
#include "base/group.hpp"

namespace fsdp {

// Runs `body` and returns its failure, if any: an Error, or std::bad_alloc as Errc::OutOfMemory.
std::optional<Error> attempt(const std::function<void()>& body);

// Arguments checked before a collective call. Collective over `group`. Throws on every rank when
// any rank has a local error (that rank rethrows its own, whose message says what it did wrong;
// the others throw Errc::Mismatch naming the failing ranks) or when the fingerprints differ
// (Errc::Mismatch naming the ranks that differ from rank 0). `what` names what was compared.
void agree(const Group& group, const char* what, uint64_t fingerprint,
           const std::optional<Error>& local_error);

// Work that may fail on some ranks (files, I/O), where the cause is the same for everyone.
// Collective over `comm`, one MPI_Allreduce when nobody failed: every rank throws the lowest
// failing rank's error, its code and its message prefixed "rank r: " on the others.
void agree_error(MPI_Comm comm, const std::optional<Error>& local_error);
// agree_error(comm, attempt(body)).
void agree_on(MPI_Comm comm, const std::function<void()>& body);

}  // namespace fsdp
