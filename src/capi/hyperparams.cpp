#include "capi/hyperparams.hpp"

#include <string>

#include "base/error.hpp"
#include "capi/sized_struct.hpp"

namespace fsdp::capi {
namespace {

// A field of the struct as HyperParams holds it: a number as it is; a flag 0 or 1 (those added
// since 0.10 are checked; nesterov, older, takes any nonzero value as 1).
double read_field(double value, const std::string&, const char*, const char*) {
  return value;
}
bool read_field(int value, const std::string& arg, const char* field, const char* since) {
  if (since && value != 0 && value != 1)
    fail(Errc::InvalidArgument,
         arg + "." + field + " = " + std::to_string(value) + ": must be 0 or 1");
  return value != 0;
}

}  // namespace

HyperParams read_hyperparams(const fsdp_hyperparams_t* hp, OptimizerKind kind, const char* arg) {
  static const fsdp_hyperparams_t sgd = FSDP_SGD_DEFAULTS, adamw = FSDP_ADAMW_DEFAULTS;
  fsdp_hyperparams_t h = kind == OptimizerKind::AdamW ? adamw : sgd;
  if (hp) h = fsdp::capi::read_sized(*hp, h, arg, "FSDP_SGD_DEFAULTS or FSDP_ADAMW_DEFAULTS");
  HyperParams p;
#define FSDP_HYPERPARAM_READ(name, type, sgd, adamw, since) \
  p.name = read_field(h.name, arg, #name, since);
  FSDP_HYPERPARAMS(FSDP_HYPERPARAM_READ)
#undef FSDP_HYPERPARAM_READ
  fsdp::validate(p, kind, arg);
  return p;
}

fsdp_hyperparams_t to_struct(const HyperParams& p) {
  fsdp_hyperparams_t h{};
  h.size = sizeof(fsdp_hyperparams_t);
#define FSDP_HYPERPARAM_WRITE(name, type, sgd, adamw, since) h.name = p.name;
  FSDP_HYPERPARAMS(FSDP_HYPERPARAM_WRITE)
#undef FSDP_HYPERPARAM_WRITE
  return h;
}

}  // namespace fsdp::capi
