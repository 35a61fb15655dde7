// A context: the caller's communicator duplicated, the process groups derived from it, and the
// transport, memory space and buffer pool that every unit of the context shares.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "core/buffer_pool.hpp"
#include "core/error.hpp"
#include "core/flat_layout.hpp"
#include "core/memory_accounting.hpp"
#include "core/precision.hpp"
#include "core/process_groups.hpp"
#include "core/scratch.hpp"
#include "core/unit_init.hpp"
#include "memory/memory_space.hpp"
#include "transport/mpi/mpi_transport.hpp"

namespace fsdp {

class Unit;
class Optimizer;
class GradScaler;
enum class OptimizerKind : int;
struct HyperParams;

enum class GradReduction : int { Mean = 0, Sum = 1 };

struct ContextOptions {
  Strategy strategy = Strategy::FullShard;
  int sharding_factor = 0;  // 0: the strategy's default
  GradReduction grad_reduction = GradReduction::Mean;
  PrecisionRequest precision;  // every unit's, unless the unit asks otherwise
  MpiTransportOptions transport;

  uint64_t fingerprint() const;
};

// Reads FSDP_REDUCE_SCATTER_ALGORITHM (auto|ring|mpi) and FSDP_RING_MIN_BLOCK_BYTES. Throws
// InvalidArgument naming the variable when a value is not understood.
void apply_environment(ContextOptions& options);

class Context {
 public:
  // Collective over `comm`. Every rank passes its options and, when its own arguments were
  // invalid, the error; if any rank has one, or the options differ, every rank throws.
  static std::unique_ptr<Context> create(MPI_Comm comm, const ContextOptions& options,
                                         const std::optional<Error>& local_error);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // What a unit may ask for beyond its descriptors.
  struct UnitRequest {
    PrecisionRequest precision;
    std::string name;
    UnitSource source;
  };
  // Collective over the world group (checks that every rank describes the same unit).
  Unit& create_unit(std::vector<ParamSpec> params, const UnitRequest& request,
                    const std::optional<Error>& local_error);
  void destroy_unit(Unit& unit);
  std::vector<Unit*> units() const;

  // Collective over the world group: kind, hyperparameters and units must agree across ranks.
  Optimizer& create_optimizer(OptimizerKind kind, const HyperParams& defaults,
                              std::vector<Unit*> units, const std::optional<Error>& local_error);
  void destroy_optimizer(Optimizer& opt);
  std::vector<Optimizer*> optimizers() const;
  // Collective over the world group: the settings must agree across ranks.
  GradScaler& create_grad_scaler(double init_scale, double growth, double backoff, int interval,
                                 const std::optional<Error>& local_error);
  void destroy_grad_scaler(GradScaler& s);
  std::vector<GradScaler*> grad_scalers() const;

  const ProcessGroups& groups() const { return *groups_; }
  const ContextOptions& options() const { return options_; }
  int sharding_factor() const { return groups_->shard().size; }
  MemorySpace& memory() { return *memory_; }
  Transport& transport() { return *transport_; }
  BufferPool& pool() { return *pool_; }
  // For partial sums that outlive one collective (hybrid: reduce-scatter, then all-reduce).
  Scratch& partial_sums() { return *partial_sums_; }
  MemoryAccounting& accounting() { return accounting_; }
  // Off: reduce_grads keeps full gradients locally (PyTorch's no_sync) until it is turned on.
  bool grad_sync() const { return grad_sync_; }
  void set_grad_sync(bool on) { grad_sync_ = on; }
  std::size_t unsharded_model_bytes() const;
  // Frees cached pool buffers and communication scratch.
  void trim();

 private:
  Context(std::unique_ptr<ProcessGroups> groups, const ContextOptions& options);

  ContextOptions options_;
  MemoryAccounting accounting_;
  std::unique_ptr<ProcessGroups> groups_;
  std::unique_ptr<MemorySpace> memory_;
  std::unique_ptr<BufferPool> pool_;
  std::unique_ptr<Scratch> transport_scratch_, partial_sums_;
  std::unique_ptr<Transport> transport_;
  std::map<uint64_t, std::unique_ptr<Unit>> units_;  // by id: creation order, same on every rank
  uint64_t next_unit_id_ = 0;
  std::map<uint64_t, std::unique_ptr<Optimizer>> optimizers_;
  uint64_t next_optimizer_id_ = 0;
  std::map<uint64_t, std::unique_ptr<GradScaler>> scalers_;
  uint64_t next_scaler_id_ = 0;
  bool grad_sync_ = true;
};

}  // namespace fsdp
