// A PlanModel from a file (doc/planning.md): libfsdp's layout JSON, an HDF5 checkpoint's units, or
// a Hugging Face config.json of a GPT-2 or Llama decoder (one unit per block and a root unit).
// Each throws an fsdp Error naming the file (`where`) and the field it could not use.
#pragma once

#include <string>

#include "plan/plan_model.hpp"

namespace fsdp::plan {

PlanModel model_from_layout_json(const std::string& text, const std::string& where);
PlanModel model_from_hf_config(const std::string& text, const std::string& where);
PlanModel model_from_checkpoint(const std::string& path);

}  // namespace fsdp::plan
