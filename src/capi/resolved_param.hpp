// A parameter index as a caller gives it: one of the unit's own parameters or an alias of a tie
// (fsdp_unit_tie), which the owner unit stores.
#pragma once

#include <cstddef>

#include "core/unit.hpp"

namespace fsdp::capi {

struct ResolvedParam {
  Unit* unit;  // the unit that stores the parameter
  std::size_t index;
  const Tie* tie;  // nullptr for the unit's own parameter
};

// Throws OutOfRange naming `index` when it is neither.
ResolvedParam resolve_param(Unit& u, int index);

}  // namespace fsdp::capi
