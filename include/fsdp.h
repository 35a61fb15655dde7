/**
 * @file fsdp.h
 * libfsdp: Fully Sharded Data Parallel (ZeRO-3) for any program that can call C.
 *
 * The whole public C ABI. C99, no C++ types; usable from C, C++, Fortran (iso_c_binding) and FFI.
 *
 * Concepts (see doc/concepts.md):
 *   - A context holds a duplicate of the caller's communicator and the process groups derived from
 *     it: the shard group (F ranks that together hold one copy of every unit) and the replicate
 *     group (the W/F ranks that hold the same shard in every shard group).
 *   - A unit is one flat parameter: its original parameters flattened and concatenated in order,
 *     each starting at a multiple of 8 elements (16 bytes in bfloat16/float16, more in wider
 *     dtypes), right-padded to F blocks of shard_numel elements, shard_numel a multiple of 8; each
 *     rank keeps the block [shard_rank * shard_numel, (shard_rank + 1) * shard_numel). With hybrid
 *     sharding over N replicas (since 0.12) a trainable section's block is N pieces of a multiple
 *     of 8 elements each (HFSDP updates one piece per replica). Padding is zero. Every pointer
 * fsdp_param_data, fsdp_grad_data and fsdp_shard_data hand out is therefore 16-byte aligned. When a
 * unit mixes trainable and frozen parameters, each kind forms its own section laid out like this,
 * trainable first, and a shard is its block of each section: frozen parameters need no gradient
 * memory.
 *   - The cycle is unshard (all-gather) -> use parameters -> reshard (release), and for gradients
 *     grad_data (write the full gradient) -> reduce_grads (reduce-scatter, then all-reduce over
 *     replicas, or with HFSDP reduce-scatter across them, accumulated into the gradient shard).
 *
 * Conventions:
 *   - Every function returns an fsdp_status_t. On any error nothing is modified: handles, units and
 *     output arguments keep their previous values. fsdp_last_error() names the call, the argument
 *     and the unit.
 *   - "Collective over G" means every rank of group G must make the same call, for the same unit,
 *     in the same order. Other calls are local.
 *   - Thread safety: a context and its units must be used by one thread at a time. Different
 *     contexts may be used from different threads if MPI was initialized with
 *     MPI_THREAD_MULTIPLE. fsdp_last_error() is per thread.
 */
#ifndef FSDP_H
#define FSDP_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Major version: changes only with incompatible ABI changes. */
#define FSDP_VERSION_MAJOR 0
/** Minor version: additions (a program runs with any library of its major and a minor >= its). */
#define FSDP_VERSION_MINOR 16
/** Patch version: fixes. */
#define FSDP_VERSION_PATCH 0
/** One integer that orders versions: major * 10000 + minor * 100 + patch. */
#define FSDP_VERSION_NUMBER(major, minor, patch) ((major)*10000 + (minor)*100 + (patch))
/** This header's version as one integer. */
#define FSDP_VERSION FSDP_VERSION_NUMBER(FSDP_VERSION_MAJOR, FSDP_VERSION_MINOR, FSDP_VERSION_PATCH)

/** Marks the library's exported functions. */
#if defined(_WIN32)
#define FSDP_EXPORT
#else
#define FSDP_EXPORT __attribute__((visibility("default")))
#endif

/* ------------------------------------------------------------------------------------------------
 * Status codes
 * --------------------------------------------------------------------------------------------- */
/** What every call returns. fsdp_status_string() gives each one's text. */
typedef enum fsdp_status {
  FSDP_SUCCESS = 0,
  FSDP_ERR_INVALID_ARGUMENT = 1, /**< NULL pointer, bad value, bad descriptor */
  FSDP_ERR_INVALID_HANDLE = 2,   /**< NULL or foreign handle, or a handle of the wrong kind */
  FSDP_ERR_DESTROYED_HANDLE = 3, /**< a unit handle that was destroyed with fsdp_unit_destroy */
  FSDP_ERR_FINALIZED = 4,        /**< a context, or a unit of a context, after fsdp_finalize */
  FSDP_ERR_OUT_OF_RANGE = 5,     /**< a parameter index >= the unit's parameter count */
  FSDP_ERR_STATE = 6,            /**< the call does not fit the unit's state (unshard twice...) */
  FSDP_ERR_MISMATCH = 7,         /**< ranks passed different arguments to a collective call */
  FSDP_ERR_VERSION = 8,          /**< header and library versions are incompatible */
  FSDP_ERR_UNSUPPORTED = 9,      /**< valid request this build does not support (yet) */
  FSDP_ERR_OUT_OF_MEMORY = 10,
  FSDP_ERR_MPI = 11,      /**< an MPI call failed; the message carries MPI's error string */
  FSDP_ERR_INTERNAL = 12, /**< a bug in libfsdp: please report it */
  FSDP_ERR_CALLBACK = 13, /**< a callback of the caller's returned nonzero */
  /** Since 0.3 (checkpoints). */
  FSDP_ERR_IO = 14,      /**< a file could not be created, opened, read or written (errno's text) */
  FSDP_ERR_FORMAT = 15,  /**< the file is not an fsdp checkpoint, or is malformed */
  FSDP_ERR_CORRUPT = 16, /**< a checksum does not match, or the file is truncated */
  /** Since 0.5 (GPUs). */
  FSDP_ERR_CUDA = 17,    /**< a CUDA runtime call failed; the message carries CUDA's error string */
  FSDP_ERR_NCCL = 18,    /**< an NCCL call failed or NCCL reported an asynchronous error */
  FSDP_ERR_ABORTED = 19, /**< the context was aborted (fsdp_abort): only fsdp_finalize is taken */
  /** Since 0.7: a collective call or a wait did not complete within fsdp_config_t.timeout_s (the
   *  watchdog): the message names the call, the unit and, in debug mode, the ranks that did not
   *  arrive. The context then takes only fsdp_finalize. */
  FSDP_ERR_TIMEOUT = 20,
  /** Since 0.16: the step boundary (fsdp_step_boundary) of a context with units used by any
   *  subset of ranks was missed or doubled, or a parameter update came outside the update phase
   *  it opens; the message names the call and what to do. Nothing was reduced or updated. */
  FSDP_ERR_STEP_BOUNDARY = 21,
  FSDP_STATUS_COUNT /**< number of status codes, not a status */
} fsdp_status_t;

/* ------------------------------------------------------------------------------------------------
 * Enumerations. Every member has a fixed value that never changes within a SONAME. The *_COUNT
 * sentinels that end them are not part of the ABI: they grow when members are added, so use them
 * only for arrays and range checks compiled against this very header (doc/abi.md).
 * --------------------------------------------------------------------------------------------- */
/** Element types of parameters, compute and communication. */
typedef enum fsdp_dtype {
  FSDP_DTYPE_AUTO = -1, /**< in precision settings: the default (see fsdp_config_t.param_dtype) */
  FSDP_FLOAT32 = 0,
  FSDP_FLOAT64 = 1,
  FSDP_BFLOAT16 = 2, /**< compute and communication dtype; parameters are stored in 32 or 64 bits */
  FSDP_FLOAT16 = 3,  /**< IEEE half; as bfloat16 */
  FSDP_DTYPE_COUNT
} fsdp_dtype_t;

/** How units are sharded over the ranks (fsdp_config_t.strategy). */
typedef enum fsdp_sharding_strategy {
  FSDP_FULL_SHARD = 0, /**< F = W: one shard group of all ranks */
  FSDP_HYBRID_SHARD =
      1,             /**< 1 <= F <= W, default F = ranks per node: shard inside, replicate across */
  FSDP_NO_SHARD = 2, /**< F = 1: every rank holds everything (data parallel) */
  FSDP_SHARDING_STRATEGY_COUNT
} fsdp_sharding_strategy_t;

/** How fsdp_reduce_grads combines the ranks' gradients (fsdp_config_t.grad_reduction). */
typedef enum fsdp_grad_reduction {
  FSDP_REDUCE_MEAN = 0, /**< gradient shard += (sum over all W ranks) / W */
  FSDP_REDUCE_SUM = 1,  /**< gradient shard += sum over all W ranks */
  FSDP_GRAD_REDUCTION_COUNT
} fsdp_grad_reduction_t;

/** The process groups of a context (fsdp_group_info). */
typedef enum fsdp_group {
  FSDP_GROUP_WORLD = 0,     /**< the context's duplicate of the communicator given to fsdp_init */
  FSDP_GROUP_SHARD = 1,     /**< the F ranks over which each unit is sharded */
  FSDP_GROUP_REPLICATE = 2, /**< the W/F ranks that hold the same shard */
  /** Since 0.14: hpZ's node group (fsdp_config_t.hpz, doc/hpz.md): the ranks of this rank's
   *  shard group on its node, the group a unit is resharded to after forward. This rank alone
   *  (size 1) where hpZ is off or keeps nothing (every shard group inside one node). */
  FSDP_GROUP_NODE = 3,
  FSDP_GROUP_COUNT
} fsdp_group_t;

/** The element-wise reductions of fsdp_allreduce (since 0.9). */
typedef enum fsdp_reduce_op {
  FSDP_OP_SUM = 0, /**< the sum over the group's ranks */
  FSDP_OP_MAX = 1, /**< the largest value (a NaN need not win: MPI_MAX's rule) */
  FSDP_OP_MIN = 2, /**< the smallest value */
  FSDP_OP_COUNT
} fsdp_reduce_op_t;

/** Where shards, unsharded buffers, gradients and optimizer state live (since 0.5). */
typedef enum fsdp_memory_space {
  FSDP_MEMORY_HOST = 0, /**< host memory (the default) */
  FSDP_MEMORY_CUDA = 1, /**< memory of the GPU fsdp_config_t.device selects */
  FSDP_MEMORY_SPACE_COUNT
} fsdp_memory_space_t;

/** What moves the data between ranks (fsdp_config_t.transport, since 0.5). */
typedef enum fsdp_transport {
  /** Host memory: SHM when ranks of a shard group share a node, else MPI. CUDA memory: NCCL
   *  when the library was built with it and no two ranks of the context share a GPU (NCCL
   *  refuses that), else MPI. */
  FSDP_TRANSPORT_AUTO = 0,
  /** MPI. With CUDA memory: through pinned host staging buffers, or straight from device memory
   *  for all-gathers when the MPI reports CUDA support. */
  FSDP_TRANSPORT_MPI = 1,
  FSDP_TRANSPORT_NCCL = 2, /**< NCCL, on CUDA memory only; one GPU per rank */
  /** Node shared memory (host memory only, since 0.6): a node holds one unsharded copy of a unit
   *  in an MPI-3 shared window, which its ranks see read-only; gradients are summed straight out
   *  of each other's buffers. The inter-node and replicate parts go over MPI. */
  FSDP_TRANSPORT_SHM = 3,
  /** Since 0.7: SHM, and units whose shard group lies on one node and whose param_dtype is their
   *  storage dtype keep their shards inside the node's unsharded copy, so fsdp_unshard moves no
   *  bytes at all (one barrier of the node's ranks) and the node holds no unsharded memory beyond
   *  the shards. The price is a rule: a rank writes its shard (fsdp_shard_data, an optimizer
   *  step, a checkpoint load) only when no rank of its node is still reading the unit's
   *  parameters, e.g. after the unit's fsdp_reduce_grads, which every rank enters after its
   *  backward pass over the unit. A write outside that rule is seen by the node's readers at once
   *  (with SHM they read a copy made at the unshard). Other units behave as with SHM. Never
   *  picked by AUTO; see doc/shared-memory.md. */
  FSDP_TRANSPORT_SHM_ZERO_COPY = 4,
  FSDP_TRANSPORT_COUNT
} fsdp_transport_t;

/* ------------------------------------------------------------------------------------------------
 * Configuration: a struct that grows at its end. The library reads at most `size` bytes of it and
 * gives every newer field its default, so a program compiled against an older header keeps working.
 * --------------------------------------------------------------------------------------------- */
/** What the watchdog does when a call exceeds fsdp_config_t.timeout_s (since 0.7). */
typedef enum fsdp_on_timeout {
  FSDP_ON_TIMEOUT_ERROR = 0, /**< report; the call returns FSDP_ERR_TIMEOUT (doc/debugging.md) */
  FSDP_ON_TIMEOUT_ABORT = 1, /**< report, then MPI_Abort on the context's communicator */
  FSDP_ON_TIMEOUT_COUNT
} fsdp_on_timeout_t;

/** fsdp_config_t.magic: "FSDP". */
#define FSDP_CONFIG_MAGIC 0x46534450u

/** Settings of a context (fsdp_init). */
typedef struct fsdp_config {
  size_t size;                       /**< sizeof(fsdp_config_t) as the caller compiled it */
  uint32_t magic;                    /**< FSDP_CONFIG_MAGIC */
  uint32_t version;                  /**< FSDP_VERSION of the header the caller compiled against */
  fsdp_sharding_strategy_t strategy; /**< default FSDP_FULL_SHARD */
  int sharding_factor;               /**< F; 0 picks the strategy's default */
  fsdp_grad_reduction_t grad_reduction; /**< default FSDP_REDUCE_MEAN */
  /** Since 0.2: mixed precision for every unit (a unit may override it, fsdp_unit_options_t).
   * param_dtype: unsharded parameters and the full gradients the caller writes; AUTO = the
   * parameters' own dtype. reduce_dtype: gradient communication; AUTO = param_dtype. The shard
   * (the master copy the optimizer updates) and the gradient shard stay in the parameters' dtype;
   * a reduced gradient is rounded to reduce_dtype (its sum, then its division) before it is
   * widened into a wider gradient shard, as PyTorch's reduce-scatter in that dtype rounds it.
   * float32 parameters may compute and reduce in float32, bfloat16 or float16; float64 ones only
   * in float64. Conversions round to nearest even and keep NaN and infinities. */
  fsdp_dtype_t param_dtype;
  fsdp_dtype_t reduce_dtype; /**< see param_dtype */
  /** Rate limiter: at most this many units unsharded, gathering or reducing at once before the
   * library blocks (waiting for in-flight reductions) or skips a prefetch; 0: the default, 2. */
  int max_unsharded;
  /** Since 0.5: FSDP_MEMORY_CUDA puts shards, unsharded buffers, gradients and optimizer state on
   *  a GPU; pointers the library hands out (fsdp_param_data, fsdp_grad_data, fsdp_shard_data...)
   *  are then device pointers, ordered against the caller's stream (fsdp_set_stream). */
  fsdp_memory_space_t memory_space;
  /** CUDA device ordinal with FSDP_MEMORY_CUDA; -1 (the default): the rank's index on its node
   *  modulo the node's device count. The library makes it current while it works and then
   *  restores the calling thread's current device: the application's stays as it set it. */
  int device;
  /** With FSDP_MEMORY_CUDA, nonzero: CPU offload. Shards, gradient shards and optimizer state
   *  live in pinned host memory and the optimizer steps on the CPU; unsharded parameters and full
   *  gradients live on the GPU (an unshard copies host to device asynchronously). */
  int cpu_offload;
  fsdp_transport_t transport; /**< default FSDP_TRANSPORT_AUTO */
  /** Since 0.7: nonzero turns on debug mode: before every collective call the ranks compare what
   *  they are about to call (operation, unit, bytes, dtype, other arguments, sequence number) and
   *  fail alike (FSDP_ERR_MISMATCH naming each rank's call) instead of hanging. Also on with
   *  FSDP_DEBUG=1 (every debug check) or FSDP_DEBUG_COLLECTIVES=1 (this one; =0 turns it off
   *  whatever the others say). Default 0. */
  int debug_collectives;
  /** Since 0.7: see fsdp_on_timeout_t; also FSDP_ON_TIMEOUT=error|abort. */
  fsdp_on_timeout_t on_timeout;
  /** Since 0.7: seconds a collective call or a wait may take before the watchdog reports it (and
   *  acts as on_timeout says); 0: the default, 1800; negative: no watchdog. Also FSDP_TIMEOUT. */
  double timeout_s;
  /** Since 0.12: nonzero turns on HFSDP (Megatron-FSDP's name) with FSDP_HYBRID_SHARD: the
   *  update runs on 1/(F*N) of each unit (F ranks per shard group, N replicas). A reduction
   *  reduce-scatters over the shard group, then reduce-scatters across replicas (instead of an
   *  all-reduce), so the gradient shard and the optimizer state are 1/(F*N) of the unit; after
   *  the library's optimizer updates its piece, an all-gather across replicas brings the 1/F
   *  parameter shard up to date. Since 0.13, with a param_dtype other than a unit's dtype, the
   *  float32 masters are split too: a rank keeps its 1/F block of the trainable parameters in
   *  param_dtype and the masters of its 1/(F*N) piece only (fsdp_shard_data is then refused;
   *  fsdp_gather_params and checkpoints give the masters). Results equal hybrid's bit for
   *  bit over 2 replicas. Needs FSDP_HYBRID_SHARD (elsewhere FSDP_ERR_INVALID_ARGUMENT naming
   *  cfg->hfsdp); with cpu_offload FSDP_ERR_UNSUPPORTED. Default 0. See doc/hfsdp.md. */
  int hfsdp;
  /** Since 0.12: 1 turns on hpZ (DeepSpeed ZeRO++'s hierarchical partitioning) where a shard
   *  group spans nodes: a unit resharded after a forward use (a hold in which no gradient was
   *  written through fsdp_grad_data) keeps this rank's 1/R of its unsharded parameters (R: the
   *  shard group's ranks per node; fsdp_memory_stats_t.secondary_bytes), and its next unshard
   *  all-gathers inside the node only, then drops it. The library's optimizer step, norm,
   *  unscaling, checkpoint save or load, and fsdp_shard_data drop secondaries unused: an unshard
   *  never reads parameters older than the shards. Results are bitwise those without hpZ. Where
   *  every shard group lies inside one node it changes nothing. FSDP_ERR_INVALID_ARGUMENT naming
   *  cfg->hpz: a value other than 0 or 1, FSDP_NO_SHARD, nodes of unequal size, or a shard group
   *  spanning nodes unevenly. With FSDP_TRANSPORT_NCCL (since 0.13) the node-local all-gather
   *  has its own NCCL communicator. Default 0. See doc/hpz.md. */
  int hpz;
} fsdp_config_t;

/** Initializer for a config with every default: fsdp_config_t cfg = FSDP_CONFIG_INIT; */
#define FSDP_CONFIG_INIT                                                                          \
  {                                                                                               \
    sizeof(fsdp_config_t), FSDP_CONFIG_MAGIC, FSDP_VERSION, FSDP_FULL_SHARD, 0, FSDP_REDUCE_MEAN, \
        FSDP_DTYPE_AUTO, FSDP_DTYPE_AUTO, 0, FSDP_MEMORY_HOST, -1, 0, FSDP_TRANSPORT_AUTO, 0,     \
        FSDP_ON_TIMEOUT_ERROR, 0.0, 0, 0                                                          \
  }

/* ------------------------------------------------------------------------------------------------
 * Handles and descriptors
 * --------------------------------------------------------------------------------------------- */
/** A context: the communicator's groups, and everything created over it (fsdp_init). */
typedef struct fsdp_context_s* fsdp_context_t;
/** A unit: one flat parameter, sharded (fsdp_unit_create). */
typedef struct fsdp_unit_s* fsdp_unit_t;
/** A sharded optimizer over units (fsdp_optimizer_create). */
typedef struct fsdp_optimizer_s* fsdp_optimizer_t;
/** A loss scaler (fsdp_grad_scaler_create). */
typedef struct fsdp_grad_scaler_s* fsdp_grad_scaler_t;

/** One original parameter of a unit. */
typedef struct fsdp_param_desc {
  const char* name;     /**< non-empty, unique within the unit, e.g. "encoder.layer0.weight" */
  int ndim;             /**< 0 for a scalar, at most FSDP_MAX_NDIM */
  const int64_t* shape; /**< ndim extents, each > 0, row-major (C order); NULL when ndim == 0 */
  fsdp_dtype_t dtype;   /**< FSDP_FLOAT32 or FSDP_FLOAT64, the same for every parameter of a unit */
  int requires_grad; /**< 0: frozen: no gradient or optimizer memory, fsdp_grad_data refuses it */
} fsdp_param_desc_t;

/** Deferred initialization: writes the full values of parameter `index` (described by `desc`,
 * row-major, in desc->dtype) at `data`, which holds zeros. Returns 0, or nonzero to fail the
 * unit's creation (FSDP_ERR_CALLBACK on the rank that failed, FSDP_ERR_MISMATCH on the others). */
typedef int (*fsdp_init_fn)(void* user_data, int index, const fsdp_param_desc_t* desc, void* data);

/** Since 0.14: what each rank's shard of a unit holds (fsdp_unit_options_t.layout). Both
 *  layouts keep the two sections of fsdp_shard_data (trainable parameters first, frozen ones
 *  after), the unsharded buffer (each parameter contiguous at its place, fsdp_param_data) and the
 *  checkpoint format; they differ in which elements a shard holds (fsdp_param_shard_range). */
typedef enum fsdp_unit_layout {
  /** Each section's parameters concatenated, every parameter starting at a multiple of 8
   *  elements; rank r's block is elements [r*B, (r+1)*B) of that concatenation, B = ceil(section
   *  / F) rounded up to a multiple of 8 (with hybrid sharding over N replicas, the trainable
   *  section's B is N pieces of ceil(section / (F*N)) rounded up to 8). A parameter may be split
   *  anywhere, and most ranks hold none of a small one. */
  FSDP_LAYOUT_FLAT = 0,
  /** PyTorch FSDP2's: every parameter is split along its first dimension. With d0 its first
   *  extent (1 for a scalar), row = numel / d0 and c = ceil(d0 / F), rank r holds rows
   *  [r*c, min((r+1)*c, d0)) of it (none when r*c >= d0), so its part is a tensor of the
   *  parameter's shape but for the first extent (torch.chunk's). Rank r's block of a section holds
   *  each of the section's parameters in order, each given c*row elements rounded up to a
   *  multiple of 8; with hybrid sharding over N replicas the trainable block is rounded up to N
   *  pieces of a multiple of 8. An unshard places each part at its parameter's place; a reduce
   *  puts the full gradient's parts rank after rank first (one copy). */
  FSDP_LAYOUT_DIM0 = 1,
  FSDP_UNIT_LAYOUT_COUNT
} fsdp_unit_layout_t;

/** Since 0.16: which ranks use a unit in a step (fsdp_unit_options_t.used_by). See
 *  doc/concepts.md, "Units used by any subset of ranks". */
typedef enum fsdp_unit_use {
  /** Every rank of the unit's groups makes the same fsdp_unshard and fsdp_reduce_grads calls, in
   *  the same order (collective all-gathers and reduce-scatters, prefetch, overlap). */
  FSDP_USED_BY_ALL_RANKS = 0,
  /** Any subset of ranks may use the unit in a step, each on its own: fsdp_unshard reads the
   *  other ranks' shards one-sidedly (MPI-3 RMA, passive target, from a window that holds the
   *  shard), without their participation; fsdp_reduce_grads keeps the full gradient on this
   *  rank, and fsdp_step_boundary, which every rank calls once per step before the parameter
   *  update, reduces every such unit some rank wrote a gradient for (ranks that wrote none add
   *  zeros). Host-memory contexts only (else FSDP_ERR_UNSUPPORTED). Never prefetched. */
  FSDP_USED_BY_ANY_RANKS = 1,
  FSDP_UNIT_USE_COUNT
} fsdp_unit_use_t;

/** Options of one unit, for fsdp_unit_create_ex. A struct that grows at its end: set `size` (use
 * FSDP_UNIT_OPTIONS_INIT). */
typedef struct fsdp_unit_options {
  size_t size;               /**< sizeof(fsdp_unit_options_t) as the caller compiled it */
  const char* name;          /**< NULL or a label for messages and traces, e.g. "decoder.3" */
  fsdp_dtype_t param_dtype;  /**< FSDP_DTYPE_AUTO: the context's */
  fsdp_dtype_t reduce_dtype; /**< FSDP_DTYPE_AUTO: the context's, else this unit's param_dtype */
  /** Deferred initialization: when set, initial_values must be NULL; the library allocates one
   * full-size unit, calls init for each parameter, keeps this rank's shard and frees the rest. */
  fsdp_init_fn init;
  void* init_user_data; /**< passed to init as user_data */
  /** Nonzero: only world rank 0's initial values (or init calls) count; every rank starts from
   * them (PyTorch's sync_module_states). Other ranks' initial_values are ignored and may be NULL;
   * init is called on rank 0 only. */
  int sync_from_rank0;
  /** Since 0.14: what each rank's shard holds, a fsdp_unit_layout_t value; default
   *  FSDP_LAYOUT_FLAT, also for a caller whose `size` ends before this field. Must agree across
   *  ranks. 64 bits wide so that it starts past the padding the struct ended with before it
   *  (size 48 on LP64 ABIs then): an older caller's padding is never read as a layout. */
  int64_t layout;
  /** Since 0.16: a fsdp_unit_use_t value, which ranks use the unit in a step; default
   *  FSDP_USED_BY_ALL_RANKS, also for a caller whose `size` ends before this field. Must agree
   *  across ranks. */
  int64_t used_by;
} fsdp_unit_options_t;

/** Initializer for unit options with every default. */
#define FSDP_UNIT_OPTIONS_INIT                                                          \
  {                                                                                     \
    sizeof(fsdp_unit_options_t), NULL, FSDP_DTYPE_AUTO, FSDP_DTYPE_AUTO, NULL, NULL, 0, \
        FSDP_LAYOUT_FLAT, FSDP_USED_BY_ALL_RANKS                                        \
  }

/** The most dimensions a parameter may have. */
#define FSDP_MAX_NDIM 16

/** Memory the library holds for a context, in bytes. A struct that grows at its end: set `size`. */
typedef struct fsdp_memory_stats {
  size_t size; /**< sizeof(fsdp_memory_stats_t) as the caller compiled it */
  /** parameter shards of all units (the master copy; with HFSDP's split masters, since 0.13, the
   *  masters' pieces and the param_dtype blocks of the trainable parameters) */
  size_t shard_bytes;
  size_t grad_shard_bytes;      /**< gradient shards of all units */
  size_t unsharded_bytes;       /**< unsharded parameter buffers in use now (0.1: and full grads) */
  size_t pool_cached_bytes;     /**< released buffers the pool keeps for reuse */
  size_t peak_bytes;            /**< high-water mark of the total of every category (0.9: but
                                     initialization's, peak_init_bytes) */
  size_t unsharded_model_bytes; /**< parameter bytes of all units without sharding (one replica) */
  size_t scratch_bytes;         /**< communication scratch, kept for reuse */
  /** Since 0.2. */
  size_t full_grad_bytes;            /**< full gradient buffers in use now */
  size_t optimizer_state_bytes;      /**< sharded optimizer state */
  size_t peak_parameter_bytes;       /**< high-water mark of shard_bytes + unsharded_bytes: the
                                        quantity of FSDP's formula K_full/F sum psi + K_low max psi */
  size_t peak_shard_bytes;           /**< high-water mark of shard_bytes */
  size_t peak_grad_shard_bytes;      /**< high-water mark of grad_shard_bytes */
  size_t peak_unsharded_bytes;       /**< high-water mark of unsharded_bytes */
  size_t peak_full_grad_bytes;       /**< high-water mark of full_grad_bytes */
  size_t peak_optimizer_state_bytes; /**< high-water mark of optimizer_state_bytes */
  /** Since 0.5: calls the library made to its allocators (cudaMalloc, cudaHostAlloc or the host
   *  allocator) since the context was created; steady-state training adds none (the pool). */
  size_t allocation_calls;
  /** Since 0.9: high-water mark of initialization's full-size unit buffers (options->init, and
   *  sync_from_rank0 on rank 0), which live only inside fsdp_unit_create; counted in no other
   *  field, so every other peak is training's. */
  size_t peak_init_bytes;
  /** Since 0.9: prefetch (fsdp_set_prefetch) since the context was created. All-gathers the
   *  library started on its own: */
  size_t prefetches_started;
  /** of those, claimed by the caller's fsdp_unshard or fsdp_unshard_async: */
  size_t prefetches_used;
  /** of those, released unused: the caller's order changed, or nothing claimed the unit before
   *  the next fsdp_begin_forward/fsdp_begin_backward, optimizer step, norm, checkpoint or
   *  fsdp_unit_destroy. */
  size_t prefetches_unused;
  /** Predicted prefetches not started because max_unsharded units were already unsharded,
   *  gathering or reducing (fsdp_config_t.max_unsharded; doc/training.md says how to size it). */
  size_t prefetches_skipped_limit;
  /** Since 0.12: hpZ's secondary partitions held now (fsdp_config_t.hpz; doc/hpz.md): each is
   *  1/R of a unit's unsharded parameters (R: its shard group's ranks per node), from the reshard
   *  of a forward use until the unit's next unshard completes. Counted in peak_bytes, not in
   *  peak_parameter_bytes (FSDP's formula). */
  size_t secondary_bytes;
  size_t peak_secondary_bytes; /**< high-water mark of secondary_bytes */
} fsdp_memory_stats_t;

/* ------------------------------------------------------------------------------------------------
 * Errors and versions (local, thread-safe)
 * --------------------------------------------------------------------------------------------- */

/** Constant text for a status, e.g. "FSDP_ERR_STATE: the unit is not in the required state".
 *  @param[in] status a status code
 *  @return constant text naming the status and what it means; "unknown status" for a value out of
 * range */
FSDP_EXPORT const char* fsdp_status_string(fsdp_status_t status);

/** The calling thread's message for its last failed call ("" if none). Valid until the thread's
 *  next libfsdp call. Format: "<call>: <argument or unit>: <what is wrong>".
 *  @return the message, "" if none */
FSDP_EXPORT const char* fsdp_last_error(void);

/** Since 0.4. For language bindings (the Fortran module, Python) that check their own arguments
 *  before calling: makes "<call>: <message>" the calling thread's fsdp_last_error and returns
 *  `status`, so every error reads alike whichever layer found it. Local, thread-safe.
 *  @param[in] status the status to record and return
 *  @param[in] call the name of the binding's call, e.g. "fsdp_param_data"
 *  @param[in] message "<argument>: <what is wrong>"
 *  @return `status` */
FSDP_EXPORT fsdp_status_t fsdp_record_error(fsdp_status_t status, const char* call,
                                            const char* message);

/** The library's version. Any output may be NULL.
 *  @param[out] major may be NULL
 *  @param[out] minor may be NULL
 *  @param[out] patch may be NULL
 *  @return FSDP_SUCCESS; VERSION / INVALID_ARGUMENT */
FSDP_EXPORT fsdp_status_t fsdp_get_version(int* major, int* minor, int* patch);

/** FSDP_ERR_VERSION unless a program compiled against header version major.minor.patch can run
 *  with this library: same major, and a library minor at least the header's.
 *  @param[in] major the major version the caller was compiled against
 *  @param[in] minor its minor version
 *  @param[in] patch its patch version
 *  @return FSDP_SUCCESS; VERSION / INVALID_ARGUMENT */
FSDP_EXPORT fsdp_status_t fsdp_check_version(int major, int minor, int patch);
/** fsdp_check_version with this header's version. */
#define FSDP_CHECK_VERSION() \
  fsdp_check_version(FSDP_VERSION_MAJOR, FSDP_VERSION_MINOR, FSDP_VERSION_PATCH)

/** Converts n elements between dtypes, rounding to nearest even when narrowing and keeping NaN
 *  and infinities, as the library does for mixed precision: for callers that compute in float and
 *  read or write bfloat16 / float16 buffers. dst and src must not overlap.
 *  @param[out] dst n elements of dst_dtype
 *  @param[in] dst_dtype the destination dtype
 *  @param[in] src n elements of src_dtype
 *  @param[in] src_dtype the source dtype
 *  @param[in] n element count
 *  @return FSDP_SUCCESS (n = 0 converts nothing); INVALID_ARGUMENT (a dtype that is not an
 * fsdp_dtype_t, dst or src NULL with n > 0, dst and src overlapping) */
FSDP_EXPORT fsdp_status_t fsdp_convert(void* dst, fsdp_dtype_t dst_dtype, const void* src,
                                       fsdp_dtype_t src_dtype, size_t n);

/** Fills the first `size` bytes of *cfg with this library's defaults (for FFI callers that cannot
 *  use FSDP_CONFIG_INIT). @param[in] size sizeof the caller's struct, at least up to `version`.
 *  @param[out] cfg the caller's config struct
 *  @return FSDP_SUCCESS; VERSION / INVALID_ARGUMENT */
FSDP_EXPORT fsdp_status_t fsdp_config_defaults(fsdp_config_t* cfg, size_t size);

/* ------------------------------------------------------------------------------------------------
 * Contexts
 * --------------------------------------------------------------------------------------------- */

/** Creates a context over `comm` (duplicated; the caller keeps ownership of comm).
 *  Collective over comm. Every rank must pass the same configuration; this is checked.
 *  @param[in]  comm  an intra-communicator; MPI must be initialized
 *  @param[in]  cfg   NULL for all defaults, or a config from FSDP_CONFIG_INIT
 *  @param[out] ctx   the new context
 *  @return FSDP_ERR_INVALID_ARGUMENT (bad cfg value, F not dividing W), FSDP_ERR_VERSION (cfg from
 *  an incompatible header), FSDP_ERR_MISMATCH (ranks passed different configs), FSDP_ERR_MPI. */
FSDP_EXPORT fsdp_status_t fsdp_init(MPI_Comm comm, const fsdp_config_t* cfg, fsdp_context_t* ctx);

/** fsdp_init for Fortran and FFI callers: `fcomm` is a Fortran communicator handle (MPI_Fint, an
 *  int in MPICH and Open MPI; from Fortran `MPI_COMM_WORLD`, from mpi4py `comm.py2f()`).
 *  @param[in] fcomm a Fortran communicator handle (MPI_Fint)
 *  @param[in] cfg NULL for all defaults, or a config from FSDP_CONFIG_INIT
 *  @param[out] ctx the new context
 *  @return as fsdp_init */
FSDP_EXPORT fsdp_status_t fsdp_init_fcomm(int fcomm, const fsdp_config_t* cfg, fsdp_context_t* ctx);

/** Since 0.4. For FFI callers without MPI bindings (Python without mpi4py): initializes MPI if it
 *  is not yet, and gives the Fortran handle of MPI_COMM_WORLD for fsdp_init_fcomm.
 *  @param[in]  thread_multiple   1: ask for MPI_THREAD_MULTIPLE (contexts then get a progress
 *                                thread), 0: MPI_THREAD_SERIALIZED
 *  @param[out] provided_multiple may be NULL; 1 if MPI runs with MPI_THREAD_MULTIPLE
 *  @param[out] world_fcomm       the Fortran handle of MPI_COMM_WORLD
 *  @return FSDP_ERR_INVALID_ARGUMENT, FSDP_ERR_MPI (MPI already finalized, or MPI_Init failed).
 *  Collective over MPI_COMM_WORLD when it initializes MPI; not thread-safe. */
FSDP_EXPORT fsdp_status_t fsdp_mpi_init(int thread_multiple, int* provided_multiple,
                                        int* world_fcomm);

/** Since 0.4. Finalizes MPI if fsdp_mpi_init initialized it (otherwise the caller owns MPI and
 *  nothing happens). Collective over MPI_COMM_WORLD; finalize every context first.
 *  @return FSDP_SUCCESS */
FSDP_EXPORT fsdp_status_t fsdp_mpi_finalize(void);

/** Destroys every unit of the context, frees its communicators and sets *ctx to NULL.
 *  Collective over the context's world group; call before MPI_Finalize. Handles of the context and
 *  its units answer FSDP_ERR_FINALIZED afterwards.
 *  @param[in,out] ctx the context; set to NULL
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (NULL), MPI (after MPI_Finalize);
 * FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_finalize(fsdp_context_t* ctx);

/** This rank's position in one of the context's groups. Local. Either output may be NULL.
 *  @param[in] ctx the context
 *  @param[in] group FSDP_GROUP_WORLD, FSDP_GROUP_SHARD, FSDP_GROUP_REPLICATE or FSDP_GROUP_NODE
 *  @param[out] rank may be NULL; this rank's rank in the group
 *  @param[out] size may be NULL; the group's size
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (group not an enum); FSDP_ERR_INVALID_HANDLE,
 * FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_group_info(fsdp_context_t ctx, fsdp_group_t group, int* rank,
                                          int* size);

/** The context's sharding factor F, strategy and reduction after defaults were applied. Local.
 *  Any output may be NULL.
 *  @param[in] ctx the context
 *  @param[out] sharding_factor may be NULL; F
 *  @param[out] strategy may be NULL
 *  @param[out] grad_reduction may be NULL
 *  @return FSDP_SUCCESS; FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED
 * for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_context_config(fsdp_context_t ctx, int* sharding_factor,
                                              fsdp_sharding_strategy_t* strategy,
                                              fsdp_grad_reduction_t* grad_reduction);

/** Where the context keeps its memory and what moves its data, after AUTO was resolved. Local.
 *  Any output may be NULL. Since 0.5.
 *  @param[in] ctx the context
 *  @param[out] memory_space may be NULL; FSDP_MEMORY_HOST or FSDP_MEMORY_CUDA
 *  @param[out] device may be NULL; the CUDA device ordinal, -1 for host memory
 *  @param[out] cpu_offload may be NULL; 1 when shards and optimizer state are offloaded to the host
 *  @param[out] transport may be NULL; FSDP_TRANSPORT_MPI, FSDP_TRANSPORT_NCCL, FSDP_TRANSPORT_SHM
 * or FSDP_TRANSPORT_SHM_ZERO_COPY
 *  @return FSDP_SUCCESS; FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE, FSDP_ERR_FINALIZED or
 * FSDP_ERR_ABORTED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_context_placement(fsdp_context_t ctx,
                                                 fsdp_memory_space_t* memory_space, int* device,
                                                 int* cpu_offload, fsdp_transport_t* transport);

/** CUDA devices this process can use. Local; needs no context and no MPI. Since 0.5.
 *  @param[out] count 0 when the library was built without CUDA, or no device or driver is present
 *  @return FSDP_SUCCESS; FSDP_ERR_INVALID_ARGUMENT (count NULL) */
FSDP_EXPORT fsdp_status_t fsdp_cuda_device_count(int* count);

/** The caller's CUDA stream (a cudaStream_t; NULL: the legacy default stream), to which a CUDA
 *  context orders its work. The library runs on streams of its own and joins the caller's stream
 *  with CUDA events: whatever the caller queued before a call that reads its memory
 *  (fsdp_reshard, fsdp_reduce_grads, an optimizer step...) is waited for on the GPU, and work the
 *  caller queues after a call that hands memory out (fsdp_unshard, fsdp_param_data,
 *  fsdp_grad_data, fsdp_wait...) runs after the library's. The CPU never blocks for it. Local.
 *  Since 0.5.
 *  @param[in] ctx a context with FSDP_MEMORY_CUDA
 *  @param[in] stream a cudaStream_t of the context's device, or NULL
 *  @return FSDP_SUCCESS; FSDP_ERR_UNSUPPORTED (a host-memory context); FSDP_ERR_INVALID_ARGUMENT
 * (a stream created on another device than the context's, since 0.9: nothing changes);
 * FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE, FSDP_ERR_FINALIZED or FSDP_ERR_ABORTED for a
 * bad handle */
FSDP_EXPORT fsdp_status_t fsdp_set_stream(fsdp_context_t ctx, void* stream);

/** Tears the context's communication down after an error another rank may not have seen (a
 *  timeout, an NCCL asynchronous error): NCCL communicators are aborted (ncclCommAbort), so
 *  operations stuck in them return. Local, not collective. From then on every call on the
 *  context, its units, optimizers, scalers and requests returns FSDP_ERR_ABORTED, except
 *  fsdp_finalize, which frees it without communicating. MPI operations already in flight cannot
 *  be aborted by MPI itself; MPI_Abort is the caller's decision. Since 0.5.
 *  @param[in] ctx the context
 *  @return FSDP_SUCCESS (also when already aborted); FSDP_ERR_INVALID_HANDLE,
 * FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_abort(fsdp_context_t ctx);

/** Memory the library holds now for this context, and its peak. Local. Peaks count from the
 *  context's creation (or the last fsdp_reset_peak_memory); initialization's full-size buffers
 *  are in peak_init_bytes only, so the other peaks after unit creation are training's.
 *  @param[in,out] stats stats->size must be set by the caller.
 *  @param[in] ctx the context
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (stats NULL or size too small); FSDP_ERR_INVALID_HANDLE,
 * FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_memory_stats(fsdp_context_t ctx, fsdp_memory_stats_t* stats);

/** Frees the buffers the pool caches for reuse (not those in use) and the communication
 *  scratch. Local.
 *  @param[in] ctx the context
 *  @return FSDP_SUCCESS; FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED
 * for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_trim_pool(fsdp_context_t ctx);

/** Since 0.9: broadcasts `bytes` bytes at `data` (host memory) from rank `root` of `group` to
 *  every rank of it: a value every rank must agree on (a flag, a step count, a seed), without
 *  a unit. Collective over the group; every rank of the context calls it with the same group,
 *  root and bytes (checked: a refused argument on any rank fails every rank).
 *  @param[in] ctx the context
 *  @param[in] group FSDP_GROUP_WORLD, FSDP_GROUP_SHARD, FSDP_GROUP_REPLICATE or FSDP_GROUP_NODE
 *  @param[in] root the sending rank, in the group's numbering
 *  @param[in,out] data the root's value; the others receive it here (NULL only when bytes is 0)
 *  @param[in] bytes its size
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (group, root out of range, data NULL), MISMATCH
 * (another rank's arguments differ or were refused), MPI; FSDP_ERR_INVALID_HANDLE,
 * FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_broadcast(fsdp_context_t ctx, fsdp_group_t group, int root,
                                         void* data, size_t bytes);

/** Since 0.9: reduces `count` doubles at `data` (host memory) element-wise over the ranks of
 *  `group`, in place: every rank ends with the same sums, largest or smallest values (a norm's
 *  partial sums over the shard group, a flag any rank raised). Collective over the group; every
 *  rank of the context calls it with the same group, op and count (checked: a refused argument
 *  on any rank fails every rank).
 *  @param[in] ctx the context
 *  @param[in] group FSDP_GROUP_WORLD, FSDP_GROUP_SHARD, FSDP_GROUP_REPLICATE or FSDP_GROUP_NODE
 *  @param[in] op FSDP_OP_SUM, FSDP_OP_MAX or FSDP_OP_MIN
 *  @param[in,out] data this rank's values; the results (NULL only when count is 0)
 *  @param[in] count how many
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (group, op, data NULL), MISMATCH (another rank's
 * arguments differ or were refused), MPI; FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or
 * FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_allreduce(fsdp_context_t ctx, fsdp_group_t group,
                                         fsdp_reduce_op_t op, double* data, size_t count);

/** Restarts every peak of fsdp_memory_stats from the current values. Local.
 *  @param[in] ctx the context
 *  @return FSDP_SUCCESS; FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED
 * for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_reset_peak_memory(fsdp_context_t ctx);

/** Gradient accumulation without communication (PyTorch's no_sync). With `enabled` = 0,
 *  fsdp_reduce_grads keeps each unit's full gradient instead of communicating it, and the next
 *  micro-batch adds into it through fsdp_grad_data; with `enabled` = 1 again, the next
 *  fsdp_reduce_grads communicates the sum. Costs one full gradient per unit while off. Local
 *  (reduce_grads is then local too); every rank must switch at the same point of its loop.
 *  @param[in] ctx the context
 *  @param[in] enabled 1: communicate in fsdp_reduce_grads, 0: accumulate locally
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (not 0/1); FSDP_ERR_INVALID_HANDLE,
 * FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_set_grad_sync(fsdp_context_t ctx, int enabled);

/** Since 0.16: the end of a step's forward and backward, before its parameter update: every rank
 *  of the context calls it once per step when the context has units created with
 *  FSDP_USED_BY_ANY_RANKS (without such units it only checks its arguments). It agrees, in one
 *  all-reduce over the world group, on which of those units carry a gradient on some rank, and
 *  reduce-scatters each of them (in unit order; a rank that wrote none adds zeros), so their
 *  gradient shards are then as fsdp_reduce_grads leaves them. It opens the update phase: this
 *  rank's parameter shards may change (an optimizer step, fsdp_shard_data writes) until its next
 *  call that is not of that phase (fsdp_clip_grad_norm, fsdp_grad_scaler_unscale and _step and
 *  fsdp_optimizer_step are; fsdp_unshard, fsdp_begin_forward, fsdp_allreduce, a checkpoint save and
 *  fsdp_step_boundary end it), after which the other ranks' one-sided unshards read the updated
 *  shards. Under fsdp_set_grad_sync(ctx, 0) (or a unit's) the gradients are kept, as
 *  fsdp_reduce_grads keeps them. Collective over the world group.
 *  @param[in] ctx the context
 *  @return FSDP_SUCCESS; STEP_BOUNDARY (the ranks made different numbers of collective calls
 *  since the last boundary: one missed or doubled it; nothing reduced), MPI;
 * FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE, FSDP_ERR_FINALIZED or FSDP_ERR_ABORTED for a
 * bad handle */
FSDP_EXPORT fsdp_status_t fsdp_step_boundary(fsdp_context_t ctx);

/** Since 0.9: gradient sync for one unit (FSDP2's per-module set_requires_gradient_sync). The
 *  unit communicates in fsdp_reduce_grads when both this and the context's setting
 *  (fsdp_set_grad_sync) are on; off, it accumulates locally as under fsdp_set_grad_sync(ctx, 0)
 *  while the other units keep communicating. Local; every rank must switch the same units at
 *  the same point of its loop. Default: on.
 *  @param[in] unit the unit
 *  @param[in] enabled 1: communicate, 0: accumulate locally
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (not 0/1); FSDP_ERR_INVALID_HANDLE,
 * FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_unit_set_grad_sync(fsdp_unit_t unit, int enabled);

/** Since 0.9: whether fsdp_reduce_grads of this unit communicates now: its own setting
 *  (fsdp_unit_set_grad_sync) and the context's (fsdp_set_grad_sync) both on. Local.
 *  @param[in] unit the unit
 *  @param[out] enabled 1 or 0
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (enabled NULL); FSDP_ERR_INVALID_HANDLE,
 * FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_unit_grad_sync(fsdp_unit_t unit, int* enabled);

/** Since 0.14: what this unit's reduced gradient is divided by (FSDP2's per-module
 *  set_gradient_divide_factor): the gradient shard receives (sum over the W ranks of the
 *  gradients) / factor, the sum in reduce_dtype and one division, as cfg->grad_reduction's mean
 *  divides by W. factor 0 restores the context's rule (W under FSDP_REDUCE_MEAN, 1 under
 *  FSDP_REDUCE_SUM); factor 1 gives the sum. Waits for the context's work in flight first: a
 *  reduction started before completes with the old factor. Local; every rank must set the same
 *  factor for the same units at the same point of its loop. Default 0.
 *  @param[in] unit the unit
 *  @param[in] factor > 0 and finite, or 0
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (negative, NaN or infinite; the unit keeps its
 * factor); FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad
 * handle */
FSDP_EXPORT fsdp_status_t fsdp_unit_set_grad_divide_factor(fsdp_unit_t unit, double factor);

/* ------------------------------------------------------------------------------------------------
 * Units (flat parameters)
 * --------------------------------------------------------------------------------------------- */

/** Creates a unit of `nparams` original parameters and keeps this rank's shard of it.
 *  Collective over the context's world group: every rank must pass the same descriptors (count,
 *  names, shapes, dtypes, requires_grad, order); a difference is detected on every rank
 *  (FSDP_ERR_MISMATCH) by a check that exchanges one 64-bit fingerprint per rank.
 *  @param[in] descs          nparams descriptors (nparams >= 1)
 *  @param[in] initial_values NULL (all zeros), or nparams pointers each to that parameter's full
 *                            values in row-major order (an entry may be NULL: zeros). Only the part
 *                            this rank's shard holds is read.
 *  @param[out] unit          the new unit, sharded
 *  @param[in] ctx the context
 *  @param[in] nparams the number of parameters, >= 1
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (n < 1, descs NULL, name NULL/empty/duplicate, ndim out
 * of 0..16, shape NULL, extent <= 0, too large, dtype not float32/float64 or differing within the
 * unit, unit NULL, precision not computable for the dtype), MISMATCH; FSDP_ERR_INVALID_HANDLE,
 * FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_unit_create(fsdp_context_t ctx, int nparams,
                                           const fsdp_param_desc_t* descs,
                                           const void* const* initial_values, fsdp_unit_t* unit);

/** fsdp_unit_create with options: a name, this unit's mixed precision, deferred initialization
 *  through a callback, initialization from rank 0. `options` NULL: the defaults. Collective over
 *  the world group; the options must agree across ranks (except the callback pointers).
 *  @param[in] ctx the context
 *  @param[in] nparams the number of parameters, >= 1
 *  @param[in] descs nparams descriptors
 *  @param[in] initial_values NULL (zeros), or nparams pointers to full row-major values (an entry
 * may be NULL)
 *  @param[in] options NULL for the defaults, or options from FSDP_UNIT_OPTIONS_INIT
 *  @param[out] unit the new unit, sharded
 *  @return FSDP_SUCCESS; as fsdp_unit_create; INVALID_ARGUMENT (options->size, a dtype out of
 * range, initial_values with options->init), CALLBACK (init returned nonzero: on that rank;
 * MISMATCH on the others); FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED
 * for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_unit_create_ex(fsdp_context_t ctx, int nparams,
                                              const fsdp_param_desc_t* descs,
                                              const void* const* initial_values,
                                              const fsdp_unit_options_t* options,
                                              fsdp_unit_t* unit);

/** Tied parameters (an embedding reused as the output head). Makes parameter `owner_index` of
 *  `owner` usable from `user` under the name `alias`, at index *alias_index (the user's parameter
 *  count plus the number of earlier ties). The parameter stays stored, sharded, reduced and
 *  updated once, in the owner: fsdp_param_data(user, alias_index) reads the owner's unsharded
 *  copy (the owner must be unsharded while the user uses it), and fsdp_grad_data(user,
 *  alias_index) is the owner's full gradient, so both uses' gradients add up there. Misuse is
 *  refused with FSDP_ERR_STATE naming the tie: resharding or reducing the owner while the user is
 *  unsharded, destroying the owner while tied. Collective over the world group. A parameter used
 *  twice inside one unit needs no tie: read it through fsdp_param_data and add both uses'
 *  gradients into its fsdp_grad_data.
 *  @param[in] user the unit that uses the tied parameter
 *  @param[in] alias the name the parameter has in `user`, unique there
 *  @param[in] owner the unit that stores the parameter
 *  @param[in] owner_index the parameter's index in `owner`
 *  @param[out] alias_index may be NULL; the index under which `user` sees it
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (alias NULL/empty/taken, owner the user itself, of
 * another context, or itself tied), OUT_OF_RANGE (i), MISMATCH; FSDP_ERR_INVALID_HANDLE,
 * FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_unit_tie(fsdp_unit_t user, const char* alias, fsdp_unit_t owner,
                                        int owner_index, int* alias_index);

/** Frees the unit and sets *unit to NULL. Local. Pointers obtained from it become invalid. The
 *  shard memory of a unit used by any subset of ranks (FSDP_USED_BY_ANY_RANKS, since 0.16) is an
 *  MPI window, whose freeing is collective: it is freed with the context, at fsdp_finalize.
 *  @param[in,out] unit the unit; set to NULL
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (NULL), STATE (an operation in flight, an optimizer uses
 * it, or units are tied to it); FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or
 * FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_unit_destroy(fsdp_unit_t* unit);

/** All-gathers the unit into one contiguous buffer (the all-gather's own output: no extra copy),
 *  in the unit's param_dtype (the shard rounded to it first, in place). A FSDP_LAYOUT_DIM0 unit's
 *  rows are placed into it instead (since 0.14; by the host transports directly, over NCCL or
 *  MPI through staging through a scratch buffer of the unit's size, one copy more, counted as
 *  unsharded memory while the all-gather runs). Collective over the shard group; local for a unit
 *  used by any subset of ranks (since 0.16, FSDP_USED_BY_ANY_RANKS): it reads the other ranks'
 *  shards one-sidedly, once each has ended the update phase this rank is past (it may wait for
 *  a peer still updating, fsdp_step_boundary). FSDP_ERR_STATE if
 * the caller already unsharded the unit. The caller reads parameters through fsdp_param_data;
 * writes to them are discarded at reshard. A unit the library prefetched (fsdp_set_prefetch) is
 * claimed: this call waits for its all-gather, if still in flight, instead of starting one.
 *  @param[in] unit the unit
 *  @return FSDP_SUCCESS; STATE (already unsharded by the caller), MPI;
 * FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_unshard(fsdp_unit_t unit);

/** Returns the unsharded buffer to the context's pool. Local. FSDP_ERR_STATE if the caller did
 *  not unshard the unit (a prefetch nobody claimed is the library's to release).
 *  In debug mode (FSDP_DEBUG=1, or a build without NDEBUG) with a node shared-memory transport,
 *  FSDP_ERR_CORRUPT when the node's copy changed while this rank held it (before its
 *  fsdp_reduce_grads of the unit, if it made one): a node peer wrote its shard (zero-copy
 *  storage) or wrote through a pointer kept past its own reshard. The unit is resharded all the
 *  same. Since 0.12, with cfg->hpz where it applies, a hold in which no gradient was written
 *  through fsdp_grad_data keeps the unit's node-local secondary partition here (doc/hpz.md).
 *  @param[in] unit the unit
 *  @return FSDP_SUCCESS; STATE (not unsharded; a unit tied to it still unsharded); CORRUPT (debug
 * mode: a node peer wrote into the node's copy while this rank held it); OUT_OF_MEMORY (hpZ: no
 * memory for the secondary partition; the unit is resharded without it);
 * FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_reshard(fsdp_unit_t unit);

/** Original parameter `index` inside the unsharded buffer, row-major, in the unit's param_dtype.
 *  Valid until fsdp_reshard. Local. FSDP_ERR_STATE if the unit is sharded (a prefetch nobody
 *  claimed counts as sharded: unshard it first).
 *  @param[in] unit the unit
 *  @param[in] index a parameter of the unit, 0-based, below its parameter count (tied aliases
 * follow the own parameters)
 *  @param[out] data receives the address
 *  @return FSDP_SUCCESS; OUT_OF_RANGE, STATE (sharded; for a tie, the owner sharded),
 * INVALID_ARGUMENT (data NULL); FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or
 * FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_param_data(fsdp_unit_t unit, int index, void** data);

/** Where the caller adds the full gradient of parameter `index` (row-major, in param_dtype). The
 *  first call after a communicating reduce acquires a zeroed full-size gradient buffer (trainable
 *  parameters only), so writing and adding are the same for one micro-batch; under
 *  fsdp_set_grad_sync(ctx, 0) it keeps the earlier micro-batches' sum, to be added to (where
 *  reduce_dtype is wider than param_dtype the sum is kept apart in reduce_dtype and this buffer
 *  starts from zero each micro-batch: add into it, never read it as the sum). Valid until
 *  fsdp_reduce_grads. Local. FSDP_ERR_INVALID_ARGUMENT for a parameter with requires_grad == 0.
 *  The unit need not be unsharded: the full gradient is separate from the parameters, so it may
 *  be written after fsdp_reshard (a tied embedding's gradient added once the output head ran).
 *  A gradient written here must reach a reduction before fsdp_optimizer_step (checked there).
 *  @param[in] unit the unit
 *  @param[in] index a parameter of the unit, 0-based, below its parameter count (tied aliases
 * follow the own parameters)
 *  @param[out] data receives the address
 *  @return FSDP_SUCCESS; OUT_OF_RANGE, INVALID_ARGUMENT (data NULL, requires_grad = 0);
 * FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_grad_data(fsdp_unit_t unit, int index, void** data);

/** Reduces the full gradients written through fsdp_grad_data: converted to reduce_dtype if it
 *  differs, reduce-scatter over the shard group, all-reduce over the replicate group, then (mean)
 *  division by W, accumulated into this rank's gradient shard (in the parameters' dtype).
 *  Releases the full gradient buffer. Collective over the shard and replicate groups; local and
 *  keeping the full gradient while gradient sync is off (fsdp_set_grad_sync), and for a unit used
 *  by any subset of ranks (since 0.16), whose gradients fsdp_step_boundary reduces. FSDP_ERR_STATE
 *  if no gradient was written since the last reduce.
 *  @param[in] unit the unit
 *  @return FSDP_SUCCESS; STATE (no gradient written since the last reduce), MPI;
 * FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_reduce_grads(fsdp_unit_t unit);

/** Sets the gradient shard, and a full gradient being written, to zero. Local.
 *  The gradient shard is marked zero rather than written (PyTorch's zero_grad(set_to_none=True)):
 *  the next fsdp_reduce_grads overwrites it instead of adding to it, and fsdp_shard_grad writes
 *  the zeros if called first. So fetch the fsdp_shard_grad pointer again after this call: the
 *  memory behind an older pointer stays valid but holds the old values until then.
 *  @param[in] unit the unit
 *  @return FSDP_SUCCESS; marks the gradient shard zero without writing it; fetch fsdp_shard_grad
 * again; FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle
 */
FSDP_EXPORT fsdp_status_t fsdp_zero_grads(fsdp_unit_t unit);

/** Since 0.9: marks trainable parameter `index` of `unit` as having no gradient (`none` = 1;
 *  PyTorch's p.grad = None), or gives it its gradient back (`none` = 0). A parameter's gradient
 *  is None from the unit's creation and after fsdp_zero_grads (every parameter's, as PyTorch's
 *  zero_grad(set_to_none=True) leaves them) until fsdp_reduce_grads with gradient sync on or
 *  fsdp_shard_grad gives the gradient shard (its zeros included); this call marks one parameter
 *  alone until the next of those: its part of the gradient shard is zeroed. libfsdp's
 *  optimizers skip a parameter whose gradient is None: its state, its update count
 *  (fsdp_optimizer_param_steps) and its weight decay stay as they are, as torch.optim leaves a
 *  parameter whose grad is None. Local; every rank of the unit's groups must mark the same
 *  parameters (a framework agrees on them first, for instance with fsdp_allreduce, as
 *  libfsdp.pytorch.FullyShard does), or the ranks' parts of one parameter are updated
 *  differently. Waits for the unit's reduction in flight.
 *  @param[in] unit the unit
 *  @param[in] index a parameter of the unit (not a tie's alias index)
 *  @param[in] none 1: no gradient; 0: its part of the gradient shard is its gradient (zeros
 *  when the whole shard had none: the other parameters keep none)
 *  @return FSDP_SUCCESS; OUT_OF_RANGE (index); INVALID_ARGUMENT (a frozen parameter);
 * FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_grad_set_none(fsdp_unit_t unit, int index, int none);

/** Since 0.9: for every parameter i of `unit`, whether its gradient is None
 *  (fsdp_grad_set_none): none[i] = 1 if so, else 0; frozen parameters read 1. Local.
 *  @param[in] unit the unit
 *  @param[out] none `count` flags
 *  @param[in] count the unit's parameter count (fsdp_unit_info's nparams)
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (NULL none, count not the parameter count);
 * FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_grad_none(fsdp_unit_t unit, int* none, int count);

/* ---- The sharded view, for optimizers written by the caller ---------------------------------- */

/** This rank's parameter shard: `numel` elements of the unit's dtype, padding included. The
 *  pointer stays valid for the unit's life. Local. Either output may be NULL. For a unit with
 *  zero-copy storage (fsdp_unit_zero_copy), the shard is part of what the node's ranks read while
 *  they hold the unit unsharded: write it only when none of them still does. Since 0.12, with
 *  hpZ (cfg->hpz), asking for the address drops the unit's secondary partition, so the next
 *  unshard gathers the shards as written: write through an address asked for after the unit's
 *  last reshard (doc/hpz.md).
 *  @param[in] unit the unit
 *  @param[out] data may be NULL; the shard's address
 *  @param[out] numel may be NULL; receives the element count
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (shard_grad of a unit with every parameter frozen);
 * UNSUPPORTED (since 0.13: shard_data, whichever output is asked for, with cfg->hfsdp and a
 * param_dtype other than the unit's dtype, where no rank holds a shard in the unit's dtype: the
 * masters are split across replicas);
 * FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_shard_data(fsdp_unit_t unit, void** data, size_t* numel);

/** This rank's gradient shard: the first `numel` elements of the shard's layout (the trainable
 *  section; frozen parameters come after it in the shard and have no gradient), in the
 *  parameters' dtype. Zero until a gradient is reduced into it. The pointer stays valid for the
 *  unit's life; fetch it again after fsdp_zero_grads.
 *  @param[in] unit the unit
 *  @param[out] data may be NULL; the gradient shard's address
 *  @param[out] numel may be NULL; receives the element count
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (shard_grad of a unit with every parameter frozen);
 *  UNSUPPORTED with cfg->hfsdp (since 0.12: the gradient shard then covers this rank's piece,
 *  which only the library's optimizers update);
 * FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_shard_grad(fsdp_unit_t unit, void** data, size_t* numel);

/** The part of original parameter `index` this rank's shard holds: elements
 *  [param_offset, param_offset + length) of the flattened parameter live at
 *  [shard_offset, shard_offset + length) of the shard. length == 0 when it holds none of it.
 *  A tied alias is stored once, by its owner: its range is in the owner's shard
 *  (fsdp_shard_data(owner)). Local. Any output may be NULL. With HFSDP's split masters (since
 *  0.13; cfg->hfsdp) the range is still fsdp.h's layout, which no rank then holds as one buffer.
 *  @param[in] unit the unit
 *  @param[in] index a parameter of the unit, 0-based, below its parameter count (tied aliases
 * follow the own parameters)
 *  @param[out] shard_offset may be NULL; where the part starts in the shard
 *  @param[out] param_offset may be NULL; where the part starts in the flattened parameter
 *  @param[out] length may be NULL; elements held (0: none)
 *  @return FSDP_SUCCESS; OUT_OF_RANGE, INVALID_ARGUMENT (NULL output where required);
 * FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_param_shard_range(fsdp_unit_t unit, int index, size_t* shard_offset,
                                                 size_t* param_offset, size_t* length);

/** Sizes of the unit in elements: all parameters, the unsharded buffer (with the alignment
 * padding), and one shard. Local. Any output may be NULL.
 *  @param[in] unit the unit
 *  @param[out] numel may be NULL; all parameters' elements
 *  @param[out] padded_numel may be NULL; the unsharded buffer: F * shard_numel
 *  @param[out] shard_numel may be NULL; one shard
 *  @return FSDP_SUCCESS; FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED
 * for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_unit_numel(fsdp_unit_t unit, size_t* numel, size_t* padded_numel,
                                          size_t* shard_numel);

/** Number of parameters, and the unit's dtype. Local. Either output may be NULL.
 *  @param[in] unit the unit
 *  @param[out] nparams may be NULL; own parameters
 *  @param[out] dtype may be NULL; the storage dtype
 *  @return FSDP_SUCCESS; FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED
 * for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_unit_info(fsdp_unit_t unit, int* nparams, fsdp_dtype_t* dtype);

/** The unit's dtypes after defaults: parameters (storage and master), param_dtype, reduce_dtype.
 *  Local. Any output may be NULL.
 *  @param[in] unit the unit
 *  @param[out] storage may be NULL; the parameters' (and master shard's) dtype
 *  @param[out] param_dtype may be NULL; the compute dtype of unsharded parameters and full
 * gradients
 *  @param[out] reduce_dtype may be NULL; the gradient communication dtype
 *  @return FSDP_SUCCESS; FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED
 * for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_unit_precision(fsdp_unit_t unit, fsdp_dtype_t* storage,
                                              fsdp_dtype_t* param_dtype,
                                              fsdp_dtype_t* reduce_dtype);

/** Since 0.10: the dtype a parameter of `dtype` is stored in (its master copy and shard):
 *  float64 stays float64; float32, bfloat16 and float16 are stored in float32 (a 16-bit model
 *  then computes in its own dtype through param_dtype). For bindings that create units from
 *  parameters of any floating dtype. Local; thread-safe.
 *  @param[in] dtype a parameter's dtype (not FSDP_DTYPE_AUTO)
 *  @param[out] storage the storage dtype, FSDP_FLOAT32 or FSDP_FLOAT64
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (dtype not an fsdp_dtype_t, storage NULL) */
FSDP_EXPORT fsdp_status_t fsdp_storage_dtype(fsdp_dtype_t dtype, fsdp_dtype_t* storage);

/** Since 0.10: the param_dtype and reduce_dtype a unit of `storage` parameters created in `ctx`
 *  with these options (fsdp_unit_options_t) would get, or the error its creation would report:
 *  unset dtypes take the context's, then param_dtype the storage dtype and reduce_dtype the
 *  param_dtype; float32 parameters compute and reduce in float32, bfloat16 or float16, float64
 *  parameters only in float64. Local; thread-safe (ctx is only read).
 *  @param[in] ctx a context whose fsdp_config_t precision applies, or NULL for none
 *  @param[in] storage FSDP_FLOAT32 or FSDP_FLOAT64 (fsdp_storage_dtype)
 *  @param[in] param_dtype the unit's request, or FSDP_DTYPE_AUTO
 *  @param[in] reduce_dtype the unit's request, or FSDP_DTYPE_AUTO
 *  @param[out] param_out may be NULL; the resolved param_dtype
 *  @param[out] reduce_out may be NULL; the resolved reduce_dtype
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (a dtype out of range, storage not float32 or float64,
 * a combination the library does not compute); FSDP_ERR_INVALID_HANDLE,
 * FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad non-NULL ctx */
FSDP_EXPORT fsdp_status_t fsdp_precision_resolve(fsdp_context_t ctx, fsdp_dtype_t storage,
                                                 fsdp_dtype_t param_dtype,
                                                 fsdp_dtype_t reduce_dtype, fsdp_dtype_t* param_out,
                                                 fsdp_dtype_t* reduce_out);

/** Since 0.7: whether the unit keeps its shard inside the node's unsharded copy
 *  (FSDP_TRANSPORT_SHM_ZERO_COPY, for a unit whose shard group lies on one node, whose
 *  param_dtype is its storage dtype, whose parameters are all trainable or all frozen and, since
 *  0.14, whose layout is FSDP_LAYOUT_FLAT or whose shard group is one rank). Such a
 *  unit's fsdp_unshard moves no bytes and takes no unsharded memory; its shard
 *  (fsdp_shard_data) must be written only when no rank of the node still reads the unit's
 *  parameters. The same on every rank of a shard group. Local.
 *  @param[in] unit the unit
 *  @param[out] zero_copy 1 or 0
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (NULL output); FSDP_ERR_INVALID_HANDLE,
 * FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_unit_zero_copy(fsdp_unit_t unit, int* zero_copy);

/** Since 0.9: every original parameter's full master values (the storage dtype: the float32 or
 *  float64 master the optimizer updates, not the param_dtype copy fsdp_unshard gives), row-major,
 *  into values[i]; values[i] may be NULL to skip parameter i (tied aliases are not included:
 *  gather their owner). One all-gather of the shards; the unit may be sharded or unsharded.
 *  Collective over the shard group (every rank of it passes the same unit); since 0.13 over
 *  every rank of the context where HFSDP splits the unit's masters (cfg->hfsdp with a
 *  param_dtype other than the unit's dtype: the pieces are gathered across replicas first).
 *  @param[in] unit the unit
 *  @param[in] values its parameter count of pointers, each NULL or room for that parameter's
 * numel elements of the unit's dtype (host memory; device memory too in a CUDA context)
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (values NULL), MISMATCH (another rank's argument was
 * refused), OUT_OF_MEMORY, MPI; FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or
 * FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_gather_params(fsdp_unit_t unit, void* const* values);

/** Element count of original parameter `index`. Local.
 *  @param[in] unit the unit
 *  @param[in] index a parameter of the unit, 0-based, below its parameter count (tied aliases
 * follow the own parameters)
 *  @param[out] numel the parameter's element count
 *  @return FSDP_SUCCESS; OUT_OF_RANGE, INVALID_ARGUMENT (NULL output where required);
 * FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_param_numel(fsdp_unit_t unit, int index, size_t* numel);

/** Since 0.4. Parameter `index` (own or tied) as it was described: name (the alias for a tied
 *  one; valid for the unit's life), ndim, shape (row-major extents; `shape` must hold
 *  FSDP_MAX_NDIM values), dtype, requires_grad. For bindings that view parameters as typed arrays
 *  of their shape. Local. Any output may be NULL.
 *  @param[in] unit the unit
 *  @param[in] index a parameter of the unit, 0-based, below its parameter count (tied aliases
 * follow the own parameters)
 *  @param[out] name may be NULL; the parameter's name
 *  @param[out] ndim may be NULL; its number of dimensions
 *  @param[out] shape may be NULL; room for FSDP_MAX_NDIM extents, row-major
 *  @param[out] dtype may be NULL
 *  @param[out] requires_grad may be NULL; 0 for a frozen parameter
 *  @return FSDP_SUCCESS; OUT_OF_RANGE; FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or
 * FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_param_info(fsdp_unit_t unit, int index, const char** name, int* ndim,
                                          int64_t* shape, fsdp_dtype_t* dtype, int* requires_grad);

/* ---- DLPack: every buffer in one exchange format (since 0.15) -------------------------------- */

/* DLPack's managed tensor (dlpack.h, DLPack 1.0 or later): include a dlpack.h to read it. */
struct DLManagedTensorVersioned;
/* DLPack's managed tensor before 1.0, for older consumers (fsdp_dlpack_unversioned). */
struct DLManagedTensor;

/** Since 0.15: a buffer of a unit, for fsdp_dlpack. */
typedef enum fsdp_buffer_e {
  FSDP_BUFFER_PARAM = 0,      /**< unsharded parameter `index` (fsdp_param_data): its shape */
  FSDP_BUFFER_GRAD = 1,       /**< full gradient of parameter `index` (fsdp_grad_data): its shape */
  FSDP_BUFFER_SHARD = 2,      /**< this rank's shard (fsdp_shard_data): 1-D, shard_numel */
  FSDP_BUFFER_GRAD_SHARD = 3, /**< this rank's gradient shard (fsdp_shard_grad): 1-D */
  FSDP_BUFFER_COUNT
} fsdp_buffer_t;

/** Since 0.15: a buffer of `unit` as a DLPack tensor: a new DLManagedTensorVersioned describing
 *  exactly the memory the raw call gives (fsdp_param_data, fsdp_grad_data, fsdp_shard_data,
 *  fsdp_shard_grad for `which`; that call runs, with its effects and its errors). Its data is that
 *  call's pointer (byte_offset 0); device kDLCPU for host memory, kDLCUDAHost for pinned host
 *  memory (the shards of a CUDA context with cpu_offload), kDLCUDA and the context's device for
 *  CUDA memory, as the context placed the buffer; dtype float32, float64, float16 (kDLFloat) or
 *  bfloat16 (kDLBfloat): param_dtype for PARAM and GRAD, the unit's storage dtype for the shards;
 *  ndim and shape the parameter's (PARAM, GRAD) or 1 and the raw call's numel (the shards);
 *  strides C-contiguous, always filled; version 1.0 or later (DLPACK_MAJOR_VERSION 1); flags 0,
 *  as the raw pointer is writable memory, but an unsharded parameter is for reading: with node
 *  shared memory the node's ranks share it (mapped read-only in debug mode, doc/shared-memory.md)
 *  and any write is discarded at reshard.
 *  Ownership: the tensor is the caller's: call (*out)->deleter(*out) once when done, which frees
 *  the tensor, its shape and strides, never the library's memory. The memory it describes is the
 *  library's and stays valid exactly as long as the raw pointer would: PARAM until fsdp_reshard,
 *  GRAD until fsdp_reduce_grads, SHARD and GRAD_SHARD for the unit's life (fetch GRAD_SHARD again
 *  after fsdp_zero_grads); every one until fsdp_unit_destroy. Local.
 *  @param[in] unit the unit
 *  @param[in] which the buffer
 *  @param[in] index PARAM, GRAD: a parameter of the unit (tied aliases follow the own
 * parameters); SHARD, GRAD_SHARD: must be 0
 *  @param[out] out receives the new tensor; unchanged on error
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (out NULL, which not an fsdp_buffer_t, index not 0 for
 * a shard, GRAD of a frozen parameter, GRAD_SHARD of a unit with every parameter frozen),
 * OUT_OF_RANGE (index), STATE (PARAM of a sharded unit), UNSUPPORTED (as fsdp_shard_data and
 * fsdp_shard_grad with cfg->hfsdp), OUT_OF_MEMORY; FSDP_ERR_INVALID_HANDLE,
 * FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_dlpack(fsdp_unit_t unit, fsdp_buffer_t which, int index,
                                      struct DLManagedTensorVersioned** out);

/** Since 0.15: the same tensor for a consumer of DLPack before 1.0 (PyTorch before 2.4, numpy
 *  before 2.1): a new DLManagedTensor with `tensor`'s dl_tensor (its shape and strides arrays
 *  included), which takes `tensor` over: its deleter frees itself and calls tensor's deleter.
 *  On success the caller calls (*out)->deleter(*out) instead of tensor's deleter; on error
 *  `tensor` stays the caller's. The older struct has no flags: use it only for a tensor whose
 *  flags are 0, as every tensor of fsdp_dlpack and fsdp_optimizer_state_dlpack is. Local;
 *  thread-safe.
 *  @param[in] tensor a tensor of fsdp_dlpack or fsdp_optimizer_state_dlpack
 *  @param[out] out receives the new tensor; unchanged on error
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (tensor or out NULL, tensor's major version not 1,
 * tensor's flags not 0), OUT_OF_MEMORY */
FSDP_EXPORT fsdp_status_t fsdp_dlpack_unversioned(struct DLManagedTensorVersioned* tensor,
                                                  struct DLManagedTensor** out);

/* ------------------------------------------------------------------------------------------------
 * Asynchronous unshard and reduce, prefetch (since 0.2). With MPI initialized at
 * MPI_THREAD_MULTIPLE, the context runs its collectives on a progress thread, in the order they
 * were started (the same on every rank), while the caller computes; otherwise they run at once
 * in the calling thread (correct, without overlap). Any call that needs a pending result waits
 * for it (fsdp_param_data, fsdp_reshard, fsdp_grad_data, fsdp_shard_grad, optimizer steps...).
 * --------------------------------------------------------------------------------------------- */
/** An asynchronous operation in flight; complete it with fsdp_wait. */
typedef struct fsdp_request_s* fsdp_request_t;

/** Starts the unit's all-gather and returns at once. `req` (may be NULL) receives a request for
 *  fsdp_wait; fsdp_unshard or fsdp_param_data on the unit also wait for it. Collective over the
 *  shard group. The rate limiter applies (fsdp_config_t.max_unsharded). A unit the library
 *  prefetched is claimed instead: the request waits for its all-gather.
 *  @param[in] unit the unit
 *  @param[out] req may be NULL; the request
 *  @return FSDP_SUCCESS; STATE (already unsharded or gathering by the caller's call), MPI;
 * FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_unshard_async(fsdp_unit_t unit, fsdp_request_t* req);

/** Starts the unit's gradient reduction and returns at once; the full gradient buffer must not be
 *  touched until it completes. `req` as for fsdp_unshard_async (under fsdp_set_grad_sync(ctx, 0)
 *  nothing is started and the request is complete). Collective like fsdp_reduce_grads.
 *  @param[in] unit the unit
 *  @param[out] req may be NULL; the request
 *  @return FSDP_SUCCESS; STATE (no gradient written since the last reduce), MPI;
 * FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_reduce_grads_async(fsdp_unit_t unit, fsdp_request_t* req);

/** Waits for the request, applies its result and frees it; sets *req to NULL. A request can be
 *  waited on once: FSDP_ERR_INVALID_HANDLE for NULL, FSDP_ERR_DESTROYED_HANDLE for a copy of a
 *  request already waited on. Returns the operation's own error if it failed. Local.
 *  @param[in,out] req the request; set to NULL
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (NULL pointer), INVALID_HANDLE (NULL request: already
 * waited on), DESTROYED_HANDLE (a copy of a request already waited on), the operation's own error;
 * FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_wait(fsdp_request_t* req);

/** Waits for whatever is in flight for the unit (a prefetch, an asynchronous reduce). Local.
 *  @param[in] unit the unit
 *  @return FSDP_SUCCESS; the pending operation's error; FSDP_ERR_INVALID_HANDLE,
 * FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_unit_wait(fsdp_unit_t unit);

/** Whether the context has a progress thread (1) or runs asynchronous operations at once (0).
 *  @param[in] ctx the context
 *  @param[out] progress_thread 1 with a progress thread
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (NULL); FSDP_ERR_INVALID_HANDLE,
 * FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_context_async(fsdp_context_t ctx, int* progress_thread);

/** Prefetching (both off by default): during forward (backward), each fsdp_unshard or
 *  fsdp_unshard_async the caller makes also starts the all-gather of the unit that followed it in
 *  the previous iteration's forward (backward), when the rate limiter allows. Prefetch is a hint
 *  the caller never sees: the caller's next unshard of that unit claims it; one nobody claims is
 *  resharded at the next fsdp_begin_forward/fsdp_begin_backward, before an optimizer step, norm
 *  or checkpoint, and at fsdp_unit_destroy, on every rank alike (calls every rank makes). A
 *  prefetched unit counts as sharded for every call; a shard written through fsdp_shard_data
 *  during a phase may miss a prefetch already gathered (write shards between phases, or turn
 *  prefetch off). Debug mode checks that every rank claims the same prefetches. fsdp_memory_stats
 *  counts prefetches
 *  started, used, released unused and skipped by the rate limiter (doc/training.md). Local.
 *  @param[in] ctx the context
 *  @param[in] forward 1: prefetch during forward
 *  @param[in] backward 1: prefetch during backward
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (not 0/1); FSDP_ERR_INVALID_HANDLE,
 * FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_set_prefetch(fsdp_context_t ctx, int forward, int backward);

/** Marks the start of an iteration's forward pass (collective over the world group: it checks
 *  that every rank recorded the same unshard order last iteration) and of its backward pass
 *  (local). Prefetch follows the order recorded between these marks; what the last phase
 *  prefetched and nobody claimed is resharded here.
 *  @param[in] ctx the context
 *  @return FSDP_SUCCESS; MISMATCH (ranks unsharded in different orders last iteration);
 * FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_begin_forward(fsdp_context_t ctx);
/** Marks the start of an iteration's backward pass (see fsdp_begin_forward). Local.
 *  @param[in] ctx the context
 *  @return FSDP_SUCCESS; FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED
 * for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_begin_backward(fsdp_context_t ctx);

/* ------------------------------------------------------------------------------------------------
 * Sharded optimizers (since 0.2). Each rank updates only its shard (the master copy), with state
 * for its shard only, in the parameters' dtype; frozen parameters have no state. Updates follow
 * PyTorch's SGD and AdamW element by element, so they equal the non-sharded optimizer's.
 * --------------------------------------------------------------------------------------------- */
/** The optimizers the library implements. */
typedef enum fsdp_optimizer_kind {
  FSDP_OPTIMIZER_SGD = 0,   /**< momentum, dampening, Nesterov, (L2) weight decay, maximize */
  FSDP_OPTIMIZER_ADAMW = 1, /**< bias correction, decoupled weight decay, AMSGrad, maximize */
  FSDP_OPTIMIZER_KIND_COUNT
} fsdp_optimizer_kind_t;

/** Hyperparameters of one group. A struct that grows at its end: set `size` (use an initializer;
 * a caller compiled before 0.10, whose struct ends at eps, gets amsgrad = maximize = 0).
 * SGD reads lr, weight_decay, momentum, dampening, nesterov, maximize; AdamW reads lr,
 * weight_decay, beta1, beta2, eps, amsgrad, maximize. */
typedef struct fsdp_hyperparams {
  size_t size;         /**< sizeof(fsdp_hyperparams_t) as the caller compiled it */
  double lr;           /**< >= 0 */
  double weight_decay; /**< >= 0 */
  double momentum;     /**< [0, 1) */
  double dampening;    /**< [0, 1] */
  int nesterov;        /**< needs momentum > 0 and dampening == 0 */
  double beta1;        /**< [0, 1) */
  double beta2;        /**< [0, 1) */
  double eps;          /**< > 0 */
  /** Since 0.10, 0 or 1, AdamW only (SGD refuses 1): AMSGrad, the denominator from the largest
   *  second moment so far, kept as the state buffer "max_exp_avg_sq" (PyTorch's amsgrad) */
  int amsgrad;
  /** Since 0.10, 0 or 1: maximize the objective, stepping along the gradient (PyTorch's
   *  maximize) */
  int maximize;
} fsdp_hyperparams_t;

/** PyTorch's SGD defaults (the library's only statement of them). */
#define FSDP_SGD_DEFAULTS \
  { sizeof(fsdp_hyperparams_t), 1e-3, 0.0, 0.0, 0.0, 0, 0.9, 0.999, 1e-8, 0, 0 }
/** PyTorch's AdamW defaults (the library's only statement of them). */
#define FSDP_ADAMW_DEFAULTS \
  { sizeof(fsdp_hyperparams_t), 1e-3, 1e-2, 0.0, 0.0, 0, 0.9, 0.999, 1e-8, 0, 0 }

/** An optimizer over `nunits` units of the context (nunits >= 1, distinct). `defaults` NULL: the
 *  kind's defaults above. The units cannot be destroyed while the optimizer lives. Collective
 *  over the world group; kind, defaults and units must agree (checked). State is allocated at
 *  the first step that has a gradient.
 *  @param[in] ctx the context
 *  @param[in] kind FSDP_OPTIMIZER_SGD or FSDP_OPTIMIZER_ADAMW
 *  @param[in] defaults NULL for the kind's defaults, or hyperparameters with `size` set
 *  @param[in] nunits number of units, >= 1
 *  @param[in] units nunits distinct units of ctx
 *  @param[out] opt the new optimizer
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (kind, n < 1, units NULL, a unit twice or of another
 * context, hyperparameter out of range), MISMATCH; FSDP_ERR_INVALID_HANDLE,
 * FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_optimizer_create(fsdp_context_t ctx, fsdp_optimizer_kind_t kind,
                                                const fsdp_hyperparams_t* defaults, int nunits,
                                                const fsdp_unit_t* units, fsdp_optimizer_t* opt);

/** Frees the optimizer and its state, sets *opt to NULL. Local.
 *  @param[in,out] opt the optimizer; set to NULL
 *  @return FSDP_SUCCESS; FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED
 * for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_optimizer_destroy(fsdp_optimizer_t* opt);

/** A hyperparameter group for the parameters whose name matches `pattern` (a shell glob, fnmatch:
 *  "*.bias", "*norm*") and that no earlier group took; group 0 holds the defaults. Shards cut
 *  across parameters, so each rank updates each slice of its shard with its parameter's group.
 *  Collective over the world group (pattern and values must agree). Outputs may be NULL:
 *  `group` the new group's index, `nmatched` the number of parameters it took (0 often means a
 *  typo in the pattern).
 *  @param[in] opt the optimizer
 *  @param[in] pattern a shell glob over parameter names (fnmatch)
 *  @param[in] hp hyperparameters, `size` set
 *  @param[out] group may be NULL; the new group's index
 *  @param[out] nmatched may be NULL; parameters the group took
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (pattern NULL/empty, hp NULL or out of range), MISMATCH;
 * FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_optimizer_add_group(fsdp_optimizer_t opt, const char* pattern,
                                                   const fsdp_hyperparams_t* hp, int* group,
                                                   int* nmatched);

/** Reads or replaces a group's hyperparameters (-1 in set_lr: every group). Local: every rank must
 *  make the same changes (for a schedule, at the same step).
 *  @param[in] opt the optimizer
 *  @param[in] group a hyperparameter group index (0: the defaults)
 *  @param[out] hp hp->size set by the caller
 *  @return FSDP_SUCCESS; OUT_OF_RANGE (group), INVALID_ARGUMENT; FSDP_ERR_INVALID_HANDLE,
 * FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_optimizer_get_hyperparams(fsdp_optimizer_t opt, int group,
                                                         fsdp_hyperparams_t* hp);
/** Replaces a group's hyperparameters (see fsdp_optimizer_get_hyperparams). Local: every rank must
 * make the same change.
 *  @param[in] opt the optimizer
 *  @param[in] group a hyperparameter group index (0: the defaults)
 *  @param[in] hp hyperparameters, `size` set
 *  @return FSDP_SUCCESS; OUT_OF_RANGE (group), INVALID_ARGUMENT; FSDP_ERR_INVALID_HANDLE,
 * FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_optimizer_set_hyperparams(fsdp_optimizer_t opt, int group,
                                                         const fsdp_hyperparams_t* hp);
/** Sets the learning rate of a group, or of every group. Local: every rank must make the same
 * change (for a schedule, at the same step).
 *  @param[in] opt the optimizer
 *  @param[in] group a group index, or -1 for every group
 *  @param[in] lr the learning rate, >= 0
 *  @return FSDP_SUCCESS; OUT_OF_RANGE (group), INVALID_ARGUMENT; FSDP_ERR_INVALID_HANDLE,
 * FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_optimizer_set_lr(fsdp_optimizer_t opt, int group, double lr);

/** One update of every unit whose gradient shard holds a reduced gradient (a unit whose gradient
 *  was zeroed and not reduced since is skipped, like a parameter whose grad is None). Local;
 *  with cfg->hfsdp (since 0.12) collective over the replicate group: each rank updates its
 *  piece of every unit, then the pieces are all-gathered across replicas into the shard.
 *  FSDP_ERR_STATE if a unit of it is unsharded (the update would not reach the unsharded copy),
 *  or has a gradient written through fsdp_grad_data that no reduction took (since 0.9, checked
 *  always: the step would not see it; reduce it with gradient sync on, or discard it with
 *  fsdp_zero_grads). A refused step changes nothing. Units prefetched by the library and not
 *  claimed are resharded first (prefetch is a hint: doc/training.md). Since 0.16, a unit used by
 *  any subset of ranks is updated only in the update phase fsdp_step_boundary opens:
 *  FSDP_ERR_STEP_BOUNDARY if this rank holds an unreduced gradient of one (it skipped the
 *  boundary), made no boundary yet, or ended the phase with another call since (named).
 *  @param[in] opt the optimizer
 *  @return FSDP_SUCCESS; STATE (a unit of it is unsharded, or holds an unreduced gradient);
 *  STEP_BOUNDARY (since 0.16, see above);
 * FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_optimizer_step(fsdp_optimizer_t opt);

/** fsdp_zero_grads on every unit of the optimizer. Local.
 *  @param[in] opt the optimizer
 *  @return FSDP_SUCCESS; FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED
 * for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_optimizer_zero_grad(fsdp_optimizer_t opt);

/** Since 0.8: state buffer `name` of `unit` on this rank ("exp_avg" or "exp_avg_sq" for AdamW,
 *  and since 0.10 "max_exp_avg_sq" once a group of it has had amsgrad on; "momentum" for SGD):
 *  `numel` elements in the unit's dtype, laid out like its gradient shard
 *  (fsdp_shard_grad: the trainable section of the shard; fsdp_param_shard_range gives where each
 *  parameter's part lies), in the context's memory space. A buffer not allocated yet (no update
 *  made) is allocated and zeroed by this call. Writing it and fsdp_optimizer_set_steps restores
 *  an optimizer from another source (a converter, a peer's checkpoint). The pointer stays valid
 *  for the optimizer's life. Local.
 *  @param[in] opt the optimizer
 *  @param[in] unit one of the optimizer's units with trainable parameters
 *  @param[in] name the state buffer's name
 *  @param[out] data may be NULL; the buffer's address
 *  @param[out] numel may be NULL; its element count (fsdp_shard_grad's)
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (NULL or unknown name, a unit the optimizer does not
 * update, a unit with every parameter frozen); UNSUPPORTED with cfg->hfsdp (since 0.12: the
 * state then covers this rank's piece); FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE
 * or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_optimizer_state(fsdp_optimizer_t opt, fsdp_unit_t unit,
                                               const char* name, void** data, size_t* numel);

/** Since 0.15: state buffer `name` of `unit` (fsdp_optimizer_state, which runs) as a DLPack
 *  tensor, as fsdp_dlpack gives a unit's buffers: 1-D, numel elements of the unit's storage
 *  dtype, in the memory the context keeps shards in (kDLCPU, kDLCUDAHost with cpu_offload on a
 *  CUDA context, or kDLCUDA), flags 0. The caller calls (*out)->deleter(*out) once, which never
 *  frees the state; the state stays valid for the optimizer's life. Local.
 *  @param[in] opt the optimizer
 *  @param[in] unit one of the optimizer's units with trainable parameters
 *  @param[in] name the state buffer's name
 *  @param[out] out receives the new tensor; unchanged on error
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (out NULL, and as fsdp_optimizer_state), UNSUPPORTED
 * (as fsdp_optimizer_state), OUT_OF_MEMORY; FSDP_ERR_INVALID_HANDLE,
 * FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_optimizer_state_dlpack(fsdp_optimizer_t opt, fsdp_unit_t unit,
                                                      const char* name,
                                                      struct DLManagedTensorVersioned** out);

/** Since 0.8: updates `opt` made to `unit` so far (AdamW's bias-correction step t). Local.
 *  @param[in] opt the optimizer
 *  @param[in] unit one of the optimizer's units
 *  @param[out] steps the count
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (NULL steps, a unit the optimizer does not update);
 * FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_optimizer_steps(fsdp_optimizer_t opt, fsdp_unit_t unit,
                                               int64_t* steps);

/** Since 0.8: sets the update count of `unit` (>= 0); the next update is number steps + 1, as
 *  after that many updates (SGD's momentum buffer continues rather than restarts when steps > 0).
 *  Local.
 *  @param[in] opt the optimizer
 *  @param[in] unit one of the optimizer's units
 *  @param[in] steps >= 0
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (steps < 0, a unit the optimizer does not update);
 * FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_optimizer_set_steps(fsdp_optimizer_t opt, fsdp_unit_t unit,
                                                   int64_t steps);

/** Since 0.9: updates `opt` made to parameter `index` of `unit` (AdamW's bias-correction step t
 *  for that parameter). It is the unit's count (fsdp_optimizer_steps, the largest of its
 *  parameters') unless steps skipped the parameter (fsdp_grad_set_none). Local.
 *  @param[in] opt the optimizer
 *  @param[in] unit one of the optimizer's units
 *  @param[in] index a parameter of the unit; a frozen one's count is 0
 *  @param[out] steps the count
 *  @return FSDP_SUCCESS; OUT_OF_RANGE (index); INVALID_ARGUMENT (NULL steps, a unit the optimizer
 * does not update); FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a
 * bad handle */
FSDP_EXPORT fsdp_status_t fsdp_optimizer_param_steps(fsdp_optimizer_t opt, fsdp_unit_t unit,
                                                     int index, int64_t* steps);

/** Since 0.9: sets the update count of parameter `index` of `unit` alone (>= 0), as
 *  fsdp_optimizer_set_steps does for all of them. Local.
 *  @param[in] opt the optimizer
 *  @param[in] unit one of the optimizer's units
 *  @param[in] index a trainable parameter of the unit
 *  @param[in] steps >= 0
 *  @return FSDP_SUCCESS; OUT_OF_RANGE (index); INVALID_ARGUMENT (steps < 0, a frozen parameter, a
 * unit the optimizer does not update); FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or
 * FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_optimizer_set_param_steps(fsdp_optimizer_t opt, fsdp_unit_t unit,
                                                         int index, int64_t steps);

/** Since 0.10: the hyperparameter group of the parameter `name` among groups whose patterns are
 *  patterns[0..npatterns-1], by the rule of fsdp_optimizer_add_group and of checkpoints: the
 *  first group g >= 1 whose pattern matches (fnmatch(3) with no flags: '\' quotes the next
 *  character, '*' and '?' match any character, '.' and '/' included), else group 0 (the
 *  defaults). For converters and bindings that place parameters into groups (libfsdp.dcp).
 *  Local; thread-safe.
 *  @param[in] patterns npatterns patterns, group 0's first (never matched: may be NULL or "")
 *  @param[in] npatterns >= 1
 *  @param[in] name a parameter name
 *  @param[out] group the group index, in [0, npatterns)
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (npatterns < 1, patterns NULL, patterns[g >= 1] NULL or
 * empty, name NULL, group NULL) */
FSDP_EXPORT fsdp_status_t fsdp_param_group_of(const char* const* patterns, int npatterns,
                                              const char* name, int* group);

/** Since 0.10: what an optimizer kind keeps and reads, for bindings and converters: its name as
 *  checkpoints write it ("sgd", "adamw"), its state buffers (fsdp_optimizer_state_name, the names
 *  fsdp_optimizer_state takes), the fsdp_hyperparams_t fields its update reads
 *  (fsdp_optimizer_hyperparam_name; the others are ignored), and whether the update reads the
 *  update count itself (1: AdamW's bias correction, so a restored state needs its true count) or
 *  only whether it is 0 (0: SGD, whose momentum buffer restarts from the gradient at a count of 0
 *  and continues at any other). Local; thread-safe. Outputs may be NULL.
 *  @param[in] kind FSDP_OPTIMIZER_SGD or FSDP_OPTIMIZER_ADAMW
 *  @param[out] name may be NULL; the kind's name (static storage)
 *  @param[out] nstates may be NULL; its number of state buffers
 *  @param[out] nhyperparams may be NULL; the number of hyperparameters it reads
 *  @param[out] step_count may be NULL; 1 if its update reads the count, 0 if only whether it is 0
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (kind out of range) */
FSDP_EXPORT fsdp_status_t fsdp_optimizer_kind_info(fsdp_optimizer_kind_t kind, const char** name,
                                                   int* nstates, int* nhyperparams,
                                                   int* step_count);

/** Since 0.10: the name of state buffer `index` of an optimizer kind (fsdp_optimizer_kind_info),
 *  in the order checkpoints store them ("momentum"; "exp_avg", "exp_avg_sq", "max_exp_avg_sq"),
 *  and the fsdp_hyperparams_t field that must be (or have been) on for the buffer to exist
 *  ("amsgrad" for max_exp_avg_sq; NULL for a buffer every parameter with state has). Local;
 *  thread-safe.
 *  @param[in] kind FSDP_OPTIMIZER_SGD or FSDP_OPTIMIZER_ADAMW
 *  @param[in] index in [0, nstates)
 *  @param[out] name the name, in static storage (valid while the library is loaded)
 *  @param[out] kept_when may be NULL; the field's name in static storage, or NULL
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (kind out of range, name NULL); OUT_OF_RANGE (index) */
FSDP_EXPORT fsdp_status_t fsdp_optimizer_state_name(fsdp_optimizer_kind_t kind, int index,
                                                    const char** name, const char** kept_when);

/** Since 0.10: the name of the `index`th fsdp_hyperparams_t field an optimizer kind's update reads
 *  ("lr", "weight_decay", "momentum", "dampening", "nesterov", "maximize"; "lr", "weight_decay",
 *  "beta1", "beta2", "eps", "amsgrad", "maximize"), spelled as the struct's member. Local;
 *  thread-safe.
 *  @param[in] kind FSDP_OPTIMIZER_SGD or FSDP_OPTIMIZER_ADAMW
 *  @param[in] index in [0, nhyperparams) (fsdp_optimizer_kind_info)
 *  @param[out] name the field's name, in static storage
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (kind out of range, name NULL); OUT_OF_RANGE (index) */
FSDP_EXPORT fsdp_status_t fsdp_optimizer_hyperparam_name(fsdp_optimizer_kind_t kind, int index,
                                                         const char** name);

/** Since 0.10: the kind's default hyperparameters, FSDP_SGD_DEFAULTS or FSDP_ADAMW_DEFAULTS as
 *  this library was built with them (what fsdp_optimizer_create takes for NULL defaults and for
 *  the fields of a shorter struct), for bindings that cannot read the macros. Local; thread-safe.
 *  @param[in] kind FSDP_OPTIMIZER_SGD or FSDP_OPTIMIZER_ADAMW
 *  @param[in,out] hp hp->size set by the caller; that many bytes are written
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (kind out of range, hp NULL, hp->size too small) */
FSDP_EXPORT fsdp_status_t fsdp_optimizer_defaults(fsdp_optimizer_kind_t kind,
                                                  fsdp_hyperparams_t* hp);

/** Clips the gradients of every unit of the context by their total `norm_type`-norm (>= 1, or
 *  INFINITY), taken over all ranks, padding and frozen parameters excluded and hybrid replicas
 *  counted once. Scales every gradient shard by max_norm / (norm + 1e-6) when that is below 1.
 *  Returns the norm before clipping in *total_norm (may be NULL); a non-finite norm leaves the
 *  gradients unchanged (NaN when a gradient element is NaN). Since 0.15.1 the norm is the same
 *  bits for any number of ranks and any sharding of the same gradients (a fixed-point sum, within
 *  n * 2^-69 of the exact value for n elements; doc/concepts.md). Collective over the shard group
 *  (with HFSDP, and the replicas). FSDP_ERR_INVALID_ARGUMENT for max_norm <= 0 or a norm_type
 *  below 1.
 *  @param[in] ctx the context
 *  @param[in] max_norm > 0
 *  @param[in] norm_type >= 1, or INFINITY
 *  @param[out] total_norm may be NULL; the norm before clipping
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (max_norm <= 0 or infinite, p < 1);
 * FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_clip_grad_norm(fsdp_context_t ctx, double max_norm, double norm_type,
                                              double* total_norm);

/* ------------------------------------------------------------------------------------------------
 * Gradient scaler (since 0.2; for any compute dtype since 0.9, e.g. float32 parameters under
 * torch.autocast; before, float16 only). Per step: multiply the loss by
 * fsdp_grad_scaler_scale(), backward, reduce, optionally fsdp_grad_scaler_unscale (before
 * clipping), fsdp_grad_scaler_step, fsdp_grad_scaler_update.
 * --------------------------------------------------------------------------------------------- */

/** init_scale > 0 (PyTorch: 65536), growth_factor > 1 (2), 0 < backoff_factor < 1 (0.5),
 *  growth_interval >= 1 (2000). Collective over the world group (settings must agree).
 *  @param[in] ctx the context
 *  @param[in] init_scale > 0
 *  @param[in] growth_factor > 1
 *  @param[in] backoff_factor in (0, 1)
 *  @param[in] growth_interval >= 1
 *  @param[out] scaler the new scaler
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (scale <= 0, growth <= 1, backoff outside (0, 1),
 * interval < 1), MISMATCH; FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED
 * for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_grad_scaler_create(fsdp_context_t ctx, double init_scale,
                                                  double growth_factor, double backoff_factor,
                                                  int growth_interval, fsdp_grad_scaler_t* scaler);
/** Frees the scaler and sets *scaler to NULL. Local.
 *  @param[in,out] scaler the scaler; set to NULL
 *  @return FSDP_SUCCESS; FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED
 * for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_grad_scaler_destroy(fsdp_grad_scaler_t* scaler);

/** The current loss scale. Local.
 *  @param[in] scaler the gradient scaler
 *  @param[out] scale the current scale
 *  @return FSDP_SUCCESS; FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED
 * for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_grad_scaler_scale(fsdp_grad_scaler_t scaler, double* scale);

/** Divides the gradient shards of `opt`'s units by the scale and looks for inf/NaN on every rank
 *  (one all-reduce over the world group: collective). FSDP_ERR_STATE if already done since the
 *  last update, or if a unit holds a gradient written through fsdp_grad_data that no reduction
 *  took (since 0.9; nothing is scaled); FSDP_ERR_INVALID_ARGUMENT if a unit does not compute in
 *  float16.
 *  @param[in] scaler the gradient scaler
 *  @param[in] opt the optimizer
 *  @return FSDP_SUCCESS; STATE (already unscaled this step), INVALID_ARGUMENT (a unit not computing
 * in float16, opt of another context); FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or
 * FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_grad_scaler_unscale(fsdp_grad_scaler_t scaler, fsdp_optimizer_t opt);

/** Unscales if not done yet, then steps `opt` unless any rank found inf/NaN: every rank skips
 *  the same steps. *skipped (may be NULL) says which. Collective over the world group. Checks
 *  first what fsdp_optimizer_step checks (an unsharded unit, a gradient no reduction took: STATE),
 *  also for a step an inf would skip, so a refused call scales and steps nothing (since 0.9).
 *  @param[in] scaler the gradient scaler
 *  @param[in] opt the optimizer
 *  @param[out] skipped may be NULL; 1 if the step was skipped
 *  @return FSDP_SUCCESS; as unscale; FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or
 * FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_grad_scaler_step(fsdp_grad_scaler_t scaler, fsdp_optimizer_t opt,
                                                int* skipped);

/** Backs the scale off after a skipped step, grows it after growth_interval clean steps. Local.
 *  FSDP_ERR_STATE without a step since the last update.
 *  @param[in] scaler the gradient scaler
 *  @return FSDP_SUCCESS; STATE (no step since the last update); FSDP_ERR_INVALID_HANDLE,
 * FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_grad_scaler_update(fsdp_grad_scaler_t scaler);

/* ------------------------------------------------------------------------------------------------
 * Checkpoints (since 0.3): one HDF5 file per checkpoint, written by all ranks at once, readable
 * by any HDF5 tool (h5dump, h5py) and loadable on any number of ranks, strategy or unit
 * grouping. Format: doc/checkpoint-format.md. Every parameter is a dataset /model/<name> at its
 * full shape; optimizer state sits beside it under /optimizers/<k>/<state>/<name>; each dataset
 * carries a CRC-32C checked on load. A save writes "<path>.tmp" and renames it to `path` only
 * after every rank finished: a crash never leaves a partial file under the final name.
 * --------------------------------------------------------------------------------------------- */
/** How strictly fsdp_checkpoint_load matches the file to the model
 * (fsdp_checkpoint_options_t.load_flags). */
typedef enum fsdp_load_flags {
  FSDP_LOAD_STRICT = 0,     /**< every parameter present with its shape and dtype, nothing extra */
  FSDP_LOAD_PARTIAL = 1,    /**< load what matches; report the rest (fsdp_checkpoint_report_t) */
  FSDP_LOAD_MODEL_ONLY = 2, /**< parameters only: optimizer and scaler state are not read */
  FSDP_LOAD_CONVERT_DTYPE = 4 /**< a float32 <-> float64 difference is converted, not an error */
} fsdp_load_flags_t;

/** What to save or load besides the model. A struct that grows at its end: set `size` (use
 * FSDP_CHECKPOINT_OPTIONS_INIT). */
typedef struct fsdp_checkpoint_options {
  size_t size;                        /**< sizeof(fsdp_checkpoint_options_t) as compiled */
  int noptimizers;                    /**< optimizers of the context; their state is saved as */
  const fsdp_optimizer_t* optimizers; /**< /optimizers/0.. and loaded back by position */
  fsdp_grad_scaler_t grad_scaler;     /**< NULL: none */
  /** Save: user metadata, nmetadata key/value strings (step, epoch, seeds...); keys non-empty
   * and distinct. Read back with fsdp_checkpoint_metadata. */
  int nmetadata;
  const char* const* metadata_keys;   /**< nmetadata keys */
  const char* const* metadata_values; /**< nmetadata values */
  unsigned load_flags;                /**< load: FSDP_LOAD_* flags, or-ed */
} fsdp_checkpoint_options_t;

/** Initializer for checkpoint options with every default. */
#define FSDP_CHECKPOINT_OPTIONS_INIT \
  { sizeof(fsdp_checkpoint_options_t), 0, NULL, NULL, 0, NULL, NULL, FSDP_LOAD_STRICT }

/** What a load did. A struct that grows at its end: set `size`. */
typedef struct fsdp_checkpoint_report {
  size_t size;         /**< sizeof(fsdp_checkpoint_report_t) as compiled */
  int loaded;          /**< parameters loaded */
  int missing;         /**< model parameters absent from the file (left unchanged) */
  int unexpected;      /**< file parameters absent from the model (ignored) */
  int mismatched;      /**< shape or dtype differs (left unchanged) */
  const char* details; /**< one line per parameter not loaded; valid until the next load */
} fsdp_checkpoint_report_t;

/** Saves every unit of the context (the master shards), the optimizers' state and
 *  hyperparameters, the scaler and the metadata to `path`. Each rank writes the element ranges
 *  its shard owns (one replica under hybrid sharding; with HFSDP every rank writes the optimizer
 *  state of its piece) at their offsets in one HDF5 file (pwrite,
 *  or MPI-IO with FSDP_CKPT_DATA_IO=collective; doc/checkpoint-format.md); no rank holds more
 *  than its shard. Parameter names must be unique across the context's units. Collective over
 *  the world group; arguments must agree (checked). Waits for operations in flight first.
 *  @return FSDP_ERR_IO (cannot create, write or rename; errno's text), FSDP_ERR_INVALID_ARGUMENT,
 *  FSDP_ERR_MISMATCH; on error every rank fails alike and an existing file at `path` is intact.
 *  @param[in] ctx the context
 *  @param[in] path the checkpoint file
 *  @param[in] options NULL for the defaults, or options from FSDP_CHECKPOINT_OPTIONS_INIT */
FSDP_EXPORT fsdp_status_t fsdp_checkpoint_save(fsdp_context_t ctx, const char* path,
                                               const fsdp_checkpoint_options_t* options);

/** fsdp_checkpoint_save in the background: copies this rank's shards and optimizer state (so
 *  training may change them at once) and returns; a background thread writes and commits. Wait
 *  with fsdp_wait (returns the save's status, the same on every rank) or poll with fsdp_test.
 *  Any other checkpoint call, and fsdp_finalize, first waits for it. Without
 *  MPI_THREAD_MULTIPLE the save completes inside this call. `req` must not be NULL.
 *  @param[in] ctx the context
 *  @param[in] path the checkpoint file
 *  @param[in] options NULL for the defaults, or options from FSDP_CHECKPOINT_OPTIONS_INIT
 *  @param[out] req the save's request; must not be NULL
 *  @return FSDP_SUCCESS; as save; the write's own outcome comes from fsdp_wait(&req) (the same on
 * every rank); FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or FSDP_ERR_FINALIZED for a bad
 * handle */
FSDP_EXPORT fsdp_status_t fsdp_checkpoint_save_async(fsdp_context_t ctx, const char* path,
                                                     const fsdp_checkpoint_options_t* options,
                                                     fsdp_request_t* req);

/** Whether a request has completed (*done = 1; fsdp_wait then returns at once). Local.
 *  @param[in] req a request
 *  @param[out] done 1 if it completed
 *  @return FSDP_SUCCESS; INVALID_HANDLE; FSDP_ERR_INVALID_HANDLE, FSDP_ERR_DESTROYED_HANDLE or
 * FSDP_ERR_FINALIZED for a bad handle */
FSDP_EXPORT fsdp_status_t fsdp_test(fsdp_request_t req, int* done);

/** Loads a checkpoint saved with any world size, sharding factor, strategy or unit grouping:
 *  each rank reads only the ranges its shard owns, verifies every dataset's checksum, and only
 *  then overwrites shards, optimizer state and hyperparameters, and the scaler. Every unit must
 *  be sharded. Collective over the world group. `report` may be NULL.
 *  @return FSDP_ERR_IO (missing file), FSDP_ERR_FORMAT (not an fsdp checkpoint),
 *  FSDP_ERR_VERSION (newer format), FSDP_ERR_MISMATCH (missing, extra, reshaped or retyped
 *  parameters: the message lists them), FSDP_ERR_CORRUPT (checksum mismatch, truncated file),
 *  FSDP_ERR_STATE (a unit is unsharded). On any error nothing in memory has changed.
 *  @param[in] ctx the context
 *  @param[in] path the checkpoint file
 *  @param[in] options NULL for the defaults, or options from FSDP_CHECKPOINT_OPTIONS_INIT
 *  @param[out] report may be NULL; report->size set by the caller */
FSDP_EXPORT fsdp_status_t fsdp_checkpoint_load(fsdp_context_t ctx, const char* path,
                                               const fsdp_checkpoint_options_t* options,
                                               fsdp_checkpoint_report_t* report);

/** Reads metadata `key` of a checkpoint without a context. Local. Copies the value, NUL-
 *  terminated, into `value` if `capacity` allows (value may be NULL to ask the length), and sets
 *  *length (may be NULL) to the value's length without the NUL.
 *  @return FSDP_ERR_OUT_OF_RANGE when the key is absent; errors of fsdp_checkpoint_load.
 *  @param[in] path the checkpoint file
 *  @param[in] key the metadata key
 *  @param[out] value may be NULL; receives the NUL-terminated value if it fits
 *  @param[in] capacity bytes at value
 *  @param[out] length may be NULL; the value's length without the NUL */
FSDP_EXPORT fsdp_status_t fsdp_checkpoint_metadata(const char* path, const char* key, char* value,
                                                   size_t capacity, size_t* length);

/** Since 0.8: what a checkpoint holds, without a context and without reading its values: one
 *  NUL-terminated JSON object, {"format_version", "library_version", "strategy", "created",
 *  "world_size", "sharding_factor", "params": [{"name", "dtype", "shape"}] (name order),
 *  "optimizers": [{"kind", "groups": [{"pattern", "lr", "weight_decay", "momentum",
 *  "dampening", "nesterov", "beta1", "beta2", "eps"}], "state": {state name: {parameter name:
 *  {"step"}}}}], "grad_scaler": null or {"scale", "growth_factor", "backoff_factor",
 *  "growth_interval", "growth_tracker"}, "metadata": {key: value}} (doc/checkpoint-format.md).
 *  Copies it into `json` if `capacity` allows (json may be NULL to ask the length) and sets
 *  *length (may be NULL) to its length without the NUL. Local.
 *  @param[in] path the checkpoint file
 *  @param[out] json may be NULL; receives the description if it fits
 *  @param[in] capacity bytes at json
 *  @param[out] length may be NULL; the description's length without the NUL
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (NULL or empty path, capacity too small); errors of
 * fsdp_checkpoint_load (IO, FORMAT, VERSION, CORRUPT) */
FSDP_EXPORT fsdp_status_t fsdp_checkpoint_describe(const char* path, char* json, size_t capacity,
                                                   size_t* length);

/* ---- Checkpoint verification and comparison (since 0.10) ------------------------------------ */

/** Receives one line of a report (NUL-terminated, without a newline), on rank 0 of the call's
 *  communicator, in order. `user` is the options' `user`. */
typedef void (*fsdp_report_line_fn)(const char* line, void* user);
/** Receives the progress of fsdp_checkpoint_verify on rank 0: the bytes checked so far and in all,
 *  summed over the ranks (rank 0's share times the number of ranks), after each chunk read. */
typedef void (*fsdp_progress_fn)(uint64_t done, uint64_t total, void* user);

/** Options of fsdp_checkpoint_verify and fsdp_checkpoint_diff. Initialize with
 *  FSDP_CHECKPOINT_CHECK_OPTIONS_INIT; the struct may grow at its end (`size`). */
typedef struct fsdp_checkpoint_check_options_t {
  size_t size; /**< sizeof(fsdp_checkpoint_check_options_t), set by the initializer */
  /** fsdp_checkpoint_diff only. 1: compare the parameters alone (what a safetensors export or
   *  import carries), not optimizer state, hyperparameters, scaler or metadata; 0: everything. */
  int model_only;
  /** NULL: no report. Otherwise called with each line of the report: verify names every dataset
   *  whose checksum fails and ends with "OK: ..." or "FAILED: ..."; diff gives each dataset's
   *  largest absolute and relative difference, the datasets in one checkpoint only or of other
   *  shapes, each other difference, and a verdict that names what was compared. */
  fsdp_report_line_fn report;
  /** fsdp_checkpoint_verify only; NULL: none. */
  fsdp_progress_fn progress;
  void* user; /**< passed to report and progress */
} fsdp_checkpoint_check_options_t;

/** Defaults of fsdp_checkpoint_check_options_t: everything compared, no report, no progress. */
#define FSDP_CHECKPOINT_CHECK_OPTIONS_INIT \
  { sizeof(fsdp_checkpoint_check_options_t), 0, NULL, NULL, NULL }

/** Since 0.10: recomputes the CRC-32C of every dataset of checkpoint `path` (parameters and
 *  optimizer state) from the file and compares it with the stored one, and checks that /index
 *  lists the datasets as they are (an index that disagrees fails; one that is absent or out of
 *  date, as after h5repack, is reported and does not). Collective over `comm`: each rank reads a
 *  share of every dataset, in bounded memory; the arguments must agree (checked). No context
 *  needed. Callbacks run on rank 0 of `comm`, on the calling thread.
 *  @param[in] comm the ranks that take part (MPI_COMM_SELF: this rank alone)
 *  @param[in] path the checkpoint file
 *  @param[in] options NULL for the defaults, or from FSDP_CHECKPOINT_CHECK_OPTIONS_INIT
 *  @param[out] failed 1 when a checksum fails or the index is wrong, else 0; the same on every
 *  rank; unchanged on error
 *  @return FSDP_SUCCESS (a corrupt checkpoint too: see *failed); FSDP_ERR_INVALID_ARGUMENT (NULL
 *  or empty path, NULL failed, bad options, MPI_COMM_NULL), FSDP_ERR_MISMATCH (arguments that
 *  differ between ranks), FSDP_ERR_IO (missing file), FSDP_ERR_FORMAT or FSDP_ERR_VERSION (not a
 *  readable checkpoint), FSDP_ERR_CORRUPT (a truncated file, or a dataset outside it), FSDP_ERR_MPI
 *  (MPI not initialized); the same status on every rank. Thread safety: no context is involved;
 *  calls from several threads at once need MPI_THREAD_MULTIPLE and communicators of their own. */
FSDP_EXPORT fsdp_status_t fsdp_checkpoint_verify(MPI_Comm comm, const char* path,
                                                 const fsdp_checkpoint_check_options_t* options,
                                                 int* failed);

/** Since 0.10: fsdp_checkpoint_verify with a Fortran communicator handle (MPI_Comm_c2f), for
 *  bindings that cannot pass an MPI_Comm.
 *  @param[in] fcomm the Fortran handle of the communicator
 *  @param[in] path the checkpoint file
 *  @param[in] options NULL for the defaults, or from FSDP_CHECKPOINT_CHECK_OPTIONS_INIT
 *  @param[out] failed as for fsdp_checkpoint_verify
 *  @return as fsdp_checkpoint_verify */
FSDP_EXPORT fsdp_status_t fsdp_checkpoint_verify_fcomm(
    int fcomm, const char* path, const fsdp_checkpoint_check_options_t* options, int* failed);

/** Since 0.10: compares checkpoints `a` and `b`: every dataset both hold with the same shape by
 *  value (converted to float64: the largest absolute and relative difference; NaN against a
 *  number is an infinite difference, NaN against NaN none), the datasets only one holds or with
 *  other shapes, and (unless options->model_only) metadata, optimizers, their groups and
 *  hyperparameters, and the gradient scaler. Checksums are not verified (fsdp_checkpoint_verify).
 *  Collective over `comm` (each rank reads a share of every dataset, in bounded memory); the
 *  arguments must agree (checked). No context needed. The report runs on rank 0 of `comm`.
 *  @param[in] comm the ranks that take part
 *  @param[in] a the first checkpoint file ("A" in the report)
 *  @param[in] b the second checkpoint file ("B")
 *  @param[in] options NULL for the defaults, or from FSDP_CHECKPOINT_CHECK_OPTIONS_INIT
 *  @param[out] differ 1 when anything compared differs, else 0; the same on every rank;
 *  unchanged on error
 *  @return FSDP_SUCCESS (checkpoints that differ too: see *differ); FSDP_ERR_INVALID_ARGUMENT
 *  (NULL or empty path, NULL differ, model_only not 0 or 1, MPI_COMM_NULL), FSDP_ERR_MISMATCH,
 *  FSDP_ERR_IO, FSDP_ERR_FORMAT, FSDP_ERR_VERSION, FSDP_ERR_CORRUPT, FSDP_ERR_MPI, as
 *  fsdp_checkpoint_verify; the same status on every rank. Thread safety: as
 *  fsdp_checkpoint_verify. */
FSDP_EXPORT fsdp_status_t fsdp_checkpoint_diff(MPI_Comm comm, const char* a, const char* b,
                                               const fsdp_checkpoint_check_options_t* options,
                                               int* differ);

/** Since 0.10: fsdp_checkpoint_diff with a Fortran communicator handle (MPI_Comm_c2f).
 *  @param[in] fcomm the Fortran handle of the communicator
 *  @param[in] a the first checkpoint file
 *  @param[in] b the second checkpoint file
 *  @param[in] options NULL for the defaults, or from FSDP_CHECKPOINT_CHECK_OPTIONS_INIT
 *  @param[out] differ as for fsdp_checkpoint_diff
 *  @return as fsdp_checkpoint_diff */
FSDP_EXPORT fsdp_status_t fsdp_checkpoint_diff_fcomm(int fcomm, const char* a, const char* b,
                                                     const fsdp_checkpoint_check_options_t* options,
                                                     int* differ);

/* ---- Safetensors interchange (since 0.8) ----------------------------------------------------- */

/** Options of fsdp_safetensors_export and fsdp_safetensors_import. Initialize with
 *  FSDP_SAFETENSORS_OPTIONS_INIT; the struct may grow at its end (`size`). */
typedef struct fsdp_safetensors_options_t {
  size_t size; /**< sizeof(fsdp_safetensors_options_t), set by the initializer */
  /** Export: the tensors' dtype in the files (FSDP_DTYPE_AUTO: each parameter's own; bfloat16
   *  and float16 round to nearest even). Import: the checkpoint's dtype, FSDP_FLOAT32 or
   *  FSDP_FLOAT64 (FSDP_DTYPE_AUTO: float64 tensors stay float64, the others become float32). */
  fsdp_dtype_t dtype;
  /** Export only. 0: one file at `out`. Otherwise `out` is a directory (created if absent) that
   *  receives Hugging Face's sharded layout, each shard holding at most this many bytes of tensor
   *  data (a larger tensor gets a shard of its own): `model.safetensors` when everything fits in
   *  one, else `model-0000k-of-0000n.safetensors` and `model.safetensors.index.json`. */
  uint64_t max_shard_bytes;
} fsdp_safetensors_options_t;

/** Defaults of fsdp_safetensors_options_t: each parameter's own dtype, one file. */
#define FSDP_SAFETENSORS_OPTIONS_INIT \
  { sizeof(fsdp_safetensors_options_t), FSDP_DTYPE_AUTO, 0 }

/** Since 0.8: exports the parameters of checkpoint `checkpoint` (the file fsdp_checkpoint_save
 *  wrote; optimizer state is not part of the format) to safetensors, as transformers'
 *  save_pretrained and the `safetensors` package read them. Every dataset's checksum is verified
 *  while it is read; nothing appears at `out` unless all hold (temporary files renamed at the
 *  end). Collective over `comm` (each rank converts a share of every tensor; memory stays
 *  bounded); arguments must agree (checked). No context needed.
 *  @param[in] comm the ranks that take part (MPI_COMM_SELF: this rank alone)
 *  @param[in] checkpoint the checkpoint file
 *  @param[in] out the safetensors file, or with options->max_shard_bytes > 0 the directory
 *  @param[in] options NULL for the defaults, or from FSDP_SAFETENSORS_OPTIONS_INIT
 *  @return FSDP_SUCCESS; FSDP_ERR_INVALID_ARGUMENT (NULL or empty path, bad dtype or size,
 *  arguments that differ between ranks: FSDP_ERR_MISMATCH), FSDP_ERR_IO (missing file, cannot
 *  write), FSDP_ERR_FORMAT or FSDP_ERR_VERSION (not a readable checkpoint), FSDP_ERR_CORRUPT
 *  (a checksum fails: nothing exported); the same status on every rank */
FSDP_EXPORT fsdp_status_t fsdp_safetensors_export(MPI_Comm comm, const char* checkpoint,
                                                  const char* out,
                                                  const fsdp_safetensors_options_t* options);

/** Since 0.8: imports safetensors weights into a new checkpoint at `checkpoint` that
 *  fsdp_checkpoint_load (or FSDP_LOAD_MODEL_ONLY) reads into any unit layout. `in` is a
 *  `.safetensors` file, a `model.safetensors.index.json`, or a directory holding either (as
 *  save_pretrained writes it). Every header and the index are checked before anything is
 *  written: a shard the index names must exist and hold exactly the tensors named for it, and
 *  each header's offsets must match its shapes and the file's size. The checkpoint is written as
 *  a save writes it (temporary file, renamed when complete), so an existing file at `checkpoint`
 *  is intact after any error. Tensors that are not floating point are skipped with a warning on
 *  stderr. Collective over `comm`; arguments must agree (checked). No context needed.
 *  @param[in] comm the ranks that take part
 *  @param[in] in the safetensors file, index or directory
 *  @param[in] checkpoint the checkpoint file to write
 *  @param[in] options NULL for the defaults, or from FSDP_SAFETENSORS_OPTIONS_INIT
 *  (max_shard_bytes must be 0)
 *  @return FSDP_SUCCESS; FSDP_ERR_INVALID_ARGUMENT, FSDP_ERR_MISMATCH, FSDP_ERR_IO (a missing
 *  file or shard, named), FSDP_ERR_FORMAT (a header or index that is not valid, naming the file
 *  and the tensor); the same status on every rank */
FSDP_EXPORT fsdp_status_t fsdp_safetensors_import(MPI_Comm comm, const char* in,
                                                  const char* checkpoint,
                                                  const fsdp_safetensors_options_t* options);

/** Since 0.10: fsdp_safetensors_export for Fortran and FFI callers: `fcomm` is a Fortran
 *  communicator handle (MPI_Fint, as for fsdp_init_fcomm). Collective over it.
 *  @param[in] fcomm a Fortran communicator handle (MPI_Fint)
 *  @param[in] checkpoint the checkpoint file
 *  @param[in] out the safetensors file, or with options->max_shard_bytes > 0 the directory
 *  @param[in] options NULL for the defaults, or from FSDP_SAFETENSORS_OPTIONS_INIT
 *  @return as fsdp_safetensors_export; FSDP_ERR_MPI before MPI_Init or after MPI_Finalize */
FSDP_EXPORT fsdp_status_t fsdp_safetensors_export_fcomm(int fcomm, const char* checkpoint,
                                                        const char* out,
                                                        const fsdp_safetensors_options_t* options);

/** Since 0.10: fsdp_safetensors_import for Fortran and FFI callers (`fcomm` as for
 *  fsdp_init_fcomm). Collective over it.
 *  @param[in] fcomm a Fortran communicator handle (MPI_Fint)
 *  @param[in] in the safetensors file, index or directory
 *  @param[in] checkpoint the checkpoint file to write
 *  @param[in] options NULL for the defaults, or from FSDP_SAFETENSORS_OPTIONS_INIT
 *  (max_shard_bytes must be 0)
 *  @return as fsdp_safetensors_import; FSDP_ERR_MPI before MPI_Init or after MPI_Finalize */
FSDP_EXPORT fsdp_status_t fsdp_safetensors_import_fcomm(int fcomm, const char* in,
                                                        const char* checkpoint,
                                                        const fsdp_safetensors_options_t* options);

/* ------------------------------------------------------------------------------------------------
 * Planning a job (since 0.11; doc/planning-model.md)
 *
 * A plan holds a model (units of parameter descriptors, and ties) and computes, without MPI and
 * without allocating it, what a job training it would hold per rank (fsdp_plan_memory, the
 * fields of fsdp_memory_stats_t a training step determines) and communicate per step
 * (fsdp_plan_traffic), by the library's own rules. "A training step" is defined in
 * doc/planning-model.md. Every call is local. A plan may be used from one thread at a time;
 * different plans from different threads.
 * --------------------------------------------------------------------------------------------- */
/** A model to plan for (fsdp_plan_create). */
typedef struct fsdp_plan_s* fsdp_plan_t;

/** Where fsdp_plan_read_model reads a model from. */
typedef enum fsdp_plan_model_format {
  FSDP_PLAN_MODEL_JSON = 0,       /**< libfsdp's unit layout JSON (doc/planning.md) */
  FSDP_PLAN_MODEL_CHECKPOINT = 1, /**< an libfsdp HDF5 checkpoint's units */
  /** a Hugging Face config.json of a GPT-2 or Llama-style decoder: one unit per block and a root
   *  unit (embeddings, final norm, head) */
  FSDP_PLAN_MODEL_HF_CONFIG = 2,
  FSDP_PLAN_MODEL_FORMAT_COUNT
} fsdp_plan_model_format_t;

/** A job to plan for. A struct that grows at its end: set `size` (use FSDP_PLAN_JOB_INIT). */
typedef struct fsdp_plan_job {
  size_t size; /**< sizeof(fsdp_plan_job_t) as the caller compiled it */
  /** What the job's fsdp_init gets (strategy, sharding_factor, param_dtype, reduce_dtype,
   *  memory_space, cpu_offload, transport), read as fsdp_init reads it, the FSDP_* environment
   *  included; NULL: FSDP_CONFIG_INIT's defaults */
  const fsdp_config_t* config;
  /** The optimizer's hyperparameters (what decides its state: SGD's momentum, AdamW's amsgrad);
   *  NULL: the kind's defaults */
  const fsdp_hyperparams_t* hyperparams;
  int world_size;                  /**< ranks, >= 1; default 1 */
  int ranks_per_node;              /**< >= 1 and divides world_size; 0 (default): world_size */
  fsdp_optimizer_kind_t optimizer; /**< steps every unit; default FSDP_OPTIMIZER_ADAMW */
  int no_optimizer;                /**< 1: the job steps no library optimizer; default 0 */
  /** fsdp_set_prefetch(ctx, prefetch_forward, prefetch_backward), 0 or 1 each; default 0. With
   *  either on (or cfg->hpz), the plan is of the second of two identical steps (the first records
   *  the order the second prefetches by, and leaves hpZ's secondaries in the pool), and
   *  cfg->max_unsharded bounds what prefetch holds */
  int prefetch_forward;
  int prefetch_backward; /**< see prefetch_forward */
  /* Since 0.12: what forward keeps for backward (doc/planning-model.md, "Activations") */
  int batch_size;               /**< micro-batch per rank, in sequences, >= 1; default 1 */
  int sequence_length;          /**< tokens per sequence, >= 0; 0 (default): the model's maximum */
  int activation_checkpointing; /**< 1: each layer keeps only its input; 0 (default) or 1 */
  /** The caller's activation bytes per layer, >= 0; 0 (default): the transformer estimate where
   *  the model has a shape (a config.json), else no activations */
  int64_t activation_bytes_per_layer;
} fsdp_plan_job_t;

/** Initializer for a job of one rank with every default. */
#define FSDP_PLAN_JOB_INIT \
  { sizeof(fsdp_plan_job_t), NULL, NULL, 1, 0, FSDP_OPTIMIZER_ADAMW, 0, 0, 0, 1, 0, 0, 0 }

/** What one rank holds over a training step, in bytes, by fsdp_memory_stats_t's names: each
 *  field equals what fsdp_memory_stats reports after the step. A struct that grows at its end:
 *  set `size`. */
typedef struct fsdp_plan_memory {
  size_t size;                  /**< sizeof(fsdp_plan_memory_t) as the caller compiled it */
  size_t shard_bytes;           /**< parameter shards of all units */
  size_t grad_shard_bytes;      /**< gradient shards */
  size_t optimizer_state_bytes; /**< the optimizer's state after its first step */
  size_t unsharded_model_bytes; /**< parameter bytes without sharding (one replica) */
  size_t peak_unsharded_bytes;  /**< high-water mark of unsharded parameter buffers */
  size_t peak_full_grad_bytes;  /**< high-water mark of full gradients and their copies */
  size_t peak_parameter_bytes;  /**< high-water mark of shards plus unsharded parameters */
  size_t pool_cached_bytes;     /**< buffers the pool keeps after the step */
  size_t scratch_bytes;         /**< communication scratch after the step */
  size_t peak_bytes;            /**< high-water mark of the total */
  size_t secondary_bytes;       /**< since 0.12, hpZ: secondary partitions after the step */
  size_t peak_secondary_bytes;  /**< since 0.12, hpZ: their high-water mark */
  /* Since 0.12, beyond what fsdp_memory_stats sees */
  size_t activation_bytes; /**< what forward keeps for backward (estimated: see the job) */
  /** CUDA memory: the device's high-water mark (the library's buffers there, plus the
   *  activations; NCCL's own buffers and the CUDA caching allocator's not counted); 0 in host
   *  memory */
  size_t device_total_bytes;
  /** Host memory: peak_bytes plus the activations; CPU offload: the shards, gradient shards and
   *  optimizer state; 0 in CUDA memory without offload */
  size_t host_total_bytes;
} fsdp_plan_memory_t;

/** What one rank communicates over a training step. Calls and bytes count per unit operation, as
 *  the trace records them (FSDP_TRACE): an unshard is one all-gather of the unit's unsharded
 *  buffer (param_dtype), a reduce one reduce-scatter of its full gradient (reduce_dtype) and,
 *  with replicas, one all-reduce of its partial sum (reduce_dtype). intra_node_bytes +
 *  inter_node_bytes is what the rank sends if every collective runs as a ring over its group
 *  (doc/planning-model.md). A struct that grows at its end: set `size`. */
typedef struct fsdp_plan_traffic {
  size_t size;                 /**< sizeof(fsdp_plan_traffic_t) as the caller compiled it */
  size_t all_gather_bytes;     /**< buffers all-gathered */
  size_t all_gather_calls;     /**< unshards */
  size_t reduce_scatter_bytes; /**< gradients reduce-scattered */
  size_t reduce_scatter_calls; /**< reduces */
  size_t all_reduce_bytes;     /**< partial sums all-reduced across replicas */
  size_t all_reduce_calls;     /**< reduces with replicas */
  size_t intra_node_bytes;     /**< sent to a rank of the same node */
  size_t inter_node_bytes;     /**< sent to a rank of another node */
  /** Since 0.12, HFSDP: shard group partial sums reduce-scattered across replicas (instead of
   *  all_reduce_bytes), and their calls (one per reduce) */
  size_t replica_reduce_scatter_bytes;
  size_t replica_reduce_scatter_calls; /**< see replica_reduce_scatter_bytes */
  /** Since 0.12, HFSDP: trainable shard blocks (storage dtype) all-gathered across replicas after
   *  the optimizer updated each rank's piece, and their calls (one per unit stepped) */
  size_t replica_all_gather_bytes;
  size_t replica_all_gather_calls; /**< see replica_all_gather_bytes */
  /** Since 0.12, hpZ: unsharded buffers all-gathered inside the node from its secondary
   *  partitions (not in all_gather_bytes), and their calls */
  size_t node_all_gather_bytes;
  size_t node_all_gather_calls; /**< see node_all_gather_bytes */
} fsdp_plan_traffic_t;

/** Since 0.12: the machine a job runs on, for fsdp_plan_time and fsdp_plan_sweep (per GPU; fill
 *  it with fsdp_plan_machine_preset or by hand). A struct that grows at its end: set `size`. */
typedef struct fsdp_plan_machine {
  size_t size;                  /**< sizeof(fsdp_plan_machine_t) as the caller compiled it */
  double peak_flops_16bit;      /**< dense bfloat16/float16 FLOP/s, > 0 */
  double peak_flops_32bit;      /**< float32 FLOP/s, > 0 */
  double peak_flops_64bit;      /**< float64 FLOP/s, > 0 */
  size_t hbm_bytes;             /**< device memory, > 0 */
  double intra_node_bandwidth;  /**< bytes/s a GPU sends to another of its node, > 0 */
  double intra_node_latency_s;  /**< seconds per collective inside a node, >= 0 */
  double inter_node_bandwidth;  /**< bytes/s a GPU sends across nodes (its NIC share), > 0 */
  double inter_node_latency_s;  /**< seconds per collective across nodes, >= 0 */
  double host_device_bandwidth; /**< bytes/s each way between host and device, > 0 */
  double compute_efficiency;    /**< fraction of the peak reached, in (0, 1] */
} fsdp_plan_machine_t;

/** Initializer: `size` set, every figure 0 (not valid until filled). */
#define FSDP_PLAN_MACHINE_INIT \
  { sizeof(fsdp_plan_machine_t), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }

/** Since 0.12: one rank's training step on a machine, by the model of doc/planning-model.md
 *  ("Step time"). Seconds, FLOPs per rank per step. A struct that grows at its end: set `size`. */
typedef struct fsdp_plan_time {
  size_t size;                    /**< sizeof(fsdp_plan_time_t) as the caller compiled it */
  double compute_s;               /**< the computation, recomputation included */
  double all_gather_s;            /**< the all-gathers' time, summed (hidden or not) */
  double reduce_scatter_s;        /**< the reduce-scatters' */
  double all_reduce_s;            /**< the all-reduces' across replicas */
  double offload_copy_s;          /**< CPU offload's copies between host and device */
  double exposed_comm_s;          /**< step_s - compute_s: communication not hidden */
  double step_s;                  /**< the step */
  double tokens_per_step;         /**< batch_size x sequence_length */
  double model_flops_per_step;    /**< 6 P T plus attention, without recomputation */
  double hardware_flops_per_step; /**< with activation checkpointing's recomputation */
  double tflops_per_gpu;          /**< hardware_flops_per_step / step_s / 1e12 */
} fsdp_plan_time_t;

/** Since 0.11: an empty plan. Local.
 *  @param[out] plan receives the plan
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (plan NULL) */
FSDP_EXPORT fsdp_status_t fsdp_plan_create(fsdp_plan_t* plan);

/** Since 0.11: frees a plan and sets *plan to NULL. Local.
 *  @param[in,out] plan the plan
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (plan NULL); INVALID_HANDLE or DESTROYED_HANDLE */
FSDP_EXPORT fsdp_status_t fsdp_plan_destroy(fsdp_plan_t* plan);

/** Since 0.11: appends a unit described as fsdp_unit_create describes one (the same rules). Local.
 *  @param[in] plan the plan
 *  @param[in] name NULL or a label for messages and the description
 *  @param[in] nparams number of parameters, >= 1
 *  @param[in] descs nparams descriptors
 *  @param[out] unit_index may be NULL; the unit's index (units count from 0 in order)
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (a descriptor, naming it); INVALID_HANDLE or
 * DESTROYED_HANDLE */
FSDP_EXPORT fsdp_status_t fsdp_plan_add_unit(fsdp_plan_t plan, const char* name, int nparams,
                                             const fsdp_param_desc_t* descs, int* unit_index);

/** Since 0.11: as fsdp_unit_tie (the same rules): parameter `owner_index` of unit `owner_unit`
 *  used by unit `user_unit` under `alias`, stored and reduced once, in the owner. Local.
 *  @param[in] plan the plan
 *  @param[in] user_unit the unit that uses the parameter
 *  @param[in] alias its name there, unique in the user
 *  @param[in] owner_unit the unit that stores it
 *  @param[in] owner_index the parameter's index in the owner
 *  @param[out] alias_index may be NULL; the index under which the user sees it
 *  @return FSDP_SUCCESS; OUT_OF_RANGE (a unit or parameter index); INVALID_ARGUMENT (alias
 * NULL/empty/taken, owner the user itself or itself tied); INVALID_HANDLE or DESTROYED_HANDLE */
FSDP_EXPORT fsdp_status_t fsdp_plan_tie(fsdp_plan_t plan, int user_unit, const char* alias,
                                        int owner_unit, int owner_index, int* alias_index);

/** Since 0.11: fills an empty plan with a model read from a file. Local.
 *  @param[in] plan the plan, without units
 *  @param[in] path the file
 *  @param[in] format what the file holds
 *  @return FSDP_SUCCESS; STATE (the plan has units); INVALID_ARGUMENT (path NULL/empty, format
 * unknown); IO; FORMAT (JSON that does not parse, a field missing or out of range: the message
 * names the file and the field); VERSION or CORRUPT (a checkpoint); UNSUPPORTED (a model_type
 * other than gpt2, llama, mistral or qwen2, or a checkpoint without units); INVALID_HANDLE or
 * DESTROYED_HANDLE. On error the plan is unchanged. */
FSDP_EXPORT fsdp_status_t fsdp_plan_read_model(fsdp_plan_t plan, const char* path,
                                               fsdp_plan_model_format_t format);

/** Since 0.11: what rank `rank` of `job` holds over a training step (every rank holds the same).
 *  Local.
 *  @param[in] plan the plan, with at least one unit
 *  @param[in] job NULL for FSDP_PLAN_JOB_INIT, or a job with `size` set
 *  @param[in] rank in [0, job->world_size)
 *  @param[out] memory memory->size set by the caller
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (a job field, or its config's, naming it: a sharding
 * factor that does not divide the world, ranks_per_node not dividing world_size, a dtype the
 * parameters cannot take; since 0.12 job->batch_size, sequence_length (negative, or above the
 * model's maximum), activation_checkpointing, activation_bytes_per_layer); OUT_OF_RANGE (rank);
 * STATE (no units); UNSUPPORTED (a memory space or transport the plan does not model:
 * doc/planning-model.md);
 * INVALID_HANDLE or DESTROYED_HANDLE */
FSDP_EXPORT fsdp_status_t fsdp_plan_memory(fsdp_plan_t plan, const fsdp_plan_job_t* job, int rank,
                                           fsdp_plan_memory_t* memory);

/** Since 0.11: what rank `rank` of `job` communicates over a training step. Local.
 *  @param[in] plan the plan, with at least one unit
 *  @param[in] job NULL for FSDP_PLAN_JOB_INIT, or a job with `size` set
 *  @param[in] rank in [0, job->world_size)
 *  @param[out] traffic traffic->size set by the caller
 *  @return as fsdp_plan_memory, without UNSUPPORTED (traffic is planned for every placement) */
FSDP_EXPORT fsdp_status_t fsdp_plan_traffic(fsdp_plan_t plan, const fsdp_plan_job_t* job, int rank,
                                            fsdp_plan_traffic_t* traffic);

/** Since 0.11: the plan of rank `rank` as one NUL-terminated JSON object: {"world_size",
 *  "ranks_per_node", "rank", "sharding_factor", "replicas", "units": [{"name", "params",
 *  "numel", "shard_bytes", "unsharded_bytes", "grad_shard_bytes"}], "memory": {the fields of
 *  fsdp_plan_memory_t} or null where the memory plan is unsupported, "traffic": {the fields of
 *  fsdp_plan_traffic_t}}. Copies it into `json` if `capacity` allows (json may be NULL to ask
 *  the length) and sets *length (may be NULL) to its length without the NUL. Local.
 *  @param[in] plan the plan, with at least one unit
 *  @param[in] job NULL for FSDP_PLAN_JOB_INIT, or a job with `size` set
 *  @param[in] rank in [0, job->world_size)
 *  @param[out] json may be NULL; receives the description if it fits
 *  @param[in] capacity bytes at json
 *  @param[out] length may be NULL; the description's length without the NUL
 *  @return as fsdp_plan_traffic; INVALID_ARGUMENT (capacity too small) */
FSDP_EXPORT fsdp_status_t fsdp_plan_describe(fsdp_plan_t plan, const fsdp_plan_job_t* job, int rank,
                                             char* json, size_t capacity, size_t* length);

/** Since 0.12: fills `machine` with a preset (doc/planning-model.md lists them and their
 *  sources): "a100-40gb-efa", "a100-80gb-efa", "a100-40gb-roce", "a100-80gb-roce",
 *  "h100-80gb-efa". Local; thread-safe.
 *  @param[in] name the preset's name
 *  @param[out] machine machine->size set by the caller
 *  @return FSDP_SUCCESS; INVALID_ARGUMENT (name NULL or unknown, naming it; machine NULL or its
 * size unknown) */
FSDP_EXPORT fsdp_status_t fsdp_plan_machine_preset(const char* name, fsdp_plan_machine_t* machine);

/** Since 0.12: how long rank `rank`'s training step of `job` takes on `machine` (the model of
 *  doc/planning-model.md: computation at the machine's peak times its efficiency, each
 *  collective a ring over its group's slowest link, overlap by the job's prefetch). Local.
 *  @param[in] plan the plan, with at least one unit
 *  @param[in] job NULL for FSDP_PLAN_JOB_INIT, or a job with `size` set
 *  @param[in] machine the machine, `size` set
 *  @param[in] rank in [0, job->world_size)
 *  @param[out] time time->size set by the caller
 *  @return as fsdp_plan_traffic; INVALID_ARGUMENT (machine NULL or a field of it, naming it;
 * job->sequence_length 0 for a model without a maximum sequence length) */
FSDP_EXPORT fsdp_status_t fsdp_plan_time(fsdp_plan_t plan, const fsdp_plan_job_t* job,
                                         const fsdp_plan_machine_t* machine, int rank,
                                         fsdp_plan_time_t* time);

/** Since 0.12: fsdp_plan_describe's JSON object with two more members: "time" (the fields of
 *  fsdp_plan_time_t for `machine`) and "fits" (true when the job's total in the memory it computes
 *  in, device_total_bytes in CUDA memory and host_total_bytes in host memory, is at most
 *  machine->hbm_bytes; null where "memory" is null). Local.
 *  @param[in] plan the plan, with at least one unit
 *  @param[in] job NULL for FSDP_PLAN_JOB_INIT, or a job with `size` set
 *  @param[in] machine the machine, `size` set
 *  @param[in] rank in [0, job->world_size)
 *  @param[out] json may be NULL; receives the description if it fits
 *  @param[in] capacity bytes at json
 *  @param[out] length may be NULL; the description's length without the NUL
 *  @return as fsdp_plan_time; INVALID_ARGUMENT (capacity too small) */
FSDP_EXPORT fsdp_status_t fsdp_plan_describe_on(fsdp_plan_t plan, const fsdp_plan_job_t* job,
                                                const fsdp_plan_machine_t* machine, int rank,
                                                char* json, size_t capacity, size_t* length);

/** Since 0.12: the configurations of `job` whose memory fits `budget_bytes`, fastest first, as
 *  one NUL-terminated JSON object {"budget_bytes", "configurations": [{"strategy",
 *  "sharding_factor", "hfsdp", "hpz", "param_dtype", "activation_checkpointing",
 *  "cpu_offload", "batch_size", "sequence_length", "tokens_per_s", "memory": {the fields of
 *  fsdp_plan_memory_t}, "time": {the fields of fsdp_plan_time_t}}]}. Varies the sharding, the
 *  param dtype, activation checkpointing, CPU offload (a job in CUDA memory) and the batch
 *  (powers of two); the rest is the job's (doc/planning.md, "Sweep"). Copies the text into
 *  `json` if `capacity` allows (json may be NULL to ask the length) and sets *length (may be
 *  NULL). Local.
 *  @param[in] plan the plan, with at least one unit
 *  @param[in] job NULL for FSDP_PLAN_JOB_INIT, or a job with `size` set
 *  @param[in] machine the machine, `size` set
 *  @param[in] budget_bytes memory per rank (device memory for a job in CUDA memory); 0: the
 *  machine's hbm_bytes
 *  @param[out] json may be NULL; receives the text if it fits
 *  @param[in] capacity bytes at json
 *  @param[out] length may be NULL; the text's length without the NUL
 *  @return as fsdp_plan_time; INVALID_ARGUMENT (capacity too small) */
FSDP_EXPORT fsdp_status_t fsdp_plan_sweep(fsdp_plan_t plan, const fsdp_plan_job_t* job,
                                          const fsdp_plan_machine_t* machine, size_t budget_bytes,
                                          char* json, size_t capacity, size_t* length);

#ifdef __cplusplus
}
#endif
#endif /* FSDP_H */
