#include "core/context_options.hpp"

#include <cstdlib>
#include <cstring>
#include <string>

#include "base/environment.hpp"
#include "base/error.hpp"
#include "base/fingerprint.hpp"

namespace fsdp {

uint64_t ContextOptions::fingerprint() const {
  Fingerprint f;
  f.add(static_cast<uint64_t>(strategy));
  f.add(static_cast<uint64_t>(sharding_factor));
  f.add(static_cast<uint64_t>(grad_reduction));
  f.add(precision.param ? static_cast<uint64_t>(*precision.param) : ~uint64_t(0));
  f.add(precision.reduce ? static_cast<uint64_t>(*precision.reduce) : ~uint64_t(0));
  f.add(static_cast<uint64_t>(max_unsharded));
  f.add(static_cast<uint64_t>(transport.algorithm));
  f.add(static_cast<uint64_t>(transport.ring_min_block_bytes));
  f.add(static_cast<uint64_t>(transport.ring_piece_bytes));
  // Not the device: ranks may name their own GPUs.
  f.add(static_cast<uint64_t>(placement.memory));
  f.add(static_cast<uint64_t>(placement.cpu_offload));
  f.add(static_cast<uint64_t>(placement.transport));
  // Debug mode's exchange and the watchdog's limits must be the same everywhere.
  f.add(static_cast<uint64_t>(debug_collectives));
  uint64_t timeout_bits = 0;
  std::memcpy(&timeout_bits, &timeout_s, sizeof timeout_bits);
  f.add(timeout_bits);
  f.add(static_cast<uint64_t>(timeout_abort));
  f.add(static_cast<uint64_t>(hfsdp));
  f.add(static_cast<uint64_t>(hpz));
  return f.value();
}

void check_option_combinations(const ContextOptions& o) {
  if (o.hfsdp && o.strategy != Strategy::HybridShard)
    fail(Errc::InvalidArgument,
         "cfg->hfsdp = 1 needs cfg->strategy = FSDP_HYBRID_SHARD (it shards the optimizer state "
         "across the replicas of a hybrid job; other strategies have no such replicas)");
  if (o.hfsdp && o.placement.cpu_offload)
    fail(Errc::Unsupported,
         "cfg->hfsdp = 1 with cfg->cpu_offload = 1: the all-gather across replicas after the step "
         "would run on the offloaded shards in host memory, which NCCL does not take");
  if (o.hpz && o.strategy == Strategy::NoShard)
    fail(Errc::InvalidArgument,
         "cfg->hpz = 1 needs a strategy that shards (FSDP_FULL_SHARD or FSDP_HYBRID_SHARD): "
         "FSDP_NO_SHARD gathers nothing");
}

namespace {

void read_byte_count(Env var, std::size_t& out) {
  const char* v = env(var);
  if (!v) return;
  const char* name = env_var(var).name;
  char* end = nullptr;
  const unsigned long long bytes = std::strtoull(v, &end, 10);
  if (*end != '\0' || v[0] == '-')
    fail(Errc::InvalidArgument,
         std::string("environment ") + name + "=" + v + ": expected a byte count");
  out = static_cast<std::size_t>(bytes);
}

}  // namespace

void apply_environment(ContextOptions& options) {
  // Choices in the order of the enums' values.
  if (int i = env_choice(Env::ReduceScatterAlgorithm, {"auto", "ring", "mpi"}); i >= 0)
    options.transport.algorithm = static_cast<ReduceScatterAlgorithm>(i);
  if (int i = env_choice(Env::Transport, {"auto", "mpi", "nccl", "shm", "shm_zero_copy"}); i >= 0)
    options.placement.transport = static_cast<TransportKind>(i);
  read_byte_count(Env::RingMinBlockBytes, options.transport.ring_min_block_bytes);
  read_byte_count(Env::RingPieceBytes, options.transport.ring_piece_bytes);
  // Debug mode (FSDP_DEBUG) turns every debug check on, the comparison of collective calls
  // included; FSDP_DEBUG_COLLECTIVES sets that one alone and wins.
  if (debug_env()) options.debug_collectives = true;
  if (int i = env_choice(Env::DebugCollectives, {"0", "1"}); i >= 0)
    options.debug_collectives = i == 1;
  if (const char* v = env(Env::Timeout)) {
    char* end = nullptr;
    const double seconds = std::strtod(v, &end);
    if (*end != '\0' || !(seconds == seconds) || seconds > 1e9)
      fail(Errc::InvalidArgument, std::string("environment FSDP_TIMEOUT=") + v +
                                      ": expected seconds (0: the default, negative: none)");
    options.timeout_s = seconds == 0.0 ? kDefaultTimeoutSeconds : seconds;
  }
  if (int i = env_choice(Env::OnTimeout, {"error", "abort"}); i >= 0)
    options.timeout_abort = i == 1;
}

}  // namespace fsdp
