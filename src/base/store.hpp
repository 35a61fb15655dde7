// What an arithmetic kernel does with the value it computes.
#pragma once

namespace fsdp {

// Accumulate: out += value. Assign: out = value, and `out` need not be initialized; a gradient
// shard marked zero (fresh, or after fsdp_zero_grads) is assigned rather than read and added to.
enum class Store { Accumulate, Assign };

}  // namespace fsdp
