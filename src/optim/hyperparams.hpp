// A hyperparameter group's values (HyperParams) and the one table that lists them,
// FSDP_HYPERPARAMS: each field's PyTorch name (also fsdp_hyperparams_t's field name, in that
// struct's order), its type, the kinds whose update reads it, and the version that added it. The
// struct's members, the field list (hyperparam_fields: the fingerprint ranks agree on, each kind's
// list for fsdp_optimizer_hyperparam_name, the checkpoint's group attributes in
// checkpoint/schema.cpp) and the C struct's mapping both ways (capi/hyperparams.cpp) are all
// expanded from it. Adding a hyperparameter is a row here, its field in fsdp.h's struct (the ABI),
// and the kernel that reads it (plus validate()'s rule for its range, if it has one).
#pragma once

#include <cstdint>
#include <vector>

namespace fsdp {

enum class OptimizerKind : int { Sgd = 0, AdamW = 1 };

// X(name, type, read by SGD, read by AdamW, version that added it; nullptr: the first optimizers
// had it). A bool is an int 0/1 in the C struct (those added since 0.10 refuse other values).
#define FSDP_HYPERPARAMS(X)                    \
  X(lr, double, true, true, nullptr)           \
  X(weight_decay, double, true, true, nullptr) \
  X(momentum, double, true, false, nullptr)    \
  X(dampening, double, true, false, nullptr)   \
  X(nesterov, bool, true, false, nullptr)      \
  X(beta1, double, false, true, nullptr)       \
  X(beta2, double, false, true, nullptr)       \
  X(eps, double, false, true, nullptr)         \
  X(amsgrad, bool, false, true, "0.10")        \
  X(maximize, bool, true, true, "0.10")

// One group's hyperparameters, zero-initialized. The kinds' defaults are not here: fsdp.h's
// FSDP_SGD_DEFAULTS and FSDP_ADAMW_DEFAULTS state them, once, and the C API starts every caller's
// struct from them.
struct HyperParams {
#define FSDP_HYPERPARAM_MEMBER(name, type, sgd, adamw, since) type name{};
  FSDP_HYPERPARAMS(FSDP_HYPERPARAM_MEMBER)
#undef FSDP_HYPERPARAM_MEMBER
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
