// Gradient norm clipping over every unit of a context (PyTorch's clip_grad_norm_ on an FSDP root).
#pragma once

namespace fsdp {

class Context;

// The p-norm (p >= 1, or infinity) of all gradient shards of the context, taken over the
// parameters only (padding and frozen parameters excluded) and over every rank, hybrid replicas
// counted once: partial sums are combined over the shard group, whose ranks hold disjoint blocks.
// When the norm exceeds max_norm, every gradient shard is scaled by max_norm / (norm + 1e-6).
// A non-finite norm is returned and leaves the gradients unchanged. Collective over the shard
// group. Units whose gradient is zero-marked contribute nothing.
double clip_grad_norm(Context& ctx, double max_norm, double p);

}  // namespace fsdp
