// A hyperparameter group's values (HyperParams) and the one table that lists them: each field's
// PyTorch name (fsdp_hyperparams_t's field name), where it is in HyperParams, the kinds whose
// update reads it, and the version that added it. What lists hyperparameters iterates the table:
// the fingerprint ranks agree on, each kind's list (fsdp_optimizer_hyperparam_name), the
// checkpoint's group attributes (checkpoint/schema.cpp). The C struct's mapping is capi's
// (capi/hyperparams.cpp), the one place that reads and writes fsdp_hyperparams_t.
#pragma once

#include <cstdint>
#include <vector>

namespace fsdp {

enum class OptimizerKind : int { Sgd = 0, AdamW = 1 };

// One group's hyperparameters. The kinds' defaults are not here: fsdp.h's FSDP_SGD_DEFAULTS and
// FSDP_ADAMW_DEFAULTS state them, once, and the C API starts every caller's struct from them.
struct HyperParams {
  double lr = 0.0, weight_decay = 0.0, momentum = 0.0, dampening = 0.0;
  bool nesterov = false;
  double beta1 = 0.0, beta2 = 0.0, eps = 0.0;
  bool amsgrad = false;   // AdamW only
  bool maximize = false;  // either kind
  uint64_t fingerprint() const;
};

// One field of HyperParams: a number (`real`) or a flag (`flag`), the other nullptr.
struct HyperParamField {
  const char* name;
  double HyperParams::*real;
  bool HyperParams::*flag;
  bool sgd, adamw;    // whether each kind's update reads it
  const char* since;  // the libfsdp version that added it; nullptr: the first optimizers had it
  bool read_by(OptimizerKind k) const { return k == OptimizerKind::AdamW ? adamw : sgd; }
};

// Every field, in fsdp_hyperparams_t's order.
const std::vector<HyperParamField>& hyperparam_fields();

}  // namespace fsdp
