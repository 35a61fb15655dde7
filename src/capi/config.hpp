// fsdp_config_t (a struct that grows at its end) to the core's ContextOptions.
#pragma once

#include <optional>

#include "core/context.hpp"
#include "fsdp.h"

namespace fsdp::capi {

// Reads at most cfg->size bytes; newer fields keep their defaults. NULL means all defaults.
// Throws InvalidArgument (naming the field) or Version.
ContextOptions options_from_config(const fsdp_config_t* cfg);

// FSDP_DTYPE_AUTO as nullopt; throws InvalidArgument naming `arg` for a value out of range.
std::optional<DType> optional_dtype(int t, const char* arg);

}  // namespace fsdp::capi
