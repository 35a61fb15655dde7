// The host arithmetic kernels (src/memory/host: optimizer updates, norms, the finiteness check,
// scale, casts, scaled and accumulating stores), one core, each against the memory-bandwidth
// ceiling of its own bytes measured in the same run: a loop over the same arrays, read and
// written the same way (the same streams, the same element sizes), with an addition or a shift
// where the kernel computes. Throughput is the bytes read plus the bytes written per second; the
// ratio is the kernel's throughput over its ceiling's (1: the kernel runs at memory speed).
// Warm buffers (each timed once untimed first), kernel and ceiling alternating, medians.
//
// usage: bench_kernels [--out FILE.json] [--reps N] [--log2 A,B,...]  (default 20,24: 2^20 and
// 2^24 elements)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "memory/host/host_kernels.hpp"
#include "memory/host/optimizer_kernels.hpp"

using namespace fsdp;

namespace {

double now() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// A 64-byte aligned array of n elements of `bytes` each, every element `fill`'s low bytes.
struct Buffer {
  void* p = nullptr;
  Buffer(std::size_t n, std::size_t bytes, double value) {
    p = std::aligned_alloc(64, (n * bytes + 63) / 64 * 64 + 64);
    if (!p) {
      std::fprintf(stderr, "out of memory\n");
      std::exit(1);
    }
    for (std::size_t i = 0; i < n; ++i) {
      unsigned char* at = static_cast<unsigned char*>(p) + i * bytes;
      const double v = value * (1.0 + 1e-3 * static_cast<double>(i % 97));
      if (bytes == 8) {
        std::memcpy(at, &v, 8);
      } else {
        const float f = static_cast<float>(v);
        uint32_t u;
        std::memcpy(&u, &f, 4);
        if (bytes == 4) std::memcpy(at, &u, 4);
        const uint16_t h = static_cast<uint16_t>(u >> 16);  // bfloat16 bits (a float16 too)
        if (bytes == 2) std::memcpy(at, &h, 2);
      }
    }
  }
  ~Buffer() { std::free(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

// ---- Ceilings: the kernels' streams, nothing computed but an addition or a shift ----
// Built for AVX2 too where the kernels are (picked at load time), so both use the same vectors.
// Each ceiling is a plain function, one per element type it is used with: clang (14) has no
// target_clones on function templates; a template body is inlined into each clone.
#if defined(__x86_64__) && defined(__GNUC__) && defined(__GLIBC__)  // ifunc
#define CEILING __attribute__((target_clones("avx2", "default")))
#else
#define CEILING
#endif

// rmwK_readJ: K arrays read and written, J read only (AdamW's: p, m, v and g).
template <class T>
inline __attribute__((always_inline)) void rmw3_read1_body(T* __restrict a, T* __restrict b,
                                                           T* __restrict c, const T* __restrict g,
                                                           std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = a[i] + g[i];
    b[i] = b[i] + g[i];
    c[i] = c[i] + g[i];
  }
}
CEILING void rmw3_read1(float* __restrict a, float* __restrict b, float* __restrict c,
                        const float* __restrict g, std::size_t n) {
  rmw3_read1_body(a, b, c, g, n);
}
CEILING void rmw3_read1(double* __restrict a, double* __restrict b, double* __restrict c,
                        const double* __restrict g, std::size_t n) {
  rmw3_read1_body(a, b, c, g, n);
}
CEILING void rmw2_read1(float* __restrict a, float* __restrict b, const float* __restrict g,
                        std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = a[i] + g[i];
    b[i] = b[i] + g[i];
  }
}
CEILING void rmw1_read1(float* __restrict a, const float* __restrict g, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) a[i] = a[i] + g[i];
}
CEILING void rmw1(float* __restrict a, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) a[i] = a[i] + 1.0f;
}
// One read stream, reduced (an OR of the bits: vectorizes and is exact in any order).
CEILING uint32_t read1(const uint32_t* __restrict a, std::size_t n) {
  uint32_t r = 0;
  for (std::size_t i = 0; i < n; ++i) r |= a[i];
  return r;
}
CEILING void narrow_bits(uint16_t* __restrict d, const uint32_t* __restrict s, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) d[i] = static_cast<uint16_t>(s[i] >> 16);
}
CEILING void widen_bits(uint32_t* __restrict d, const uint16_t* __restrict s, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) d[i] = static_cast<uint32_t>(s[i]) << 16;
}
CEILING void write1_read2(float* __restrict d, const float* __restrict a, const float* __restrict b,
                          std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) d[i] = a[i] + b[i];
}
CEILING void rmw1_read1_bits16(uint32_t* __restrict d, const uint16_t* __restrict s,
                               std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) d[i] = d[i] + (static_cast<uint32_t>(s[i]) << 16);
}

volatile uint32_t sink;

struct Row {
  std::string kernel, dtype;
  std::size_t n, bytes;
  double kernel_s, ceiling_s;
};

// Times kernel and ceiling alternately, `reps` each after one untimed run of each.
Row measure(const char* kernel, const char* dtype, std::size_t n, std::size_t bytes_per_element,
            int reps, const std::function<void()>& run, const std::function<void()>& ceiling) {
  run();
  ceiling();
  std::vector<double> tk, tc;
  for (int r = 0; r < reps; ++r) {
    const bool kernel_first = r % 2 == 0;
    for (int k = 0; k < 2; ++k) {
      const bool is_kernel = (k == 0) == kernel_first;
      const double t0 = now();
      (is_kernel ? run : ceiling)();
      (is_kernel ? tk : tc).push_back(now() - t0);
    }
  }
  return {kernel, dtype, n, n * bytes_per_element, median(tk), median(tc)};
}

// AdamW: reads p, g, m, v; writes p, m, v.
template <class T>
Row bench_adamw(std::size_t n, int reps, DType t, const char* name) {
  Buffer p(n, sizeof(T), 1.0), g(n, sizeof(T), 1e-3), m(n, sizeof(T), 1e-4), v(n, sizeof(T), 1e-6);
  AdamWArgs a;
  a.lr = 1e-3, a.weight_decay = 1e-2, a.beta1 = 0.9, a.beta2 = 0.999, a.eps = 1e-8;
  a.bias_correction1 = 1 - 0.9 * 0.9, a.bias_correction2_sqrt = std::sqrt(1 - 0.999 * 0.999);
  return measure(
      "adamw", name, n, 7 * sizeof(T), reps,
      [&] { host::adamw_step(p.p, g.p, m.p, v.p, nullptr, n, t, a); },
      [&] { rmw3_read1(p.as<T>(), m.as<T>(), v.as<T>(), g.as<T>(), n); });
}

void bench_size(std::size_t n, int reps, std::vector<Row>& rows) {
  rows.push_back(bench_adamw<float>(n, reps, DType::Float32, "float32"));
  rows.push_back(bench_adamw<double>(n, reps, DType::Float64, "float64"));
  {  // SGD, momentum, Nesterov, weight decay: reads p, g, buf; writes p, buf.
    Buffer p(n, 4, 1.0), g(n, 4, 1e-3), b(n, 4, 1e-4);
    SgdArgs a;
    a.lr = 1e-3, a.weight_decay = 1e-4, a.momentum = 0.9, a.nesterov = true;
    rows.push_back(measure(
        "sgd (momentum, nesterov, decay)", "float32", n, 20, reps,
        [&] { host::sgd_step(p.p, g.p, b.p, n, DType::Float32, a); },
        [&] { rmw2_read1(p.as<float>(), b.as<float>(), g.as<float>(), n); }));
  }
  {  // Norms and the finiteness check: read x.
    Buffer x(n, 4, 1e-2);
    double r = 0;
    // p = 2 as clip_grad_norm computes it: the largest |x|, then the fixed-point sum (two passes
    // over x, against one read of it).
    rows.push_back(measure(
        "norm p=2 (largest, fixed-point sum)", "float32", n, 4, reps,
        [&] {
          const double m = host::largest_abs(x.p, n, DType::Float32);
          int e = 0;
          std::frexp(m * m, &e);
          r += static_cast<double>(
              host::norm_fixed_sum(x.p, n, DType::Float32, 2.0, fixed::scale_for(e + 1)));
        },
        [&] { sink = read1(x.as<uint32_t>(), n); }));
    rows.push_back(measure(
        "norm p=inf (largest |x|)", "float32", n, 4, reps,
        [&] { r += host::largest_abs(x.p, n, DType::Float32); },
        [&] { sink = read1(x.as<uint32_t>(), n); }));
    rows.push_back(measure(
        "all_finite", "float32", n, 4, reps, [&] { r += host::all_finite(x.p, n, DType::Float32); },
        [&] { sink = read1(x.as<uint32_t>(), n); }));
    sink = static_cast<uint32_t>(r);
  }
  {  // scale: x read and written.
    Buffer x(n, 4, 1e-2);
    rows.push_back(measure(
        "scale", "float32", n, 8, reps, [&] { host::scale(x.p, n, DType::Float32, 0.999); },
        [&] { rmw1(x.as<float>(), n); }));
  }
  {  // Casts: read one dtype, write the other.
    Buffer f(n, 4, 1e-2), h(n, 2, 1e-2);
    for (const DType t : {DType::BFloat16, DType::Float16}) {
      const std::string to = std::string("float32 -> ") + dtype_name(t);
      const std::string from = std::string(dtype_name(t)) + " -> float32";
      rows.push_back(measure(
          "convert", to.c_str(), n, 6, reps, [&] { host::convert(h.p, t, f.p, DType::Float32, n); },
          [&] { narrow_bits(h.as<uint16_t>(), f.as<uint32_t>(), n); }));
      rows.push_back(measure(
          "convert", from.c_str(), n, 6, reps,
          [&] { host::convert(f.p, DType::Float32, h.p, t, n); },
          [&] { widen_bits(f.as<uint32_t>(), h.as<uint16_t>(), n); }));
    }
  }
  {  // The reductions' epilogues: out (+)= x / 3, out = (a + b) / 3.
    Buffer out(n, 4, 1e-2), x(n, 4, 1e-3), y(n, 4, 1e-3), h(n, 2, 1e-3);
    rows.push_back(measure(
        "scaled accumulate /3", "float32 += float32", n, 12, reps,
        [&] {
          host::scaled(out.p, DType::Float32, x.p, DType::Float32, n, 3.0, Store::Accumulate);
        },
        [&] { rmw1_read1(out.as<float>(), x.as<float>(), n); }));
    rows.push_back(measure(
        "scaled accumulate /3", "float32 += bfloat16", n, 10, reps,
        [&] {
          host::scaled(out.p, DType::Float32, h.p, DType::BFloat16, n, 3.0, Store::Accumulate);
        },
        [&] { rmw1_read1_bits16(out.as<uint32_t>(), h.as<uint16_t>(), n); }));
    rows.push_back(measure(
        "add_pair_scaled /3", "float32", n, 12, reps,
        [&] {
          host::add_pair_scaled(out.p, DType::Float32, x.p, y.p, DType::Float32, n, 3.0,
                                Store::Assign);
        },
        [&] { write1_read2(out.as<float>(), x.as<float>(), y.as<float>(), n); }));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const char* out_path = nullptr;
  int reps = 15;
  std::vector<int> log2s = {20, 24};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--out")) out_path = argv[i + 1];
    if (!std::strcmp(argv[i], "--reps")) reps = std::max(1, std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--log2")) {
      log2s.clear();
      for (const char* s = argv[i + 1]; *s;) {
        char* end;
        log2s.push_back(static_cast<int>(std::strtol(s, &end, 10)));
        s = *end ? end + 1 : end;
      }
    }
  }
  std::vector<Row> rows;
  for (const int l : log2s) bench_size(std::size_t(1) << l, reps, rows);

  std::printf("### Host kernels, one core (medians of %d; instruction set: %s)\n\n", reps,
              host::active_kernels().name);
  std::printf("| kernel | dtype | elements | MiB moved | ms | GB/s | ceiling GB/s | ratio |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|\n");
  for (const Row& r : rows)
    std::printf("| %s | %s | 2^%d | %.1f | %.3f | %.2f | %.2f | %.2f |\n", r.kernel.c_str(),
                r.dtype.c_str(), static_cast<int>(std::log2(static_cast<double>(r.n))),
                static_cast<double>(r.bytes) / (1 << 20), r.kernel_s * 1e3,
                r.bytes / r.kernel_s / 1e9, r.bytes / r.ceiling_s / 1e9, r.ceiling_s / r.kernel_s);
  if (out_path) {
    FILE* f = std::fopen(out_path, "w");
    if (!f) {
      std::perror(out_path);
      return 1;
    }
    std::fprintf(f, "{\"reps\": %d, \"isa\": \"%s\", \"results\": [", reps,
                 host::active_kernels().name);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::fprintf(
          f,
          "%s\n {\"kernel\": \"%s\", \"dtype\": \"%s\", \"elements\": %zu, \"bytes\": %zu, "
          "\"kernel_s\": %.9f, \"ceiling_s\": %.9f, \"kernel_gbs\": %.4f, "
          "\"ceiling_gbs\": %.4f, \"ratio\": %.4f}",
          i ? "," : "", r.kernel.c_str(), r.dtype.c_str(), r.n, r.bytes, r.kernel_s, r.ceiling_s,
          r.bytes / r.kernel_s / 1e9, r.bytes / r.ceiling_s / 1e9, r.ceiling_s / r.kernel_s);
    }
    std::fprintf(f, "\n]}\n");
    std::fclose(f);
  }
  return 0;
}
