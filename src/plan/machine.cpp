#include "plan/machine.hpp"

#include <cmath>
#include <string>

#include "base/error.hpp"

namespace fsdp::plan {
namespace {

constexpr std::size_t kGiB = std::size_t{1} << 30;

// Sources:
//  A100 SXM4: NVIDIA A100 Tensor Core GPU datasheet (2021): BF16 312 TFLOPS dense, FP32 19.5
//    TFLOPS, FP64 Tensor Core 19.5 TFLOPS, 40 GB HBM2 / 80 GB HBM2e, NVLink 600 GB/s (both
//    directions together: 300 GB/s each way).
//  H100 SXM5: NVIDIA H100 Tensor Core GPU datasheet (2023): BF16 989 TFLOPS dense (1,979 with
//    sparsity), FP32 67 TFLOPS, FP64 Tensor Core 67 TFLOPS, 80 GB HBM3, NVLink 900 GB/s (450
//    each way).
//  EFA: AWS p4d/p4de.24xlarge (8 A100) 400 Gbps per instance = 6.25 GB/s per GPU; p5.48xlarge
//    (8 H100) 3,200 Gbps per instance = 50 GB/s per GPU (Amazon EC2 P4 and P5 instance pages).
//  Host to device: PCIe Gen4 x16 on A100 (64 GB/s both ways: 32 each way), Gen5 x16 on H100
//    (128 GB/s: 64 each way), per the same datasheets.
//  RoCE: one 200 Gb/s ConnectX-6 port per GPU as in the NVIDIA DGX A100 datasheet = 25 GB/s.
// HBM is counted as nvidia-smi reports it (40 and 80 GiB). Assumed, not published: latency per
// collective call 10 us over NVLink, 20 us over RoCE, 30 us over EFA; a compute efficiency of 0.5.
struct Preset {
  const char* name;
  Machine m;
};
constexpr double kA100Bf16 = 312e12, kA100Fp32 = 19.5e12, kA100Fp64 = 19.5e12;
constexpr double kH100Bf16 = 989e12, kH100Fp32 = 67e12, kH100Fp64 = 67e12;
constexpr double kNvlink3 = 300e9, kNvlink4 = 450e9, kNvlinkLatency = 10e-6;
constexpr double kEfaP4 = 6.25e9, kEfaP5 = 50e9, kEfaLatency = 30e-6;
constexpr double kPcie4 = 32e9, kPcie5 = 64e9;
constexpr double kRoce = 25e9, kRoceLatency = 20e-6, kEfficiency = 0.5;
const Preset kPresets[] = {
    {"a100-40gb-efa",
     {kA100Bf16, kA100Fp32, kA100Fp64, 40 * kGiB, kNvlink3, kNvlinkLatency, kEfaP4, kEfaLatency,
      kPcie4, kEfficiency}},
    {"a100-80gb-efa",
     {kA100Bf16, kA100Fp32, kA100Fp64, 80 * kGiB, kNvlink3, kNvlinkLatency, kEfaP4, kEfaLatency,
      kPcie4, kEfficiency}},
    {"a100-40gb-roce",
     {kA100Bf16, kA100Fp32, kA100Fp64, 40 * kGiB, kNvlink3, kNvlinkLatency, kRoce, kRoceLatency,
      kPcie4, kEfficiency}},
    {"a100-80gb-roce",
     {kA100Bf16, kA100Fp32, kA100Fp64, 80 * kGiB, kNvlink3, kNvlinkLatency, kRoce, kRoceLatency,
      kPcie4, kEfficiency}},
    {"h100-80gb-efa",
     {kH100Bf16, kH100Fp32, kH100Fp64, 80 * kGiB, kNvlink4, kNvlinkLatency, kEfaP5, kEfaLatency,
      kPcie5, kEfficiency}},
};

}  // namespace

Machine machine_preset(const std::string& name) {
  std::string known;
  for (const Preset& p : kPresets) {
    if (name == p.name) return p.m;
    known += std::string(known.empty() ? "" : ", ") + p.name;
  }
  fail(Errc::InvalidArgument, "name = '" + name + "': not a machine preset (" + known + ")");
}

void check_machine(const Machine& m) {
  const struct {
    const char* field;
    double value;
    bool zero_ok;
  } fields[] = {{"peak_flops_16bit", m.peak_flops_16bit, false},
                {"peak_flops_32bit", m.peak_flops_32bit, false},
                {"peak_flops_64bit", m.peak_flops_64bit, false},
                {"hbm_bytes", static_cast<double>(m.hbm_bytes), false},
                {"intra_node_bandwidth", m.intra_node_bandwidth, false},
                {"intra_node_latency_s", m.intra_node_latency_s, true},
                {"inter_node_bandwidth", m.inter_node_bandwidth, false},
                {"inter_node_latency_s", m.inter_node_latency_s, true},
                {"host_device_bandwidth", m.host_device_bandwidth, false},
                {"compute_efficiency", m.compute_efficiency, false}};
  for (const auto& f : fields)
    if (!std::isfinite(f.value) || f.value < 0 || (f.value == 0 && !f.zero_ok))
      fail(Errc::InvalidArgument,
           std::string("machine->") + f.field + " = " + std::to_string(f.value) +
               (f.zero_ok ? ": must be finite and >= 0" : ": must be finite and > 0"));
  if (m.compute_efficiency > 1)
    fail(Errc::InvalidArgument, "machine->compute_efficiency = " +
                                    std::to_string(m.compute_efficiency) + ": must be at most 1");
}

double peak_flops(const Machine& m, DType param) {
  switch (dtype_size(param)) {
    case 8: return m.peak_flops_64bit;
    case 4: return m.peak_flops_32bit;
    default: return m.peak_flops_16bit;
  }
}

}  // namespace fsdp::plan
