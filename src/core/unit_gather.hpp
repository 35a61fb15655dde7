// A unit's full master values: every rank's shard (the storage dtype: the float32 or float64
// master the optimizer updates, not the param_dtype copy an unshard gives) gathered over the shard
// group, and each original parameter copied out whole. What state dicts and exports of a
// mixed-precision unit need, without a temporary unit.
#pragma once

#include <optional>

#include "base/error.hpp"

namespace fsdp {

class Unit;

// Collective over the unit's shard group; over the job when the unit splits its masters
// (UnitBytes::split_masters: the replicas' master pieces are gathered first). out[i] (host or, in a
// CUDA context, device memory; may be nullptr: skipped) receives parameter i's values, row-major,
// in the storage dtype. Works whether the unit is sharded or unsharded (the shards are the masters
// either way). Throws on every rank of those groups together when one rank fails: `local_error`
// (the caller's arguments refused on this rank) or out of memory, in one agreement.
void gather_masters(Unit& unit, void* const* out, const std::optional<Error>& local_error);

}  // namespace fsdp
