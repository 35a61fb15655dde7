// The cheap collective check that makes a divergent call fail on every rank instead of hanging
// or corrupting memory: each rank contributes whether its arguments were valid and a fingerprint
// of them.
#pragma once

#include <cstdint>
#include <optional>

#include "core/error.hpp"
#include "core/group.hpp"

namespace fsdp {

// Collective over `group`. Throws on every rank when any rank's arguments were invalid (that rank
// rethrows its own error, the others Errc::Mismatch naming it) or when the fingerprints differ
// (Errc::Mismatch naming the ranks that differ from rank 0). `what` names the arguments compared.
void agree(const Group& group, const char* what, uint64_t fingerprint,
           const std::optional<Error>& local_error);

}  // namespace fsdp
