// fsdp_param_desc_t arrays to validated ParamSpecs.
#pragma once

#include <vector>

#include "core/flat_layout.hpp"
#include "fsdp.h"

namespace fsdp::capi {

// Throws InvalidArgument or Unsupported naming descs[i] and the field.
std::vector<ParamSpec> specs_from_descriptors(int nparams, const fsdp_param_desc_t* descs);

}  // namespace fsdp::capi
