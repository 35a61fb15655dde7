// How a new unit's shard gets its values (paper, "Deferred initialization"; PyTorch's
// sync_module_states): from full values the caller passes, from a callback that initializes one
// parameter at a time in a temporary full-size unit (so a model larger than one rank's memory is
// initialized one unit at a time), and optionally from rank 0 only, every rank receiving rank 0's
// values.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace fsdp {

class Unit;

// Fills parameter `index` (its full values, row-major, in the unit's storage dtype) at `data`.
// Throws Error to fail the creation.
using ParamInitializer = std::function<void(std::size_t index, void* data)>;

struct UnitSource {
  const void* const* values = nullptr;  // nullptr entries and nullptr array: zeros
  ParamInitializer init;                // takes precedence over values when set
  bool from_rank0 = false;              // only world rank 0's values or callback count
};

// Collective over the context's world group. Ranks that fail locally (a callback that throws,
// out of memory) make every rank throw: Errc of the failing rank there, Mismatch elsewhere.
void initialize_shard(Unit& unit, const UnitSource& source);

}  // namespace fsdp
