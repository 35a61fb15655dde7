/* Reference optimizer updates for the tests: PyTorch's single-tensor SGD and AdamW, written here in
 * plain float32 in PyTorch's operation order, independently of the library. */
#ifndef FSDP_TEST_REF_OPTIM_H
#define FSDP_TEST_REF_OPTIM_H

#include <math.h>
#include <stddef.h>

/* torch.maximum: NaN if either is NaN, else the larger. */
static float ref_maximum(float a, float b) {
  if (isnan(a) || isnan(b)) return NAN;
  return b > a ? b : a;
}

/* One AdamW step t (1-based) of n elements: p, m, v updated in place from gradient g; with
 * `amsgrad`, vmax (max_exp_avg_sq) too, else vmax is not read (may be NULL); `maximize` negates
 * the gradient first. The scalars in double as Python computes them (bias_correction2 ** 0.5 is
 * pow, not sqrt), each rounded once to float; lerp_ and addcmul_ fused as PyTorch's vectorized
 * CPU kernels (AVX2, AVX-512) compute them, one rounding each (fmaf). */
static void ref_adamw_step_flags(float* p, float* m, float* v, float* vmax, const float* g,
                                 size_t n, int t, double lr, double wd, double b1, double b2,
                                 float eps, int amsgrad, int maximize) {
  const float decay = (float)(1.0 - lr * wd);
  const double bc1 = 1.0 - pow(b1, t), bc2 = pow(1.0 - pow(b2, t), 0.5);
  const float step = (float)(-(lr / bc1)), bc2f = (float)bc2;
  const float w = (float)(1.0 - b1), b2f = (float)b2, b2c = (float)(1.0 - b2);
  for (size_t e = 0; e < n; ++e) {
    const float ge = maximize ? -g[e] : g[e];
    p[e] = p[e] * decay;
    /* exp_avg.lerp_(grad, w): at::native::lerp_vec, two branches on |w| < 0.5 */
    m[e] = fabsf(w) < 0.5f ? fmaf(w, ge - m[e], m[e]) : fmaf(w - 1.0f, ge - m[e], ge);
    /* exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2): self + value * t1 * t2 */
    v[e] = fmaf(b2c * ge, ge, v[e] * b2f);
    float second = v[e];
    if (amsgrad) {
      vmax[e] = ref_maximum(vmax[e], v[e]);
      second = vmax[e];
    }
    const float denom = sqrtf(second) / bc2f + eps;
    /* param.addcdiv_(exp_avg, denom, value=-step_size): self + value * t1 / t2 */
    p[e] = p[e] + (step * m[e]) / denom;
  }
}

/* ref_adamw_step_flags without AMSGrad or maximize. */
static void ref_adamw_step(float* p, float* m, float* v, const float* g, size_t n, int t, double lr,
                           double wd, double b1, double b2, float eps) {
  ref_adamw_step_flags(p, m, v, NULL, g, n, t, lr, wd, b1, b2, eps, 0, 0);
}

/* ref_adamw_step as libfsdp computed it before 0.14 (a checkpoint such a version wrote holds these
 * values): PyTorch's operation order without fused multiply-adds, sqrt(1 - beta2^t), and the
 * step size applied to exp_avg / denom rather than exp_avg to the step size first. */
static void ref_adamw_step_before_0_14(float* p, float* m, float* v, const float* g, size_t n,
                                       int t, double lr, double wd, double b1, double b2,
                                       float eps) {
  const float decay = (float)(1.0 - lr * wd);
  const double bc1 = 1.0 - pow(b1, t), bc2 = sqrt(1.0 - pow(b2, t));
  const float step = (float)(-(lr / bc1)), bc2f = (float)bc2;
  const float b1c = (float)(1.0 - b1), b2f = (float)b2, b2c = (float)(1.0 - b2);
  for (size_t e = 0; e < n; ++e) {
    p[e] = p[e] * decay;
    m[e] = m[e] + b1c * (g[e] - m[e]);
    v[e] = v[e] * b2f + b2c * (g[e] * g[e]);
    const float denom = sqrtf(v[e]) / bc2f + eps;
    p[e] = p[e] + step * (m[e] / denom);
  }
}

/* One SGD step of n elements: p and the momentum buffer buf updated in place from gradient g;
 * `first`: the buffer starts as the gradient (PyTorch's momentum_buffer None); `maximize`
 * negates the gradient first. */
static void ref_sgd_step_flags(float* p, float* buf, const float* g, size_t n, int first, float lr,
                               float wd, float momentum, float dampening, int nesterov,
                               int maximize) {
  for (size_t e = 0; e < n; ++e) {
    float d = maximize ? -g[e] : g[e];
    if (wd != 0.0f) d = d + wd * p[e];
    if (momentum != 0.0f) {
      buf[e] = first ? d : momentum * buf[e] + (1.0f - dampening) * d;
      d = nesterov ? d + momentum * buf[e] : buf[e];
    }
    p[e] = p[e] + (-lr) * d;
  }
}

/* ref_sgd_step_flags without maximize. */
static void ref_sgd_step(float* p, float* buf, const float* g, size_t n, int first, float lr,
                         float wd, float momentum, float dampening, int nesterov) {
  ref_sgd_step_flags(p, buf, g, n, first, lr, wd, momentum, dampening, nesterov, 0);
}

#endif
