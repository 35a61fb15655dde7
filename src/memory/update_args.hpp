// The scalars of one optimizer update, as the element-wise kernels of every memory space take
// them (computed in double on the host, as PyTorch computes them in Python floats). No defaults
// of PyTorch's here: those are fsdp.h's FSDP_SGD_DEFAULTS and FSDP_ADAMW_DEFAULTS, and the
// optimizer sets every field from its group's hyperparameters.
#pragma once

namespace fsdp {

struct SgdArgs {
  double lr = 0.0, weight_decay = 0.0, momentum = 0.0, dampening = 0.0;
  bool nesterov = false;
  bool maximize = false;    // the gradient negated first
  bool first_step = false;  // the momentum buffer starts as the gradient
};

struct AdamWArgs {
  double lr = 0.0, weight_decay = 0.0, beta1 = 0.0, beta2 = 0.0, eps = 0.0;
  double bias_correction1 = 1.0;       // 1 - beta1^t
  double bias_correction2_sqrt = 1.0;  // (1 - beta2^t)^0.5, by pow as Python's ** 0.5
  bool amsgrad = false;                // max_exp_avg_sq kept, and the denominator taken from it
  bool maximize = false;               // the gradient negated first
};

}  // namespace fsdp
