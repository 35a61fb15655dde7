#include <cmath>
#include <cstdint>
#include <string>

#include "base/error.hpp"
#include "memory/cuda/cuda_check.hpp"
#include "memory/cuda/cuda_kernels.hpp"
#include "memory/dtype_dispatch.hpp"
#include "memory/numeric.hpp"

namespace fsdp::cuda {
namespace {

using numeric::as_reduced;
using numeric::Compute;
using numeric::narrow;
using numeric::widen;

constexpr int kThreads = 256;

// Grid size for n elements: enough blocks to cover them, at most the launch's.
int grid_for(const Launch& l, std::size_t n) {
  const std::size_t needed = (n + kThreads - 1) / kThreads;
  return static_cast<int>(needed < static_cast<std::size_t>(l.blocks) ? (needed ? needed : 1)
                                                                      : l.blocks);
}

#define FSDP_GRID_STRIDE(i, n)                                                                   \
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)

template <class Dst, class Src>
__global__ void convert_kernel(Dst* __restrict__ dst, const Src* __restrict__ src, std::size_t n) {
  using C = Compute<Dst, Src>;
  FSDP_GRID_STRIDE(i, n) {
    dst[i] = narrow<Dst>(C(widen(src[i])));
  }
}

// Eight elements a thread through 16-byte-aligned packs: a float32 -> bfloat16 cast then reads two
// 16-byte words and writes one, instead of eight 4-byte reads and 2-byte writes (measured on an
// H100: 0.76 of a device-to-device copy's bandwidth scalar). The same element arithmetic as
// convert_kernel, so the same bits; the last n % 8 elements go through convert_kernel.
constexpr std::size_t kPack = 8;
template <class T>
struct alignas(16) Pack {
  T v[kPack];
};

template <class Dst, class Src>
__global__ void convert_packed_kernel(Pack<Dst>* __restrict__ dst,
                                      const Pack<Src>* __restrict__ src, std::size_t packs) {
  using C = Compute<Dst, Src>;
  FSDP_GRID_STRIDE(i, packs) {
    const Pack<Src> in = src[i];
    Pack<Dst> out;
#pragma unroll
    for (std::size_t k = 0; k < kPack; ++k) out.v[k] = narrow<Dst>(C(widen(in.v[k])));
    dst[i] = out;
  }
}

// The host's single_scaled (memory/host/host_kernels.cpp), element by element: division, not
// multiplication by 1/divisor.
template <class Out, class In>
__global__ void scaled_kernel(Out* __restrict__ out, const In* __restrict__ x, std::size_t n,
                              double divisor_d, bool accumulate) {
  using C = Compute<Out, In>;
  const C divisor = static_cast<C>(divisor_d);
  const bool divide = divisor != C(1);
  FSDP_GRID_STRIDE(i, n) {
    const C v = as_reduced<Out, In>(divide ? C(widen(x[i])) / divisor : C(widen(x[i])));
    out[i] = accumulate ? narrow<Out>(widen(out[i]) + v) : narrow<Out>(v);
  }
}

template <class T>
__global__ void sgd_kernel(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ buf,
                           std::size_t n, numeric::SgdCoefficients<T> c) {
  FSDP_GRID_STRIDE(i, n) {
    T unused = T(0);
    numeric::sgd_update(p[i], g[i], buf ? &buf[i] : &unused, c);
  }
}

// `x` (max_exp_avg_sq) is read and written only with c.amsgrad.
template <class T>
__global__ void adamw_kernel(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ m,
                             T* __restrict__ v, T* __restrict__ x, std::size_t n,
                             numeric::AdamWCoefficients<T> c) {
  FSDP_GRID_STRIDE(i, n) {
    T xi = c.amsgrad ? x[i] : T(0);
    numeric::adamw_update(p[i], g[i], m[i], v[i], xi, c);
    if (c.amsgrad) x[i] = xi;
  }
}

// Eight elements a thread through 16-byte-aligned packs, as convert_packed_kernel: the same
// adamw_update per element, so the same bits (measured on an H200: 0.76-0.80 of the copy
// bandwidth element by element).
template <class T>
__global__ void adamw_packed_kernel(Pack<T>* __restrict__ p, const Pack<T>* __restrict__ g,
                                    Pack<T>* __restrict__ m, Pack<T>* __restrict__ v,
                                    Pack<T>* __restrict__ x, std::size_t packs,
                                    numeric::AdamWCoefficients<T> c) {
  FSDP_GRID_STRIDE(i, packs) {
    Pack<T> pp = p[i], mm = m[i], vv = v[i], xx = {};
    const Pack<T> gg = g[i];
    if (c.amsgrad) xx = x[i];
#pragma unroll
    for (std::size_t k = 0; k < kPack; ++k)
      numeric::adamw_update(pp.v[k], gg.v[k], mm.v[k], vv.v[k], xx.v[k], c);
    p[i] = pp;
    m[i] = mm;
    v[i] = vv;
    if (c.amsgrad) x[i] = xx;
  }
}

bool aligned16(const void* a, const void* b, const void* c = nullptr, const void* d = nullptr,
               const void* e = nullptr) {
  return (reinterpret_cast<std::uintptr_t>(a) | reinterpret_cast<std::uintptr_t>(b) |
          reinterpret_cast<std::uintptr_t>(c) | reinterpret_cast<std::uintptr_t>(d) |
          reinterpret_cast<std::uintptr_t>(e)) %
             16 ==
         0;
}

// n elements: packed(packs) over the first n / kPack packs when every pointer is 16-byte aligned
// (the library's buffers are: doc/gpu.md), then tail(first, count) element by element over the
// rest (or over everything).
template <class Packed, class Tail>
void packs_then_tail(std::size_t n, bool aligned, Packed packed, Tail tail) {
  std::size_t done = 0;
  if (aligned && n >= kPack) {
    packed(n / kPack);
    done = n / kPack * kPack;
  }
  if (done < n) tail(done, n - done);
}

template <class T>
__global__ void scale_kernel(T* __restrict__ x, std::size_t n, T f) {
  FSDP_GRID_STRIDE(i, n) {
    x[i] = x[i] * f;
  }
}

// A fixed tree over the block's threads.
__device__ double block_max(double v) {
  __shared__ double lane[kThreads];
  lane[threadIdx.x] = v;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half)
      lane[threadIdx.x] = numeric::maximum(lane[threadIdx.x], lane[threadIdx.x + half]);
    __syncthreads();
  }
  return lane[0];
}

template <class T>
__global__ void max_blocks_kernel(const T* __restrict__ x, std::size_t n, double* maxima) {
  double acc = 0.0;
  FSDP_GRID_STRIDE(i, n) {
    acc = numeric::maximum(acc, fabs(static_cast<double>(x[i])));
  }
  const double r = block_max(acc);
  if (threadIdx.x == 0) maxima[blockIdx.x] = r;
}

__global__ void max_final_kernel(const double* maxima, int count, double* result) {
  double acc = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc = numeric::maximum(acc, maxima[i]);
  const double r = block_max(acc);
  if (threadIdx.x == 0) *result = r;
}

// Every thread adds its strided elements' parts as 64-bit integers (exact, whole numbers), then
// the block's threads add theirs into shared memory and the block's sums into its pair in `sums`.
template <class T>
__global__ void norm_fixed_kernel(const T* __restrict__ x, std::size_t n, double p, fixed::Scale sc,
                                  unsigned long long* sums) {
  __shared__ unsigned long long block[2];
  if (threadIdx.x == 0) block[0] = block[1] = 0;
  __syncthreads();
  long long high = 0, low = 0;
  FSDP_GRID_STRIDE(i, n) {
    double h, l;
    fixed::split(fixed::norm_term(fabs(static_cast<double>(x[i])), p) * sc.first * sc.second, h, l);
    high += __double2ll_rn(h);
    low += __double2ll_rn(l);
  }
  atomicAdd(&block[0], static_cast<unsigned long long>(high));
  atomicAdd(&block[1], static_cast<unsigned long long>(low));
  __syncthreads();
  if (threadIdx.x == 0) {
    atomicAdd(&sums[2 * blockIdx.x], block[0]);
    atomicAdd(&sums[2 * blockIdx.x + 1], block[1]);
  }
}

template <class T>
__global__ void nonfinite_kernel(const T* __restrict__ x, std::size_t n, unsigned* flag) {
  FSDP_GRID_STRIDE(i, n) {
    if (!isfinite(x[i])) *flag = 1u;  // every writer writes 1: no atomic needed
  }
}

void launched(const char* what) {
  check(cudaGetLastError(), what);
}

}  // namespace

void convert(const Launch& l, void* dst, DType dst_t, const void* src, DType src_t, std::size_t n) {
  if (n == 0) return;
  with_element_type(dst_t, [&](auto* d) {
    with_element_type(src_t, [&](auto* s) {
      using Dst = std::remove_pointer_t<decltype(d)>;
      using Src = std::remove_pointer_t<decltype(s)>;
      Dst* const out = static_cast<Dst*>(dst);
      const Src* const in = static_cast<const Src*>(src);
      packs_then_tail(
          n, aligned16(dst, src),
          [&](std::size_t packs) {
            convert_packed_kernel<<<grid_for(l, packs), kThreads, 0, l.stream>>>(
                reinterpret_cast<Pack<Dst>*>(out), reinterpret_cast<const Pack<Src>*>(in), packs);
          },
          [&](std::size_t first, std::size_t count) {
            convert_kernel<<<grid_for(l, count), kThreads, 0, l.stream>>>(out + first, in + first,
                                                                          count);
          });
    });
  });
  launched("convert kernel");
}

void scaled(const Launch& l, void* out, DType out_t, const void* x, DType x_t, std::size_t n,
            double divisor, Store store) {
  if (n == 0) return;
  with_element_type(out_t, [&](auto* o) {
    with_element_type(x_t, [&](auto* i) {
      using Out = std::remove_pointer_t<decltype(o)>;
      using In = std::remove_pointer_t<decltype(i)>;
      scaled_kernel<<<grid_for(l, n), kThreads, 0, l.stream>>>(static_cast<Out*>(out),
                                                               static_cast<const In*>(x), n,
                                                               divisor, store == Store::Accumulate);
    });
  });
  launched("scaled kernel");
}

void sgd_step(const Launch& l, void* param, const void* grad, void* momentum, std::size_t n,
              DType t, const SgdArgs& args) {
  if (n == 0) return;
  with_storage_type(t, "CUDA kernel", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    sgd_kernel<<<grid_for(l, n), kThreads, 0, l.stream>>>(
        static_cast<T*>(param), static_cast<const T*>(grad), static_cast<T*>(momentum), n,
        numeric::sgd_coefficients<T>(args));
  });
  launched("sgd kernel");
}

void adamw_step(const Launch& l, void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
                void* max_exp_avg_sq, std::size_t n, DType t, const AdamWArgs& args) {
  if (n == 0) return;
  with_storage_type(t, "CUDA kernel", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const auto c = numeric::adamw_coefficients<T>(args);
    T* const p = static_cast<T*>(param);
    const T* const g = static_cast<const T*>(grad);
    T* const m = static_cast<T*>(exp_avg);
    T* const v = static_cast<T*>(exp_avg_sq);
    T* const x = args.amsgrad ? static_cast<T*>(max_exp_avg_sq) : nullptr;
    packs_then_tail(
        n, aligned16(p, g, m, v, x),
        [&](std::size_t packs) {
          adamw_packed_kernel<<<grid_for(l, packs), kThreads, 0, l.stream>>>(
              reinterpret_cast<Pack<T>*>(p), reinterpret_cast<const Pack<T>*>(g),
              reinterpret_cast<Pack<T>*>(m), reinterpret_cast<Pack<T>*>(v),
              reinterpret_cast<Pack<T>*>(x), packs, c);
        },
        [&](std::size_t first, std::size_t count) {
          adamw_kernel<<<grid_for(l, count), kThreads, 0, l.stream>>>(
              p + first, g + first, m + first, v + first, x ? x + first : nullptr, count, c);
        });
  });
  launched("adamw kernel");
}

void scale(const Launch& l, void* x, std::size_t n, DType t, double factor) {
  if (n == 0) return;
  with_storage_type(t, "CUDA kernel", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    scale_kernel<<<grid_for(l, n), kThreads, 0, l.stream>>>(static_cast<T*>(x), n,
                                                            static_cast<T>(factor));
  });
  launched("scale kernel");
}

void largest_abs(const Launch& l, const void* x, std::size_t n, DType t, double* block_maxima,
                 double* result) {
  // Always l.blocks blocks (empty ones contribute 0).
  with_storage_type(t, "CUDA kernel", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    max_blocks_kernel<<<l.blocks, kThreads, 0, l.stream>>>(static_cast<const T*>(x), n,
                                                           block_maxima);
  });
  max_final_kernel<<<1, kThreads, 0, l.stream>>>(block_maxima, l.blocks, result);
  launched("max kernels");
}

void norm_fixed_sum(const Launch& l, const void* x, std::size_t n, DType t, double p,
                    fixed::Scale scale, unsigned long long* sums) {
  if (n == 0) return;
  with_storage_type(t, "CUDA kernel", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    norm_fixed_kernel<<<l.blocks, kThreads, 0, l.stream>>>(static_cast<const T*>(x), n, p, scale,
                                                           sums);
  });
  launched("fixed-point norm kernel");
}

void find_nonfinite(const Launch& l, const void* x, std::size_t n, DType t, unsigned* flag) {
  if (n == 0) return;
  with_storage_type(t, "CUDA kernel", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    nonfinite_kernel<<<grid_for(l, n), kThreads, 0, l.stream>>>(static_cast<const T*>(x), n, flag);
  });
  launched("non-finite check kernel");
}

}  // namespace fsdp::cuda
