// What a context is created with (fsdp_config_t, then the FSDP_* variables that override it),
// compared across ranks when the context is created.
#pragma once

#include <cstdint>

#include "core/memory_and_transport.hpp"
#include "core/precision.hpp"
#include "core/process_groups.hpp"
#include "transport/transport_options.hpp"

namespace fsdp {

enum class GradReduction : int { Mean = 0, Sum = 1 };

// PyTorch's default for its process groups: long enough for any legitimate collective or
// checkpoint, short of an allocation's length.
constexpr double kDefaultTimeoutSeconds = 1800.0;

struct ContextOptions {
  Strategy strategy = Strategy::FullShard;
  int sharding_factor = 0;  // 0: the strategy's default
  GradReduction grad_reduction = GradReduction::Mean;
  PrecisionRequest precision;  // every unit's, unless the unit asks otherwise
  int max_unsharded = 2;       // rate limiter: units unsharded, gathering or reducing at once
  MpiTransportOptions transport;
  PlacementRequest placement;
  bool debug_collectives = false;             // compare every collective call across ranks first
  double timeout_s = kDefaultTimeoutSeconds;  // the watchdog's; <= 0: none
  bool timeout_abort = false;  // the watchdog aborts the job instead of returning an error
  // HFSDP: with hybrid sharding, gradients, optimizer state and the update on 1/(F*N) of each unit.
  bool hfsdp = false;
  // hpZ: a unit resharded after forward keeps a node-local partition for the next unshard.
  bool hpz = false;

  uint64_t fingerprint() const;
};

// What HFSDP and hpZ refuse whatever the ranks (fsdp_init, and the planner for every job it
// tries): HFSDP without hybrid sharding (InvalidArgument) or with CPU offload (Unsupported), hpZ
// without sharding (InvalidArgument); each names cfg->hfsdp or cfg->hpz.
void check_option_combinations(const ContextOptions& options);

// Reads FSDP_REDUCE_SCATTER_ALGORITHM (auto|ring|mpi), FSDP_RING_MIN_BLOCK_BYTES,
// FSDP_RING_PIECE_BYTES, FSDP_TRANSPORT (auto|mpi|shm|nccl), FSDP_DEBUG_COLLECTIVES (0|1),
// FSDP_TIMEOUT (seconds) and FSDP_ON_TIMEOUT (error|abort). Throws InvalidArgument naming the
// variable when a value is not understood.
void apply_environment(ContextOptions& options);

}  // namespace fsdp
