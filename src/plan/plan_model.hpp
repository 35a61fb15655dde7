// A model as the planner sees it (doc/planning.md): the units a job would create, each an ordered
// list of parameters described as fsdp_unit_create describes them, and the ties between them, with
// nothing allocated. Filled from the C API (fsdp_plan_add_unit, fsdp_plan_tie) or from a file
// (plan/model_sources.hpp); read by the memory and traffic plans.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "core/flat_layout.hpp"

namespace fsdp::plan {

// Parameter `owner_param` of unit `owner_unit`, used by another unit under `alias` (an embedding
// reused as the output head): stored, sharded and reduced once, in its owner.
struct PlanTie {
  std::string alias;
  std::size_t owner_unit = 0;
  std::size_t owner_param = 0;
};

struct PlanUnit {
  std::string name;
  std::vector<ParamSpec> params;
  std::vector<PlanTie> ties;
};

// A decoder's shape, where the model came from one (a Hugging Face config.json): what activation
// memory and FLOP estimates need beyond the parameters.
struct TransformerShape {
  int layers = 0;
  int hidden = 0;
  int heads = 0;
  int kv_heads = 0;
  int ffn = 0;
  int vocab = 0;
  int max_sequence = 0;
};

struct PlanModel {
  std::vector<PlanUnit> units;
  std::optional<TransformerShape> transformer;
};

}  // namespace fsdp::plan
