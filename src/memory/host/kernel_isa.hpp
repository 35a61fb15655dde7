// The instruction sets the host kernels (host_kernels.cpp, optimizer_kernels.cpp) are compiled
// for: the target's baseline and, on x86-64 with GCC or Clang, AVX2 (with F16C and FMA) too,
// picked at first use when the CPU has all three. Each entry point's body is compiled once per
// set with everything it calls inlined into it (flatten), so its loops vectorize for that set.
// The results are the same bits (host_kernels.hpp says why). FMA serves only the fused
// multiply-adds numeric.hpp asks for by name (fused_multiply_add), which the baseline gets,
// rounded alike, from libm's fma: nothing is contracted (-ffp-contract=off).
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#define FSDP_HOST_KERNELS_AVX2 1
#define FSDP_AVX2_KERNEL __attribute__((target("avx2,f16c,fma"), flatten))
#else
#define FSDP_HOST_KERNELS_AVX2 0
#endif
#define FSDP_BASELINE_KERNEL __attribute__((flatten))

namespace fsdp::host {

// Whether the AVX2 variants exist and this CPU can run them (F16C and FMA too: the AVX2 set
// narrows float32 to float16 with the one and computes AdamW's fused multiply-adds with the
// other; every CPU with AVX2 has both).
inline bool avx2_usable() {
#if FSDP_HOST_KERNELS_AVX2
  // F16C and FMA through cpuid (leaf 1, ECX bits 29 and 12): clang 14's __builtin_cpu_supports
  // has no "f16c".
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool leaf1 = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0;
  const bool f16c = leaf1 && (ecx & bit_F16C) != 0, fma = leaf1 && (ecx & bit_FMA) != 0;
  return __builtin_cpu_supports("avx2") && f16c && fma;
#else
  return false;
#endif
}

}  // namespace fsdp::host
