// fsdp_hyperparams_t (a struct that grows at its end) to the optimizer's HyperParams: for
// fsdp_optimizer_create and its group calls, and for a plan's job.
#pragma once

#include "fsdp.h"
#include "optim/optimizer.hpp"

namespace fsdp::capi {

// Reads at most hp->size bytes over the kind's defaults (fsdp.h's, the only statement of them: a
// caller's older, shorter struct gets the newer fields from there); NULL: the defaults. Throws
// InvalidArgument naming `arg` and the field for a value the kind cannot use.
HyperParams read_hyperparams(const fsdp_hyperparams_t* hp, OptimizerKind kind, const char* arg);

}  // namespace fsdp::capi
