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

// How the other ranks learn of a rank's failure.
enum class Spread {
  // The failing rank rethrows its error; the others throw Errc::Mismatch naming the failing ranks
  // (arguments checked before a collective call: each rank's own message says what it did wrong).
  Mismatch,
  // Every rank throws the lowest failing rank's error, its code and its message prefixed
  // "rank r: " (files and I/O: the cause is the same for everyone).
  FirstError,
};

// Runs `body` and returns its failure, if any: an Error, or std::bad_alloc as Errc::OutOfMemory.
std::optional<Error> attempt(const std::function<void()>& body);

// Collective over `group`. Throws on every rank when any rank has a local error (see Spread) or
// when the fingerprints differ (Errc::Mismatch naming the ranks that differ from rank 0). `what`
// names what was compared.
void agree(const Group& group, const char* what, uint64_t fingerprint,
           const std::optional<Error>& local_error, Spread spread = Spread::Mismatch);

// The same over a communicator, errors only, spread as FirstError.
void agree_error(MPI_Comm comm, const std::optional<Error>& local_error);
// agree_error(comm, attempt(body)).
void agree_on(MPI_Comm comm, const std::function<void()>& body);

}  // namespace fsdp
