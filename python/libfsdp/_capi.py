"""The C ABI of libfsdp through ctypes: loading the library and its description, _abi.py,
generated from include/fsdp.h at build time (bindings/generate.py): the structs, the enums and
the prototype of every exported call. Nothing here is public; libfsdp/__init__.py builds on it."""
import ctypes
import ctypes.util
import importlib.util
import os
import sys

# Where the library was loaded from (set by load()).
LOADED_FROM = None


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


def _load_abi():
    """_abi.py: installed in this package (cmake --install, pip), or, for the package of the
    source tree, the copy the build wrote beside the library it describes (libfsdp_abi.py)."""
    try:
        from libfsdp import _abi
        return _abi
    except ImportError:
        pass
    tried = []
    for path in _candidates():
        beside = os.path.join(os.path.dirname(path), "libfsdp_abi.py")
        tried.append(beside)
        if os.path.exists(beside):
            spec = importlib.util.spec_from_file_location("libfsdp._abi", beside)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            sys.modules["libfsdp._abi"] = module
            return module
    raise ImportError("libfsdp: no _abi.py in the package and no libfsdp_abi.py beside the library "
                      "(build the project, or set LIBFSDP_LIBRARY to the build's libfsdp.so); tried "
                      + ", ".join(tried))


_abi = _load_abi()
VERSION = _abi.VERSION  # the header version the description was generated from (checked at load)
PROTOTYPES = _abi.PROTOTYPES
INITIALIZERS = _abi.INITIALIZERS
Config, ParamDesc, UnitOptions = _abi.Config, _abi.ParamDesc, _abi.UnitOptions
MemoryStats, Hyperparams = _abi.MemoryStats, _abi.Hyperparams
CheckpointOptions, CheckpointReport = _abi.CheckpointOptions, _abi.CheckpointReport
SafetensorsOptions, CheckpointCheckOptions = _abi.SafetensorsOptions, _abi.CheckpointCheckOptions
PlanJob, PlanMemory, PlanTraffic = _abi.PlanJob, _abi.PlanMemory, _abi.PlanTraffic
PlanMachine, PlanTime = _abi.PlanMachine, _abi.PlanTime


def _enum(typedef):
    return _abi.ENUMS[typedef]


_status = _enum("fsdp_status_t")
STATUS_NAMES = sorted(_status, key=_status.get)
SUCCESS, ERR_INVALID_ARGUMENT = _status["FSDP_SUCCESS"], _status["FSDP_ERR_INVALID_ARGUMENT"]
_dtype = _enum("fsdp_dtype_t")
DTYPE_AUTO, FLOAT32, FLOAT64, BFLOAT16, FLOAT16 = (
    _dtype[f"FSDP_{n}"] for n in ("DTYPE_AUTO", "FLOAT32", "FLOAT64", "BFLOAT16", "FLOAT16"))


def _table(typedef, names):
    """{Python spelling: value} for enumerators named by `names` {spelling: C name}."""
    members = _enum(typedef)
    return {k: members[c] for k, c in names.items()}


# The Python spellings of the enums' members (tests/check_python_capi.py checks each table
# covers its enum).
STRATEGIES = _table("fsdp_sharding_strategy_t", {"full": "FSDP_FULL_SHARD",
                                                 "hybrid": "FSDP_HYBRID_SHARD",
                                                 "none": "FSDP_NO_SHARD"})
REDUCTIONS = _table("fsdp_grad_reduction_t", {"mean": "FSDP_REDUCE_MEAN",
                                              "sum": "FSDP_REDUCE_SUM"})
GROUPS = _table("fsdp_group_t", {k: f"FSDP_GROUP_{k.upper()}"
                                 for k in ("world", "shard", "replicate", "node")})
OPS = _table("fsdp_reduce_op_t", {k: f"FSDP_OP_{k.upper()}" for k in ("sum", "max", "min")})
OPTIMIZERS = _table("fsdp_optimizer_kind_t", {"sgd": "FSDP_OPTIMIZER_SGD",
                                              "adamw": "FSDP_OPTIMIZER_ADAMW"})
MEMORY_SPACES = _table("fsdp_memory_space_t", {"host": "FSDP_MEMORY_HOST",
                                               "cuda": "FSDP_MEMORY_CUDA"})
TRANSPORTS = _table("fsdp_transport_t", {k: f"FSDP_TRANSPORT_{k.upper()}"
                                         for k in ("auto", "mpi", "nccl", "shm",
                                                   "shm_zero_copy")})
LAYOUTS = _table("fsdp_unit_layout_t", {"flat": "FSDP_LAYOUT_FLAT", "dim0": "FSDP_LAYOUT_DIM0"})
USED_BY = _table("fsdp_unit_use_t", {"all_ranks": "FSDP_USED_BY_ALL_RANKS",
                                     "any_ranks": "FSDP_USED_BY_ANY_RANKS"})
ON_TIMEOUT = _table("fsdp_on_timeout_t", {"error": "FSDP_ON_TIMEOUT_ERROR",
                                          "abort": "FSDP_ON_TIMEOUT_ABORT"})
LOAD_FLAGS = _table("fsdp_load_flags_t", {k: f"FSDP_LOAD_{k.upper()}"
                                          for k in ("strict", "partial", "model_only",
                                                    "convert_dtype")})
PLAN_FORMATS = _table("fsdp_plan_model_format_t", {"layout": "FSDP_PLAN_MODEL_JSON",
                                                   "checkpoint": "FSDP_PLAN_MODEL_CHECKPOINT",
                                                   "hf": "FSDP_PLAN_MODEL_HF_CONFIG"})
BUFFERS = _table("fsdp_buffer_t", {"param": "FSDP_BUFFER_PARAM", "grad": "FSDP_BUFFER_GRAD",
                                    "shard": "FSDP_BUFFER_SHARD",
                                    "shard_grad": "FSDP_BUFFER_GRAD_SHARD"})
CONFIG_MAGIC = _abi.DEFINES["FSDP_CONFIG_MAGIC"]
MAX_NDIM = _abi.DEFINES["FSDP_MAX_NDIM"]


def initialized(macro):
    """The struct an initializer macro of fsdp.h fills (e.g. "FSDP_SAFETENSORS_OPTIONS_INIT")."""
    cls, values = INITIALIZERS[macro]
    return getattr(_abi, cls)(**values)


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
    for name, (argtypes, restype) in PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = restype
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
