// fsdp_hyperparams_t (a struct that grows at its end) to the optimizer's HyperParams and back, the
// one place that maps the C struct: for fsdp_optimizer_create and its group calls, for a plan's
// job, and for fsdp_optimizer_get_hyperparams.
#pragma once

#include "fsdp.h"
#include "optim/optimizer.hpp"

namespace fsdp::capi {

// Reads at most hp->size bytes over the kind's defaults (fsdp.h's, the only statement of them: a
// caller's older, shorter struct gets the newer fields from there); NULL: the defaults. Throws
// InvalidArgument naming `arg` and the field for a value the kind cannot use.
HyperParams read_hyperparams(const fsdp_hyperparams_t* hp, OptimizerKind kind, const char* arg);
// The C struct of `h` (flags as 0 or 1).
fsdp_hyperparams_t to_struct(const HyperParams& h);

}  // namespace fsdp::capi
