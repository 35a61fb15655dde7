#include "capi/config.hpp"

#include <cstddef>
#include <cstring>
#include <string>

#include "capi/entry_bodies.hpp"
#include "capi/guard.hpp"

namespace fsdp::capi {
namespace {

constexpr std::size_t kHeaderBytes = offsetof(fsdp_config_t, version) + sizeof(uint32_t);

const fsdp_config_t kDefaults = FSDP_CONFIG_INIT;

std::string version_text(uint32_t v) {
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

}  // namespace

std::optional<DType> optional_dtype(int t, const char* arg) {
  if (t == FSDP_DTYPE_AUTO) return std::nullopt;
  if (t < 0 || t >= FSDP_DTYPE_COUNT)
    fail(Errc::InvalidArgument,
         std::string(arg) + " = " + std::to_string(t) + ": not an fsdp_dtype_t or FSDP_DTYPE_AUTO");
  return static_cast<DType>(t);
}

ContextOptions options_from_config(const fsdp_config_t* cfg) {
  fsdp_config_t c = kDefaults;
  if (cfg) {
    if (cfg->size < kHeaderBytes)
      fail(Errc::InvalidArgument, "cfg->size = " + std::to_string(cfg->size) +
                                      ": too small; initialize the config with FSDP_CONFIG_INIT");
    if (cfg->magic != FSDP_CONFIG_MAGIC)
      fail(Errc::InvalidArgument,
           "cfg->magic: the config was not initialized with FSDP_CONFIG_INIT or "
           "fsdp_config_defaults");
    const uint32_t major = cfg->version / 10000, minor = cfg->version / 100 % 100;
    if (major != FSDP_VERSION_MAJOR || minor > FSDP_VERSION_MINOR)
      fail(Errc::Version, "cfg->version = " + version_text(cfg->version) +
                              ": the program was compiled against libfsdp " +
                              version_text(cfg->version) + " headers but runs with library " +
                              version_text(FSDP_VERSION));
    std::memcpy(&c, cfg, cfg->size < sizeof c ? cfg->size : sizeof c);
  }
  if (enum_int(c.strategy) < 0 || enum_int(c.strategy) >= FSDP_SHARDING_STRATEGY_COUNT)
    fail(Errc::InvalidArgument, "cfg->strategy = " + std::to_string(enum_int(c.strategy)) +
                                    ": not an fsdp_sharding_strategy_t");
  if (enum_int(c.grad_reduction) < 0 || enum_int(c.grad_reduction) >= FSDP_GRAD_REDUCTION_COUNT)
    fail(Errc::InvalidArgument,
         "cfg->grad_reduction = " + std::to_string(enum_int(c.grad_reduction)) +
             ": not an fsdp_grad_reduction_t");
  if (c.sharding_factor < 0)
    fail(Errc::InvalidArgument,
         "cfg->sharding_factor = " + std::to_string(c.sharding_factor) + ": must be >= 0");
  ContextOptions o;
  o.precision.param = optional_dtype(enum_int(c.param_dtype), "cfg->param_dtype");
  o.precision.reduce = optional_dtype(enum_int(c.reduce_dtype), "cfg->reduce_dtype");
  o.strategy = static_cast<Strategy>(c.strategy);
  o.sharding_factor = c.sharding_factor;
  o.grad_reduction = static_cast<GradReduction>(c.grad_reduction);
  if (c.max_unsharded < 0)
    fail(Errc::InvalidArgument, "cfg->max_unsharded = " + std::to_string(c.max_unsharded) +
                                    ": must be >= 1, or 0 for the default (2)");
  o.max_unsharded = c.max_unsharded == 0 ? 2 : c.max_unsharded;
  if (enum_int(c.memory_space) < 0 || enum_int(c.memory_space) >= FSDP_MEMORY_SPACE_COUNT)
    fail(Errc::InvalidArgument, "cfg->memory_space = " + std::to_string(enum_int(c.memory_space)) +
                                    ": not an fsdp_memory_space_t");
  if (enum_int(c.transport) < 0 || enum_int(c.transport) >= FSDP_TRANSPORT_COUNT)
    fail(Errc::InvalidArgument,
         "cfg->transport = " + std::to_string(enum_int(c.transport)) + ": not an fsdp_transport_t");
  if (c.device < -1)
    fail(Errc::InvalidArgument, "cfg->device = " + std::to_string(c.device) +
                                    ": a CUDA device ordinal, or -1 to pick by node rank");
  if (c.cpu_offload != 0 && c.cpu_offload != 1)
    fail(Errc::InvalidArgument,
         "cfg->cpu_offload = " + std::to_string(c.cpu_offload) + ": must be 0 or 1");
  const bool cuda = c.memory_space == FSDP_MEMORY_CUDA;
  if (c.cpu_offload && !cuda)
    fail(Errc::InvalidArgument,
         "cfg->cpu_offload = 1 needs cfg->memory_space = FSDP_MEMORY_CUDA (offload moves shards "
         "off the GPU; with host memory they are already on the host)");
  if (c.transport == FSDP_TRANSPORT_NCCL && !cuda)
    fail(Errc::InvalidArgument,
         "cfg->transport = FSDP_TRANSPORT_NCCL needs cfg->memory_space = FSDP_MEMORY_CUDA (NCCL "
         "moves device memory only)");
  if ((c.transport == FSDP_TRANSPORT_SHM || c.transport == FSDP_TRANSPORT_SHM_ZERO_COPY) && cuda)
    fail(Errc::InvalidArgument,
         std::string("cfg->transport = ") +
             (c.transport == FSDP_TRANSPORT_SHM ? "FSDP_TRANSPORT_SHM"
                                                : "FSDP_TRANSPORT_SHM_ZERO_COPY") +
             " needs cfg->memory_space = FSDP_MEMORY_HOST (the node shared-memory transport moves "
             "host memory; device memory goes over NCCL or MPI)");
  if (c.device >= 0 && !cuda)
    fail(Errc::InvalidArgument, "cfg->device = " + std::to_string(c.device) +
                                    " is for cfg->memory_space = FSDP_MEMORY_CUDA; leave it -1");
  o.placement.memory = static_cast<MemoryPlace>(c.memory_space);
  o.placement.device = c.device;
  o.placement.cpu_offload = c.cpu_offload != 0;
  o.placement.transport = static_cast<TransportKind>(c.transport);
  if (c.debug_collectives != 0 && c.debug_collectives != 1)
    fail(Errc::InvalidArgument,
         "cfg->debug_collectives = " + std::to_string(c.debug_collectives) + ": must be 0 or 1");
  if (enum_int(c.on_timeout) < 0 || enum_int(c.on_timeout) >= FSDP_ON_TIMEOUT_COUNT)
    fail(Errc::InvalidArgument, "cfg->on_timeout = " + std::to_string(enum_int(c.on_timeout)) +
                                    ": not an fsdp_on_timeout_t");
  if (!(c.timeout_s == c.timeout_s) || c.timeout_s > 1e9)  // NaN, or beyond any job's length
    fail(Errc::InvalidArgument, "cfg->timeout_s = " + std::to_string(c.timeout_s) +
                                    ": seconds (0: the default, negative: no watchdog)");
  o.debug_collectives = c.debug_collectives != 0;
  o.timeout_s = c.timeout_s == 0.0 ? kDefaultTimeoutSeconds : c.timeout_s;
  o.timeout_abort = c.on_timeout == FSDP_ON_TIMEOUT_ABORT;
  if (c.hfsdp != 0 && c.hfsdp != 1)
    fail(Errc::InvalidArgument, "cfg->hfsdp = " + std::to_string(c.hfsdp) + ": must be 0 or 1");
  if (c.hpz != 0 && c.hpz != 1)
    fail(Errc::InvalidArgument, "cfg->hpz = " + std::to_string(c.hpz) + ": must be 0 or 1");
  o.hfsdp = c.hfsdp != 0;
  o.hpz = c.hpz != 0;
  check_option_combinations(o);
  return o;
}

}  // namespace fsdp::capi

void fsdp::capi::body::fsdp_config_defaults(fsdp_config_t* cfg, size_t size) {
  if (size < kHeaderBytes)
    fail(Errc::InvalidArgument, "size = " + std::to_string(size) +
                                    ": smaller than the config's size/magic/version header");
  fsdp_config_t c = kDefaults;
  c.size = size < sizeof c ? size : sizeof c;
  std::memcpy(cfg, &c, c.size);
}
