// The machine a job runs on, as the step-time model (plan/step_time.hpp) needs it: peak
// arithmetic per dtype, device memory, and the bandwidth and latency inside a node and between
// nodes; and the presets of doc/planning-model.md, each figure from the vendor's datasheet (cited
// in machine.cpp) except the latencies and the efficiency, which are stated assumptions.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "base/dtype.hpp"

namespace fsdp::plan {

struct Machine {
  double peak_flops_16bit = 0;       // dense bfloat16/float16 FLOP/s per GPU
  double peak_flops_32bit = 0;       // float32 FLOP/s per GPU
  double peak_flops_64bit = 0;       // float64 FLOP/s per GPU
  std::size_t hbm_bytes = 0;         // device memory per GPU
  double intra_node_bandwidth = 0;   // bytes/s one GPU sends to another of its node
  double intra_node_latency_s = 0;   // per collective call inside a node
  double inter_node_bandwidth = 0;   // bytes/s one GPU sends across nodes (its share of the NICs)
  double inter_node_latency_s = 0;   // per collective call across nodes
  double host_device_bandwidth = 0;  // bytes/s each way between host and device (CPU offload)
  double compute_efficiency = 0;     // the fraction of peak the computation reaches, (0, 1]
};

// Throws InvalidArgument naming the preset (and listing the known ones) for an unknown name.
Machine machine_preset(const std::string& name);

// Throws InvalidArgument naming the field ("machine->...") of a value that is not finite and
// positive (latencies may be 0; the efficiency is at most 1).
void check_machine(const Machine& m);

// The peak for computing in `param`.
double peak_flops(const Machine& m, DType param);

}  // namespace fsdp::plan
