#include "capi/hyperparams.hpp"

#include <string>

#include "base/error.hpp"
#include "capi/sized_struct.hpp"

namespace fsdp::capi {
namespace {

// A flag of the struct: 0 or 1, as the fields added since 0.10 are checked (nesterov, older,
// takes any nonzero value as 1).
bool read_flag(int value, const std::string& arg, const char* field) {
  if (value != 0 && value != 1)
    fail(Errc::InvalidArgument,
         arg + "." + field + " = " + std::to_string(value) + ": must be 0 or 1");
  return value == 1;
}

}  // namespace

HyperParams read_hyperparams(const fsdp_hyperparams_t* hp, OptimizerKind kind, const char* arg) {
  static const fsdp_hyperparams_t sgd = FSDP_SGD_DEFAULTS, adamw = FSDP_ADAMW_DEFAULTS;
  fsdp_hyperparams_t h = kind == OptimizerKind::AdamW ? adamw : sgd;
  if (hp) h = fsdp::capi::read_sized(*hp, h, arg, "FSDP_SGD_DEFAULTS or FSDP_ADAMW_DEFAULTS");
  HyperParams p;
  p.lr = h.lr, p.weight_decay = h.weight_decay, p.momentum = h.momentum;
  p.dampening = h.dampening, p.nesterov = h.nesterov != 0;
  p.beta1 = h.beta1, p.beta2 = h.beta2, p.eps = h.eps;
  p.amsgrad = read_flag(h.amsgrad, arg, "amsgrad");
  p.maximize = read_flag(h.maximize, arg, "maximize");
  fsdp::validate(p, kind, arg);
  return p;
}

fsdp_hyperparams_t to_struct(const HyperParams& p) {
  return {sizeof(fsdp_hyperparams_t),
          p.lr,
          p.weight_decay,
          p.momentum,
          p.dampening,
          p.nesterov,
          p.beta1,
          p.beta2,
          p.eps,
          p.amsgrad,
          p.maximize};
}

}  // namespace fsdp::capi
