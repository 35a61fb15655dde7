// Gradient norm clipping over every unit of a context (PyTorch's clip_grad_norm_ on an FSDP root).
#pragma once

namespace fsdp {

class Context;

// The p-norm (p >= 1, or infinity) of all gradient shards of the context, taken over the
// parameters only (padding and frozen parameters excluded) and over every rank, hybrid replicas
// counted once. The same bits for any number of ranks and any sharding of the same gradients:
// the largest |x| first (a maximum, exact in any order), then for finite p the sum of |x|^p in
// fixed point scaled from it, whose integers add exactly (memory/fixed_sum.hpp). A NaN gradient
// gives NaN; an infinite one (or |x|^p beyond double's range) infinity.
// When the norm exceeds max_norm, every gradient shard is scaled by max_norm / (norm + 1e-6).
// A non-finite norm is returned and leaves the gradients unchanged. Collective over the shard
// group (and with HFSDP the replicas). Units whose gradient is zero-marked contribute nothing.
double clip_grad_norm(Context& ctx, double max_norm, double p);

}  // namespace fsdp
