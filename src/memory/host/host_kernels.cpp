#include "memory/host/host_kernels.hpp"

#include <cmath>
#include <type_traits>

#include "base/error.hpp"
#include "memory/dtype_dispatch.hpp"
#include "memory/host/kernel_isa.hpp"
#include "memory/numeric.hpp"

#if FSDP_HOST_KERNELS_AVX2
#include <immintrin.h>
#endif

namespace fsdp::host {
namespace {

using numeric::as_reduced;
using numeric::Compute;
using numeric::narrow;
using numeric::widen;

// Division, not multiplication by 1/W: the mean is the correctly rounded sum / W for every W.
// A power-of-two W is the exception: x * (1/W) is then exact, so it rounds the same real number
// as x / W and gives the same bits, several times faster (2, 4, 8, ... ranks).
template <class C>
struct Scale {
  C divisor, inverse;
  bool by_inverse;
  explicit Scale(double d) : divisor(static_cast<C>(d)), inverse(C(1) / static_cast<C>(d)) {
    int e = 0;
    by_inverse = std::frexp(d, &e) == 0.5 && static_cast<double>(inverse) * d == 1.0;
  }
};

// One loop per (store, divisor == 1, scaling) case so each vectorizes without a branch inside.
// The value stored is the reduce dtype's (In) one: as_reduced (memory/numeric.hpp).
template <class Out, class In, class C, class F>
void pair_loop(Out* __restrict out, const In* __restrict a, const In* __restrict b, std::size_t n,
               Store store, F scale) {
  const auto value = [&](std::size_t i) {
    return as_reduced<Out, In>(scale(as_reduced<Out, In>(C(widen(a[i])) + C(widen(b[i])))));
  };
  if (store == Store::Accumulate)
    for (std::size_t i = 0; i < n; ++i) out[i] = narrow<Out>(widen(out[i]) + value(i));
  else
    for (std::size_t i = 0; i < n; ++i) out[i] = narrow<Out>(value(i));
}

template <class Out, class In, class C, class F>
void single_loop(Out* __restrict out, const In* __restrict x, std::size_t n, Store store, F scale) {
  const auto value = [&](std::size_t i) { return as_reduced<Out, In>(scale(C(widen(x[i])))); };
  if (store == Store::Accumulate)
    for (std::size_t i = 0; i < n; ++i) out[i] = narrow<Out>(widen(out[i]) + value(i));
  else
    for (std::size_t i = 0; i < n; ++i) out[i] = narrow<Out>(value(i));
}

template <class Out, class In>
void pair_scaled(Out* __restrict out, const In* __restrict a, const In* __restrict b, std::size_t n,
                 double divisor_d, Store store) {
  using C = Compute<Out, In>;
  const Scale<C> s(divisor_d);
  if (s.divisor == C(1))
    pair_loop<Out, In, C>(out, a, b, n, store, [](C v) { return v; });
  else if (s.by_inverse)
    pair_loop<Out, In, C>(out, a, b, n, store, [inv = s.inverse](C v) { return v * inv; });
  else
    pair_loop<Out, In, C>(out, a, b, n, store, [d = s.divisor](C v) { return v / d; });
}

template <class Out, class In>
void single_scaled(Out* __restrict out, const In* __restrict x, std::size_t n, double divisor_d,
                   Store store) {
  using C = Compute<Out, In>;
  const Scale<C> s(divisor_d);
  if (s.divisor == C(1))
    single_loop<Out, In, C>(out, x, n, store, [](C v) { return v; });
  else if (s.by_inverse)
    single_loop<Out, In, C>(out, x, n, store, [inv = s.inverse](C v) { return v * inv; });
  else
    single_loop<Out, In, C>(out, x, n, store, [d = s.divisor](C v) { return v / d; });
}

template <class T>
void add(T* __restrict a, const T* __restrict b, std::size_t n) {
  using C = Compute<T, T>;
  for (std::size_t i = 0; i < n; ++i) a[i] = narrow<T>(C(widen(a[i])) + C(widen(b[i])));
}

template <class Dst, class Src>
void convert_typed(Dst* __restrict dst, const Src* __restrict src, std::size_t n) {
  using C = Compute<Dst, Src>;
  for (std::size_t i = 0; i < n; ++i) dst[i] = narrow<Dst>(C(widen(src[i])));
}

template <class T>
T* as(void* p) {
  return static_cast<T*>(p);
}
template <class T>
const T* as(const void* p) {
  return static_cast<const T*>(p);
}

// The entry points' bodies; each is compiled once per ISA below, with everything it calls
// inlined into it (flatten), so the loops vectorize for that ISA.
inline void add_into_body(void* a, const void* b, std::size_t n, DType t) {
  with_element_type(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    add(as<T>(a), as<T>(b), n);
  });
}

inline void add_pair_scaled_body(void* out, DType out_t, const void* a, const void* b, DType in_t,
                                 std::size_t n, double divisor, Store store) {
  with_element_type(out_t, [&](auto* out_tag) {
    with_element_type(in_t, [&](auto* in_tag) {
      using Out = std::remove_pointer_t<decltype(out_tag)>;
      using In = std::remove_pointer_t<decltype(in_tag)>;
      pair_scaled(as<Out>(out), as<In>(a), as<In>(b), n, divisor, store);
    });
  });
}

inline void scaled_body(void* out, DType out_t, const void* x, DType in_t, std::size_t n,
                        double divisor, Store store) {
  with_element_type(out_t, [&](auto* out_tag) {
    with_element_type(in_t, [&](auto* in_tag) {
      using Out = std::remove_pointer_t<decltype(out_tag)>;
      using In = std::remove_pointer_t<decltype(in_tag)>;
      single_scaled(as<Out>(out), as<In>(x), n, divisor, store);
    });
  });
}

inline void convert_body(void* dst, DType dst_t, const void* src, DType src_t, std::size_t n) {
  with_element_type(dst_t, [&](auto* dst_tag) {
    with_element_type(src_t, [&](auto* src_tag) {
      using Dst = std::remove_pointer_t<decltype(dst_tag)>;
      using Src = std::remove_pointer_t<decltype(src_tag)>;
      convert_typed(as<Dst>(dst), as<Src>(src), n);
    });
  });
}

#if FSDP_HOST_KERNELS_AVX2
// float32 -> float16 through F16C's vcvtps2ph, round to nearest even: the same bits as
// narrow<Float16> on all 2^32 inputs (NaNs, subnormals and ties included; checked exhaustively
// when this was written, and test_optimizer_kernels compares the AVX2 build's conversions with
// scalar loops). The integer narrowing ran at about 0.3 of this copy's memory bandwidth.
__attribute__((target("avx2,f16c"))) void f32_to_f16_hw(numeric::Float16* __restrict dst,
                                                        const float* __restrict src,
                                                        std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = narrow<numeric::Float16>(src[i]);
}
#define FSDP_F16_HW                                              \
  if (dst_t == DType::Float16 && src_t == DType::Float32) {      \
    f32_to_f16_hw(as<numeric::Float16>(dst), as<float>(src), n); \
    return;                                                      \
  }
#endif

// FAST: statements run first in the convert entry point (the AVX2 set's hardware narrowing).
#define FSDP_KERNEL_SET(ATTRIBUTES, NAME, FAST)                                                    \
  ATTRIBUTES void NAME##_add_into(void* a, const void* b, std::size_t n, DType t) {                \
    add_into_body(a, b, n, t);                                                                     \
  }                                                                                                \
  ATTRIBUTES void NAME##_add_pair_scaled(void* out, DType out_t, const void* a, const void* b,     \
                                         DType in_t, std::size_t n, double divisor, Store store) { \
    add_pair_scaled_body(out, out_t, a, b, in_t, n, divisor, store);                               \
  }                                                                                                \
  ATTRIBUTES void NAME##_scaled(void* out, DType out_t, const void* x, DType in_t, std::size_t n,  \
                                double divisor, Store store) {                                     \
    scaled_body(out, out_t, x, in_t, n, divisor, store);                                           \
  }                                                                                                \
  ATTRIBUTES void NAME##_convert(void* dst, DType dst_t, const void* src, DType src_t,             \
                                 std::size_t n) {                                                  \
    FAST convert_body(dst, dst_t, src, src_t, n);                                                  \
  }                                                                                                \
  const KernelSet NAME##_set = {#NAME, NAME##_add_into, NAME##_add_pair_scaled, NAME##_scaled,     \
                                NAME##_convert};

FSDP_KERNEL_SET(FSDP_BASELINE_KERNEL, baseline, )
#if FSDP_HOST_KERNELS_AVX2
FSDP_KERNEL_SET(FSDP_AVX2_KERNEL, avx2, FSDP_F16_HW)
#endif
#undef FSDP_KERNEL_SET

}  // namespace

const KernelSet& baseline_kernels() {
  return baseline_set;
}

const KernelSet* avx2_kernels() {
#if FSDP_HOST_KERNELS_AVX2
  return avx2_usable() ? &avx2_set : nullptr;
#else
  return nullptr;
#endif
}

const KernelSet& active_kernels() {
  static const KernelSet& set = avx2_kernels() ? *avx2_kernels() : baseline_set;
  return set;
}

void add_into(void* a, const void* b, std::size_t n, DType t) {
  active_kernels().add_into(a, b, n, t);
}

void add_pair_scaled(void* out, DType out_t, const void* a, const void* b, DType in_t,
                     std::size_t n, double divisor, Store store) {
  active_kernels().add_pair_scaled(out, out_t, a, b, in_t, n, divisor, store);
}

void scaled(void* out, DType out_t, const void* x, DType in_t, std::size_t n, double divisor,
            Store store) {
  active_kernels().scaled(out, out_t, x, in_t, n, divisor, store);
}

void convert(void* dst, DType dst_t, const void* src, DType src_t, std::size_t n) {
  active_kernels().convert(dst, dst_t, src, src_t, n);
}

}  // namespace fsdp::host
