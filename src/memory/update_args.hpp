// The scalars of one optimizer update, as the element-wise kernels of every memory space take
// them (computed in double on the host, as PyTorch computes them in Python floats).
#pragma once

namespace fsdp {

struct SgdArgs {
  double lr = 0.01, weight_decay = 0.0, momentum = 0.0, dampening = 0.0;
  bool nesterov = false;
  bool first_step = false;  // the momentum buffer starts as the gradient
};

struct AdamWArgs {
  double lr = 1e-3, weight_decay = 1e-2, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double bias_correction1 = 1.0;       // 1 - beta1^t
  double bias_correction2_sqrt = 1.0;  // sqrt(1 - beta2^t)
};

}  // namespace fsdp
