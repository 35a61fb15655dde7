"""libfsdp.Context: a context over an MPI communicator (fsdp_init ... fsdp_finalize)."""
import ctypes

import numpy as np

from . import _capi
from . import _check, _choice, _lib, _refuse
from .optimizer import Optimizer
from .request import Request
from .unit import Unit


class Context:
    """Units, optimizers and checkpoints over one communicator. Create with libfsdp.init()."""

    def __init__(self, handle):
        self._handle = handle
        self.units = []
        self._on_device = self.placement()["memory_space"] == "cuda"

    def _host_memory(self, call, what="its buffers"):
        """Refuses (libfsdp.Error, FSDP_ERR_UNSUPPORTED) what needs a context's buffers in host
        memory (numpy arrays in or out; libfsdp.pytorch.FullyShard) on a CUDA context, whose
        buffers are on the GPU: those are taken through DLPack (Unit.dlpack)."""
        if self._on_device:
            _refuse(call, f"ctx: a CUDA context (memory_space='cuda') keeps {what} on the GPU; "
                    "numpy arrays are host memory: take the buffer through DLPack "
                    "(Unit.dlpack, torch.from_dlpack)",
                    _capi.STATUS_NAMES.index("FSDP_ERR_UNSUPPORTED"))

    # ---- groups and state --------------------------------------------------------------------
    def group(self, which="world"):
        """(rank, size) of this rank in "world", "shard", "replicate" or "node" (hpZ's node
        group, FSDP_GROUP_NODE). Local."""
        rank, size = ctypes.c_int(), ctypes.c_int()
        g = _choice("fsdp_group_info", "group", _capi.GROUPS, which)
        _check(_lib.fsdp_group_info(self._handle, g, ctypes.byref(rank), ctypes.byref(size)))
        return rank.value, size.value

    def broadcast(self, values, root=0, group="world"):
        """Sends numpy array `values` (contiguous; the same shape and dtype on every rank) from
        rank `root` of `group` ("world", "shard" or "replicate") to every rank of it, in place
        (fsdp_broadcast): a value every rank must agree on. Collective; returns `values`."""
        g = _choice("fsdp_broadcast", "group", _capi.GROUPS, group)
        if not isinstance(values, np.ndarray) or not values.flags.c_contiguous:
            _refuse("fsdp_broadcast", "values: a C-contiguous numpy array is needed")
        _check(_lib.fsdp_broadcast(self._handle, g, int(root), values.ctypes.data, values.nbytes))
        return values

    def allreduce(self, values, op="sum", group="world"):
        """Reduces float64 numpy array `values` (contiguous; the same shape on every rank)
        element-wise over `group` ("world", "shard" or "replicate"), in place (fsdp_allreduce):
        op "sum", "max" or "min". Collective; returns `values`."""
        g = _choice("fsdp_allreduce", "group", _capi.GROUPS, group)
        o = _choice("fsdp_allreduce", "op", _capi.OPS, op)
        if (not isinstance(values, np.ndarray) or values.dtype != np.float64
                or not values.flags.c_contiguous):
            _refuse("fsdp_allreduce", "values: a C-contiguous float64 numpy array is needed")
        _check(_lib.fsdp_allreduce(self._handle, g, o,
                                   values.ctypes.data_as(ctypes.POINTER(ctypes.c_double)),
                                   values.size))
        return values

    @property
    def sharding_factor(self):
        f = ctypes.c_int()
        _check(_lib.fsdp_context_config(self._handle, ctypes.byref(f), None, None))
        return f.value

    def placement(self):
        """fsdp_context_placement after AUTO was resolved: memory_space ("host"/"cuda"), device
        (-1 for host memory), cpu_offload, transport ("mpi", "nccl", "shm", "shm_zero_copy").
        Local."""
        out = [ctypes.c_int() for _ in range(4)]
        _check(_lib.fsdp_context_placement(self._handle, *[ctypes.byref(o) for o in out]))
        name = lambda table, v: next(k for k, x in table.items() if x == v)
        return {"memory_space": name(_capi.MEMORY_SPACES, out[0].value), "device": out[1].value,
                "cpu_offload": bool(out[2].value),
                "transport": name(_capi.TRANSPORTS, out[3].value)}

    @property
    def progress_thread(self):
        on = ctypes.c_int()
        _check(_lib.fsdp_context_async(self._handle, ctypes.byref(on)))
        return bool(on.value)

    def memory_stats(self):
        """fsdp_memory_stats as a dict of byte counts. Local."""
        s = _capi.MemoryStats()
        s.size = ctypes.sizeof(s)
        _check(_lib.fsdp_memory_stats(self._handle, ctypes.byref(s)))
        return {name: getattr(s, name) for name, _ in s._fields_ if name != "size"}

    def reset_peak_memory(self):
        _check(_lib.fsdp_reset_peak_memory(self._handle))

    def set_stream(self, stream):
        """fsdp_set_stream: the caller's CUDA stream (a cudaStream_t as an int, such as torch's
        torch.cuda.current_stream().cuda_stream; None or 0: the legacy default stream) that a
        CUDA context orders its work against. Error FSDP_ERR_UNSUPPORTED on a host context.
        Local."""
        _check(_lib.fsdp_set_stream(self._handle, ctypes.c_void_p(stream or None)))

    def set_grad_sync(self, enabled):
        _check(_lib.fsdp_set_grad_sync(self._handle, 1 if enabled else 0))

    def set_prefetch(self, forward, backward):
        _check(_lib.fsdp_set_prefetch(self._handle, 1 if forward else 0, 1 if backward else 0))

    def begin_forward(self):
        _check(_lib.fsdp_begin_forward(self._handle))

    def begin_backward(self):
        _check(_lib.fsdp_begin_backward(self._handle))

    def step_boundary(self):
        """fsdp_step_boundary: once per step on every rank, after backward and before the
        parameter update, where units are used by any subset of ranks (used_by="any_ranks"):
        reduces those some rank wrote a gradient for and opens the update phase, in which this
        rank's shards may be written until its next call that is not of the phase (an optimizer
        step, clip_grad_norm and the grad scaler are; unshard, begin_forward, allreduce, a
        checkpoint and the next boundary end it). Without such units it only checks the context.
        Collective over the world group."""
        _check(_lib.fsdp_step_boundary(self._handle))

    # ---- units and optimizers ----------------------------------------------------------------
    def unit(self, params, name=None, param_dtype=None, reduce_dtype=None, sync_from_rank0=False,
             layout="flat", used_by="all_ranks"):
        """Creates a Unit (collective over the world group) from `params`: a sequence of
        (name, array[, requires_grad]), where each array is C-contiguous float32 or float64 (all
        of one dtype) holding the parameter's initial full values, or (name, shape, dtype[,
        requires_grad]) for a zero-initialized one. `layout`: what each rank's shard holds,
        "flat" or "dim0" (fsdp_unit_layout_t: each parameter split along its first dimension,
        FSDP2's). `used_by` (fsdp_unit_use_t): "all_ranks", every rank unshards and reduces it in
        the same order, or "any_ranks", any subset of ranks uses it in a step, each on its own
        (unshard reads the others' shards one-sidedly, reduce_grads keeps the gradient until
        step_boundary; host memory only)."""
        return Unit._create(self, params, name, param_dtype, reduce_dtype, sync_from_rank0,
                            layout, used_by)

    def optimizer(self, kind, units, **hyperparams):
        """A sharded "sgd" or "adamw" over `units` with PyTorch's defaults overridden by
        `hyperparams` (lr, weight_decay, momentum, dampening, nesterov, betas, eps). Collective."""
        return Optimizer._create(self, kind, units, hyperparams)

    def clip_grad_norm(self, max_norm, norm_type=2.0):
        """Clips every unit's gradient by the total norm; returns the norm before clipping."""
        total = ctypes.c_double()
        _check(_lib.fsdp_clip_grad_norm(self._handle, float(max_norm), float(norm_type),
                                        ctypes.byref(total)))
        return total.value

    # ---- checkpoints ---------------------------------------------------------------------------
    def _checkpoint_options(self, call, optimizers, metadata, flags):
        opts = _capi.CheckpointOptions()
        opts.size = ctypes.sizeof(opts)
        keep = []  # the ctypes arrays must outlive the call
        optimizers = list(optimizers or [])
        if optimizers:
            handles = (ctypes.c_void_p * len(optimizers))(*[o._handle for o in optimizers])
            opts.noptimizers, opts.optimizers = len(optimizers), handles
            keep.append(handles)
        metadata = dict(metadata or {})
        if metadata:
            if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
                _refuse(call, "metadata: a dict of str keys and str values is needed")
            keys = (ctypes.c_char_p * len(metadata))(*[k.encode() for k in metadata])
            values = (ctypes.c_char_p * len(metadata))(*[v.encode() for v in metadata.values()])
            opts.nmetadata, opts.metadata_keys, opts.metadata_values = len(metadata), keys, values
            keep += [keys, values]
        bits = 0
        for flag in flags:
            bits |= _choice(call, "flags", _capi.LOAD_FLAGS, flag)
        opts.load_flags = bits
        return opts, keep

    def save(self, path, optimizers=(), metadata=None):
        """fsdp_checkpoint_save: every unit, the optimizers' state, str metadata. Collective."""
        opts, keep = self._checkpoint_options("fsdp_checkpoint_save", optimizers, metadata, ())
        _check(_lib.fsdp_checkpoint_save(self._handle, str(path).encode(), ctypes.byref(opts)))

    def save_async(self, path, optimizers=(), metadata=None):
        """fsdp_checkpoint_save_async; returns a Request to wait() on. Collective."""
        opts, keep = self._checkpoint_options("fsdp_checkpoint_save_async", optimizers, metadata,
                                              ())
        req = ctypes.c_void_p()
        _check(_lib.fsdp_checkpoint_save_async(self._handle, str(path).encode(),
                                               ctypes.byref(opts), ctypes.byref(req)))
        return Request(req)

    def load(self, path, optimizers=(), flags=("strict",)):
        """fsdp_checkpoint_load on any rank count; returns the report as a dict. Collective."""
        opts, keep = self._checkpoint_options("fsdp_checkpoint_load", optimizers, None, flags)
        report = _capi.CheckpointReport()
        report.size = ctypes.sizeof(report)
        _check(_lib.fsdp_checkpoint_load(self._handle, str(path).encode(), ctypes.byref(opts),
                                         ctypes.byref(report)))
        return {"loaded": report.loaded, "missing": report.missing,
                "unexpected": report.unexpected, "mismatched": report.mismatched,
                "details": (report.details or b"").decode()}

    def finalize(self):
        """fsdp_finalize: frees every unit and optimizer of the context. Collective."""
        # Units keep their handles: the library answers FSDP_ERR_FINALIZED for them from now on.
        _check(_lib.fsdp_finalize(ctypes.byref(self._handle)))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._handle:
            self.finalize()
