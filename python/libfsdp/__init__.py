"""libfsdp from Python: a thin ctypes binding over the C ABI (include/fsdp.h).

Buffers are the library's own memory, never copies, described by DLPack (`Unit.dlpack`,
`Optimizer.state_dlpack`: a `DLPackBuffer`, which torch.from_dlpack, np.from_dlpack,
cupy.from_dlpack and jax.numpy.from_dlpack take). `Unit.param(i)` gives the unsharded parameter
(valid until `reshard`), `Unit.grad(i)` the full gradient to write (valid until `reduce_grads`),
`Unit.shard()` the master shard (valid for the unit's life): numpy views in host memory, the
DLPackBuffer itself in CUDA memory. Every error raises `libfsdp.Error`, whose message names the
call and the argument, as `fsdp_last_error` does in C.

    import numpy as np, libfsdp
    ctx = libfsdp.init()                         # MPI_COMM_WORLD; initializes MPI if needed
    unit = ctx.unit([("w", np.ones((4, 3), np.float32))])
    unit.unshard(); print(unit.param("w")); unit.reshard()
    ctx.finalize(); libfsdp.finalize_mpi()
"""
import atexit
import ctypes
import json

import numpy as np

from . import _capi

_lib = _capi.library()  # now, or at the first call where torch may come later (LazyLibrary)


def _library_version():
    parts = [ctypes.c_int() for _ in range(3)]
    _lib.fsdp_get_version(*[ctypes.byref(p) for p in parts])
    return "%d.%d.%d" % tuple(p.value for p in parts)


def __getattr__(name):
    """__version__: the loaded library's (fsdp_get_version), asked when first read."""
    if name == "__version__":
        return _library_version()
    raise AttributeError(f"module 'libfsdp' has no attribute '{name}'")

# numpy dtypes of the library's dtypes. numpy has no bfloat16: its buffers appear as uint16 bits
# (convert with to_float32).
_NUMPY = {_capi.FLOAT32: np.dtype(np.float32), _capi.FLOAT64: np.dtype(np.float64),
          _capi.FLOAT16: np.dtype(np.float16), _capi.BFLOAT16: np.dtype(np.uint16)}
_DTYPES = {"auto": _capi.DTYPE_AUTO, None: _capi.DTYPE_AUTO, "float32": _capi.FLOAT32,
           "float64": _capi.FLOAT64, "bfloat16": _capi.BFLOAT16, "float16": _capi.FLOAT16}


class Error(Exception):
    """A libfsdp call failed. `status` is the C status code, `status_name` its name."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.status_name = (_capi.STATUS_NAMES[status] if 0 <= status < len(_capi.STATUS_NAMES)
                            else str(status))


def _check(status):
    if status != _capi.SUCCESS:
        raise Error(status, _lib.fsdp_last_error().decode())


def _refuse(call, message, status=_capi.ERR_INVALID_ARGUMENT):
    """An error the binding found in its own arguments, before calling the library: recorded as
    the library's last error so every layer reports alike; nothing was touched."""
    _lib.fsdp_record_error(status, call.encode(), message.encode())
    raise Error(status, _lib.fsdp_last_error().decode())


def _choice(call, arg, table, value):
    if value not in table:
        _refuse(call, f"{arg}: {value!r} is not one of {sorted(k for k in table if k)}")
    return table[value]


def to_float32(bits):
    """float32 values of a bfloat16 array (its uint16 bits, as this binding shows bfloat16)."""
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


_mpi_started = False


def init(comm=None, strategy="full", sharding_factor=0, param_dtype=None, reduce_dtype=None,
         grad_reduction="mean", max_unsharded=0, thread_multiple=True, memory_space="host",
         device=-1, cpu_offload=False, transport="auto", debug_collectives=False,
         on_timeout="error", timeout_s=0.0, hfsdp=False, hpz=False):
    """Creates a Context (collective over the communicator). Every field of fsdp_config_t:

    comm: None for MPI_COMM_WORLD (MPI is initialized here if nothing else did it; finalize it
    with finalize_mpi), an mpi4py communicator, or a Fortran communicator handle (int).
    strategy: "full", "hybrid" or "none"; sharding_factor: F, 0 for the strategy's default.
    param_dtype / reduce_dtype: None, "float32", "float64", "bfloat16", "float16".
    memory_space "host" or "cuda", device (-1: by node rank), cpu_offload; transport "auto",
    "mpi", "nccl", "shm" or "shm_zero_copy" (FSDP_TRANSPORT overrides); debug_collectives
    (FSDP_DEBUG); on_timeout "error" or "abort" after timeout_s seconds (0: no watchdog);
    hfsdp (optimizer state sharded across a hybrid job's replicas) and hpz (a node-local
    partition kept for the unshard after forward), as fsdp_config_t documents them."""
    call = "fsdp_init"
    cfg = _config(call, strategy, sharding_factor, param_dtype, reduce_dtype, grad_reduction,
                  max_unsharded, memory_space, device, cpu_offload, transport, debug_collectives,
                  on_timeout, timeout_s, hfsdp, hpz)
    fcomm = _fortran_comm(call, comm, thread_multiple)
    handle = ctypes.c_void_p()
    _check(_lib.fsdp_init_fcomm(fcomm, ctypes.byref(cfg), ctypes.byref(handle)))
    return Context(handle)


def _config(call, strategy="full", sharding_factor=0, param_dtype=None, reduce_dtype=None,
            grad_reduction="mean", max_unsharded=0, memory_space="host", device=-1,
            cpu_offload=False, transport="auto", debug_collectives=False, on_timeout="error",
            timeout_s=0.0, hfsdp=False, hpz=False):
    """An fsdp_config_t from init's keyword arguments (init and plan take the same ones)."""
    cfg = _capi.Config()
    _check(_lib.fsdp_config_defaults(ctypes.byref(cfg), ctypes.sizeof(cfg)))
    cfg.strategy = _choice(call, "strategy", _capi.STRATEGIES, strategy)
    cfg.grad_reduction = _choice(call, "grad_reduction", _capi.REDUCTIONS, grad_reduction)
    cfg.param_dtype = _choice(call, "param_dtype", _DTYPES, param_dtype)
    cfg.reduce_dtype = _choice(call, "reduce_dtype", _DTYPES, reduce_dtype)
    cfg.memory_space = _choice(call, "memory_space", _capi.MEMORY_SPACES, memory_space)
    cfg.transport = _choice(call, "transport", _capi.TRANSPORTS, transport)
    cfg.on_timeout = _choice(call, "on_timeout", _capi.ON_TIMEOUT, on_timeout)
    for arg, value in (("sharding_factor", sharding_factor), ("max_unsharded", max_unsharded),
                       ("device", device)):
        if not isinstance(value, int) or isinstance(value, bool):
            _refuse(call, f"{arg}: an int is needed, got {type(value).__name__}")
    if not isinstance(timeout_s, (int, float)) or isinstance(timeout_s, bool):
        _refuse(call, f"timeout_s: a number of seconds is needed, got {type(timeout_s).__name__}")
    cfg.sharding_factor, cfg.max_unsharded, cfg.device = sharding_factor, max_unsharded, device
    cfg.cpu_offload = 1 if cpu_offload else 0
    cfg.debug_collectives = 1 if debug_collectives else 0
    cfg.timeout_s = float(timeout_s)
    cfg.hfsdp = 1 if hfsdp else 0
    cfg.hpz = 1 if hpz else 0
    return cfg


def _fortran_comm(call, comm, thread_multiple=True):
    """The Fortran handle (MPI_Fint) of `comm` for the _fcomm calls: None for MPI_COMM_WORLD
    (MPI initialized here if nothing else did it), an mpi4py communicator or a Fortran handle."""
    global _mpi_started
    if comm is None:
        world = ctypes.c_int()
        _check(_lib.fsdp_mpi_init(1 if thread_multiple else 0, None, ctypes.byref(world)))
        if not _mpi_started:
            _mpi_started = True
            atexit.register(finalize_mpi)
        return world.value
    if hasattr(comm, "py2f"):
        return comm.py2f()
    if isinstance(comm, int) and not isinstance(comm, bool):
        return comm
    _refuse(call, f"comm: None, an mpi4py communicator or a Fortran handle (int) is needed, got "
            f"{type(comm).__name__}")


def finalize_mpi():
    """Finalizes MPI if init() initialized it (collective over MPI_COMM_WORLD); else nothing."""
    _check(_lib.fsdp_mpi_finalize())


def checkpoint_metadata(path, key):
    """A checkpoint's metadata value for `key` (str), read without a context. Local."""
    length = ctypes.c_size_t()
    _check(_lib.fsdp_checkpoint_metadata(str(path).encode(), key.encode(), None, 0,
                                         ctypes.byref(length)))
    buf = ctypes.create_string_buffer(length.value + 1)
    _check(_lib.fsdp_checkpoint_metadata(str(path).encode(), key.encode(), buf, len(buf), None))
    return buf.value.decode()


def describe_checkpoint(path):
    """What a checkpoint holds, without reading its values (fsdp_checkpoint_describe): a dict
    with "params" [{"name", "dtype", "shape"}], "optimizers" [{"kind", "groups", "state"}],
    "grad_scaler" and "metadata". Local."""
    length = ctypes.c_size_t()
    _check(_lib.fsdp_checkpoint_describe(str(path).encode(), None, 0, ctypes.byref(length)))
    buf = ctypes.create_string_buffer(length.value + 1)
    _check(_lib.fsdp_checkpoint_describe(str(path).encode(), buf, len(buf), None))
    return json.loads(buf.value.decode())


def _safetensors_options(call, dtype, max_shard_bytes):
    options = _capi.initialized("FSDP_SAFETENSORS_OPTIONS_INIT")
    options.dtype = _choice(call, "dtype", _DTYPES, dtype)
    if not isinstance(max_shard_bytes, int) or isinstance(max_shard_bytes, bool) or \
            max_shard_bytes < 0:
        _refuse(call, f"max_shard_bytes: an int >= 0 is needed, got {max_shard_bytes!r}")
    options.max_shard_bytes = max_shard_bytes
    return options


def safetensors_export(checkpoint, out, dtype=None, max_shard_bytes=0, comm=None):
    """The parameters of checkpoint `checkpoint` as safetensors (fsdp_safetensors_export): one
    file at `out`, or with max_shard_bytes > 0 a directory of Hugging Face shards; dtype None
    keeps each parameter's own, else "float32", "float64", "bfloat16" or "float16". Collective
    over `comm` (as for init); no context needed."""
    call = "fsdp_safetensors_export"
    options = _safetensors_options(call, dtype, max_shard_bytes)
    _check(_lib.fsdp_safetensors_export_fcomm(_fortran_comm(call, comm), str(checkpoint).encode(),
                                              str(out).encode(), ctypes.byref(options)))


def safetensors_import(source, checkpoint, dtype=None, comm=None):
    """Safetensors weights (a file, an index or a directory holding either) as a new checkpoint
    at `checkpoint` (fsdp_safetensors_import), stored as dtype "float32" or "float64" (None:
    float64 stays, the rest become float32). Collective over `comm` (as for init)."""
    call = "fsdp_safetensors_import"
    options = _safetensors_options(call, dtype, 0)
    _check(_lib.fsdp_safetensors_import_fcomm(_fortran_comm(call, comm), str(source).encode(),
                                              str(checkpoint).encode(), ctypes.byref(options)))


# The classes need _lib, _check... above.
from .context import Context  # noqa: E402
from .plan import plan, machine as plan_machine, sweep as plan_sweep  # noqa: E402
from .grad_scaler import GradScaler  # noqa: E402
from .optimizer import Optimizer  # noqa: E402
from .request import Request  # noqa: E402
from .unit import Unit  # noqa: E402
from ._dlpack import DLPackBuffer  # noqa: E402

__all__ = ["Error", "Context", "Unit", "Optimizer", "Request", "GradScaler", "DLPackBuffer",
           "init", "plan",
           "plan_machine", "plan_sweep", "finalize_mpi",
           "checkpoint_metadata", "describe_checkpoint", "to_float32"]
