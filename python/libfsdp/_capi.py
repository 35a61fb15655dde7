"""The C ABI of libfsdp as ctypes declarations: loading the library, the structs of include/fsdp.h
and one prototype per function. Nothing here is public; libfsdp/__init__.py builds on it."""
import ctypes
import ctypes.util
import importlib.util
import os
import sys

# Status codes and enumerations: the values of include/fsdp.h. tests/check_python_capi.py compares
# every one of them, and every struct's fields and offsets, with the header (in make check).
STATUS_NAMES = [
    "FSDP_SUCCESS", "FSDP_ERR_INVALID_ARGUMENT", "FSDP_ERR_INVALID_HANDLE",
    "FSDP_ERR_DESTROYED_HANDLE", "FSDP_ERR_FINALIZED", "FSDP_ERR_OUT_OF_RANGE", "FSDP_ERR_STATE",
    "FSDP_ERR_MISMATCH", "FSDP_ERR_VERSION", "FSDP_ERR_UNSUPPORTED", "FSDP_ERR_OUT_OF_MEMORY",
    "FSDP_ERR_MPI", "FSDP_ERR_INTERNAL", "FSDP_ERR_CALLBACK", "FSDP_ERR_IO", "FSDP_ERR_FORMAT",
    "FSDP_ERR_CORRUPT", "FSDP_ERR_CUDA", "FSDP_ERR_NCCL", "FSDP_ERR_ABORTED", "FSDP_ERR_TIMEOUT",
]
SUCCESS, ERR_INVALID_ARGUMENT = 0, 1
DTYPE_AUTO, FLOAT32, FLOAT64, BFLOAT16, FLOAT16 = -1, 0, 1, 2, 3
STRATEGIES = {"full": 0, "hybrid": 1, "none": 2}
REDUCTIONS = {"mean": 0, "sum": 1}
GROUPS = {"world": 0, "shard": 1, "replicate": 2}
OPS = {"sum": 0, "max": 1, "min": 2}
OPTIMIZERS = {"sgd": 0, "adamw": 1}
MEMORY_SPACES = {"host": 0, "cuda": 1}
TRANSPORTS = {"auto": 0, "mpi": 1, "nccl": 2, "shm": 3, "shm_zero_copy": 4}
ON_TIMEOUT = {"error": 0, "abort": 1}
LOAD_FLAGS = {"strict": 0, "partial": 1, "model_only": 2, "convert_dtype": 4}
CONFIG_MAGIC = 0x46534450
MAX_NDIM = 16
# Where the library was loaded from (set by load()).
LOADED_FROM = None
# The header version this binding was written against (checked against the library at load).
VERSION = (0, 9, 0)

size_t, c_int, c_double, c_void_p, c_char_p = (ctypes.c_size_t, ctypes.c_int, ctypes.c_double,
                                               ctypes.c_void_p, ctypes.c_char_p)
P = ctypes.POINTER


class Config(ctypes.Structure):
    _fields_ = [("size", size_t), ("magic", ctypes.c_uint32), ("version", ctypes.c_uint32),
                ("strategy", c_int), ("sharding_factor", c_int), ("grad_reduction", c_int),
                ("param_dtype", c_int), ("reduce_dtype", c_int), ("max_unsharded", c_int),
                ("memory_space", c_int), ("device", c_int), ("cpu_offload", c_int),
                ("transport", c_int), ("debug_collectives", c_int), ("on_timeout", c_int),
                ("timeout_s", c_double)]


class ParamDesc(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("ndim", c_int), ("shape", P(ctypes.c_int64)),
                ("dtype", c_int), ("requires_grad", c_int)]


class UnitOptions(ctypes.Structure):
    _fields_ = [("size", size_t), ("name", c_char_p), ("param_dtype", c_int),
                ("reduce_dtype", c_int), ("init", c_void_p), ("init_user_data", c_void_p),
                ("sync_from_rank0", c_int)]


class MemoryStats(ctypes.Structure):
    _fields_ = [(n, size_t) for n in (
        "size", "shard_bytes", "grad_shard_bytes", "unsharded_bytes", "pool_cached_bytes",
        "peak_bytes", "unsharded_model_bytes", "scratch_bytes", "full_grad_bytes",
        "optimizer_state_bytes", "peak_parameter_bytes", "peak_shard_bytes",
        "peak_grad_shard_bytes", "peak_unsharded_bytes", "peak_full_grad_bytes",
        "peak_optimizer_state_bytes", "allocation_calls", "peak_init_bytes",
        "prefetches_started", "prefetches_used", "prefetches_unused", "prefetches_skipped_limit")]


class Hyperparams(ctypes.Structure):
    _fields_ = [("size", size_t), ("lr", c_double), ("weight_decay", c_double),
                ("momentum", c_double), ("dampening", c_double), ("nesterov", c_int),
                ("beta1", c_double), ("beta2", c_double), ("eps", c_double)]


class CheckpointOptions(ctypes.Structure):
    _fields_ = [("size", size_t), ("noptimizers", c_int), ("optimizers", P(c_void_p)),
                ("grad_scaler", c_void_p), ("nmetadata", c_int), ("metadata_keys", P(c_char_p)),
                ("metadata_values", P(c_char_p)), ("load_flags", ctypes.c_uint)]


class CheckpointReport(ctypes.Structure):
    _fields_ = [("size", size_t), ("loaded", c_int), ("missing", c_int), ("unexpected", c_int),
                ("mismatched", c_int), ("details", c_char_p)]


# name: argument types (every function returns fsdp_status_t unless listed in _RESTYPES).
_PROTOTYPES = {
    "fsdp_status_string": [c_int],
    "fsdp_last_error": [],
    "fsdp_record_error": [c_int, c_char_p, c_char_p],
    "fsdp_get_version": [P(c_int), P(c_int), P(c_int)],
    "fsdp_check_version": [c_int, c_int, c_int],
    "fsdp_convert": [c_void_p, c_int, c_void_p, c_int, size_t],
    "fsdp_config_defaults": [P(Config), size_t],
    "fsdp_mpi_init": [c_int, P(c_int), P(c_int)],
    "fsdp_mpi_finalize": [],
    "fsdp_init_fcomm": [c_int, P(Config), P(c_void_p)],
    "fsdp_finalize": [P(c_void_p)],
    "fsdp_group_info": [c_void_p, c_int, P(c_int), P(c_int)],
    "fsdp_broadcast": [c_void_p, c_int, c_int, c_void_p, size_t],
    "fsdp_allreduce": [c_void_p, c_int, c_int, P(c_double), size_t],
    "fsdp_unit_set_grad_sync": [c_void_p, c_int],
    "fsdp_unit_grad_sync": [c_void_p, P(c_int)],
    "fsdp_context_config": [c_void_p, P(c_int), P(c_int), P(c_int)],
    "fsdp_memory_stats": [c_void_p, P(MemoryStats)],
    "fsdp_context_placement": [c_void_p, P(c_int), P(c_int), P(c_int), P(c_int)],
    "fsdp_reset_peak_memory": [c_void_p],
    "fsdp_set_grad_sync": [c_void_p, c_int],
    "fsdp_unit_create_ex": [c_void_p, c_int, P(ParamDesc), P(c_void_p), P(UnitOptions),
                            P(c_void_p)],
    "fsdp_unit_destroy": [P(c_void_p)],
    "fsdp_unshard": [c_void_p],
    "fsdp_reshard": [c_void_p],
    "fsdp_param_data": [c_void_p, c_int, P(c_void_p)],
    "fsdp_grad_data": [c_void_p, c_int, P(c_void_p)],
    "fsdp_reduce_grads": [c_void_p],
    "fsdp_zero_grads": [c_void_p],
    "fsdp_grad_set_none": [c_void_p, c_int, c_int],
    "fsdp_grad_none": [c_void_p, P(c_int), c_int],
    "fsdp_shard_data": [c_void_p, P(c_void_p), P(size_t)],
    "fsdp_shard_grad": [c_void_p, P(c_void_p), P(size_t)],
    "fsdp_param_shard_range": [c_void_p, c_int, P(size_t), P(size_t), P(size_t)],
    "fsdp_unit_numel": [c_void_p, P(size_t), P(size_t), P(size_t)],
    "fsdp_gather_params": [c_void_p, P(c_void_p)],
    "fsdp_unit_info": [c_void_p, P(c_int), P(c_int)],
    "fsdp_unit_precision": [c_void_p, P(c_int), P(c_int), P(c_int)],
    "fsdp_unit_zero_copy": [c_void_p, P(c_int)],
    "fsdp_param_info": [c_void_p, c_int, P(c_char_p), P(c_int), P(ctypes.c_int64), P(c_int),
                        P(c_int)],
    "fsdp_unshard_async": [c_void_p, P(c_void_p)],
    "fsdp_reduce_grads_async": [c_void_p, P(c_void_p)],
    "fsdp_wait": [P(c_void_p)],
    "fsdp_test": [c_void_p, P(c_int)],
    "fsdp_unit_wait": [c_void_p],
    "fsdp_context_async": [c_void_p, P(c_int)],
    "fsdp_set_prefetch": [c_void_p, c_int, c_int],
    "fsdp_begin_forward": [c_void_p],
    "fsdp_begin_backward": [c_void_p],
    "fsdp_optimizer_create": [c_void_p, c_int, P(Hyperparams), c_int, P(c_void_p), P(c_void_p)],
    "fsdp_optimizer_destroy": [P(c_void_p)],
    "fsdp_optimizer_add_group": [c_void_p, c_char_p, P(Hyperparams), P(c_int), P(c_int)],
    "fsdp_optimizer_set_lr": [c_void_p, c_int, c_double],
    "fsdp_optimizer_step": [c_void_p],
    "fsdp_optimizer_zero_grad": [c_void_p],
    "fsdp_optimizer_state": [c_void_p, c_void_p, c_char_p, P(c_void_p), P(size_t)],
    "fsdp_optimizer_steps": [c_void_p, c_void_p, P(ctypes.c_int64)],
    "fsdp_optimizer_set_steps": [c_void_p, c_void_p, ctypes.c_int64],
    "fsdp_optimizer_param_steps": [c_void_p, c_void_p, c_int, P(ctypes.c_int64)],
    "fsdp_optimizer_set_param_steps": [c_void_p, c_void_p, c_int, ctypes.c_int64],
    "fsdp_clip_grad_norm": [c_void_p, c_double, c_double, P(c_double)],
    "fsdp_grad_scaler_create": [c_void_p, c_double, c_double, c_double, c_int, P(c_void_p)],
    "fsdp_grad_scaler_destroy": [P(c_void_p)],
    "fsdp_grad_scaler_scale": [c_void_p, P(c_double)],
    "fsdp_grad_scaler_unscale": [c_void_p, c_void_p],
    "fsdp_grad_scaler_step": [c_void_p, c_void_p, P(c_int)],
    "fsdp_grad_scaler_update": [c_void_p],
    "fsdp_checkpoint_save": [c_void_p, c_char_p, P(CheckpointOptions)],
    "fsdp_checkpoint_save_async": [c_void_p, c_char_p, P(CheckpointOptions), P(c_void_p)],
    "fsdp_checkpoint_load": [c_void_p, c_char_p, P(CheckpointOptions), P(CheckpointReport)],
    "fsdp_checkpoint_metadata": [c_char_p, c_char_p, c_char_p, size_t, P(size_t)],
    "fsdp_checkpoint_describe": [c_char_p, c_char_p, size_t, P(size_t)],
    "fsdp_param_group_of": [P(c_char_p), c_int, c_char_p, P(c_int)],
    "fsdp_optimizer_kind_info": [c_int, P(c_char_p), P(c_int), P(c_int), P(c_int)],
    "fsdp_optimizer_state_name": [c_int, c_int, P(c_char_p)],
    "fsdp_optimizer_hyperparam_name": [c_int, c_int, P(c_char_p)],
    "fsdp_optimizer_defaults": [c_int, P(Hyperparams)],
    "fsdp_storage_dtype": [c_int, P(c_int)],
    "fsdp_precision_resolve": [c_void_p, c_int, c_int, c_int, P(c_int), P(c_int)],
}
_RESTYPES = {"fsdp_status_string": c_char_p, "fsdp_last_error": c_char_p}


def _candidates():
    """Where to look for libfsdp.so: $LIBFSDP_LIBRARY, the install this package came with, the
    system's library path."""
    env = os.environ.get("LIBFSDP_LIBRARY")
    if env:
        yield env
        return
    try:
        from libfsdp._install import LIBRARY  # written by `cmake --install`
        yield LIBRARY
    except ImportError:
        pass
    found = ctypes.util.find_library("fsdp")
    if found:
        yield found


def load():
    errors = []
    for path in _candidates():
        try:
            # RTLD_GLOBAL: MPI's symbols stay visible to anything loaded later (mpi4py, ...).
            lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            break
        except OSError as e:
            errors.append(f"{path}: {e}")
    else:
        raise ImportError("libfsdp: cannot load libfsdp.so (set LIBFSDP_LIBRARY to its path)"
                          + ("; tried " + "; ".join(errors) if errors else ""))
    global LOADED_FROM
    LOADED_FROM = path
    for name, argtypes in _PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = _RESTYPES.get(name, c_int)
    if lib.fsdp_check_version(*VERSION) != SUCCESS:
        raise ImportError("libfsdp: " + lib.fsdp_last_error().decode())
    return lib


def library():
    """libfsdp.so for `import libfsdp`: loaded now, so that a missing or unloadable library is an
    ImportError at once; or, where PyTorch is installed but not imported yet, found now and loaded
    at the first call (LazyLibrary)."""
    if "torch" in sys.modules or importlib.util.find_spec("torch") is None:
        return load()
    found = [p for p in _candidates() if os.sep not in p or os.path.exists(p)]
    if not found:
        raise ImportError("libfsdp: cannot load libfsdp.so (set LIBFSDP_LIBRARY to its path); "
                          "tried " + ", ".join(_candidates()))
    return LazyLibrary()


class LazyLibrary:
    """libfsdp.so, loaded at the first call. A CUDA build of libfsdp needs libcudart and libnccl,
    which a PyTorch wheel also brings under the same sonames: whichever loads first serves both,
    and PyTorch fails on an older NCCL (`undefined symbol: ncclCommResume`). Loading late lets the
    program, libfsdp.pytorch or libfsdp.dcp import torch before the library."""

    _lib = None

    def __getattr__(self, name):
        if LazyLibrary._lib is None:
            LazyLibrary._lib = load()
        return getattr(LazyLibrary._lib, name)
