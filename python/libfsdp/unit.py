"""libfsdp.Unit: one flat parameter, and its buffers (DLPack; numpy views of host memory)."""
import ctypes

import numpy as np

from . import _capi
from . import _NUMPY, _DTYPES, _check, _choice, _lib, _refuse
from ._dlpack import hand_out, host_array, unit_buffer
from .request import Request

_DTYPE_NAMES = {code: name for name, code in _DTYPES.items() if name not in (None, "auto")}
_CODES = {dtype: code for code, dtype in _NUMPY.items()}  # numpy shows bfloat16 as uint16


def storage_dtype(dtype):
    """The dtype ("float32", "float64") the library stores a parameter of `dtype` ("float32",
    "float64", "bfloat16", "float16") in (fsdp_storage_dtype)."""
    call = "fsdp_storage_dtype"
    out = ctypes.c_int()
    _check(_lib.fsdp_storage_dtype(_choice(call, "dtype", _DTYPES, dtype), ctypes.byref(out)))
    return _DTYPE_NAMES[out.value]


def resolve_precision(ctx, storage, param_dtype=None, reduce_dtype=None):
    """(param_dtype, reduce_dtype) names that a unit of `storage` parameters created in `ctx`
    (a Context or None) with these options would get, or libfsdp.Error as its creation would
    refuse them (fsdp_precision_resolve)."""
    call = "fsdp_precision_resolve"
    codes = [_choice(call, arg, _DTYPES, value) for arg, value in
             (("storage", storage), ("param_dtype", param_dtype), ("reduce_dtype", reduce_dtype))]
    param, reduce = ctypes.c_int(), ctypes.c_int()
    _check(_lib.fsdp_precision_resolve(ctx._handle if ctx is not None else None, *codes,
                                       ctypes.byref(param), ctypes.byref(reduce)))
    return _DTYPE_NAMES[param.value], _DTYPE_NAMES[reduce.value]


class Unit:
    """A unit of a Context: its parameters' names, shapes and dtypes, and views of the
    unsharded parameters, the full gradients and the shard. Create with Context.unit()."""

    def __init__(self, ctx, handle):
        self.context, self._handle = ctx, handle
        n, precision = ctypes.c_int(), [ctypes.c_int() for _ in range(3)]
        _check(_lib.fsdp_unit_info(handle, ctypes.byref(n), None))
        _check(_lib.fsdp_unit_precision(handle, *[ctypes.byref(p) for p in precision]))
        self.dtype, self.param_dtype, self.reduce_dtype = (_NUMPY[p.value] for p in precision)
        # FSDP_TRANSPORT=shm_zero_copy: the shard is this rank's block of the node's unsharded
        # copy, so write it only when no rank of the node still reads the unit's parameters.
        zero_copy = ctypes.c_int()
        _check(_lib.fsdp_unit_zero_copy(handle, ctypes.byref(zero_copy)))
        self.zero_copy = bool(zero_copy.value)
        self.names, self.shapes, self.requires_grad = [], [], []
        for i in range(n.value):
            name, ndim, rg = ctypes.c_char_p(), ctypes.c_int(), ctypes.c_int()
            shape = (ctypes.c_int64 * _capi.MAX_NDIM)()
            _check(_lib.fsdp_param_info(handle, i, ctypes.byref(name), ctypes.byref(ndim), shape,
                                        None, ctypes.byref(rg)))
            self.names.append(name.value.decode())
            self.shapes.append(tuple(shape[:ndim.value]))
            self.requires_grad.append(bool(rg.value))

    @classmethod
    def _create(cls, ctx, params, name, param_dtype, reduce_dtype, sync_from_rank0,
                layout="flat", used_by="all_ranks"):
        call = "fsdp_unit_create_ex"
        params = list(params)
        if not params:
            _refuse(call, "params: at least one (name, array) pair is needed")
        descs = (_capi.ParamDesc * len(params))()
        values = (ctypes.c_void_p * len(params))()
        keep = []  # names, shapes and arrays must outlive the call
        for i, entry in enumerate(params):
            where = f"params[{i}]"
            if not isinstance(entry, (tuple, list)) or len(entry) not in (2, 3, 4):
                _refuse(call, f"{where}: (name, array[, requires_grad]) or (name, shape, dtype[, "
                        "requires_grad]) "
                        f"is needed, got {type(entry).__name__}")
            pname, requires_grad = entry[0], True
            if not isinstance(pname, str):
                _refuse(call, f"{where}: the name must be a str")
            if len(entry) == 2 or (len(entry) == 3 and isinstance(entry[1], np.ndarray)):
                array = entry[1]
                if len(entry) == 3:
                    requires_grad = bool(entry[2])
                if not isinstance(array, np.ndarray):
                    _refuse(call, f"{where} \"{pname}\": a numpy array is needed, got "
                            f"{type(array).__name__}")
                if not array.flags.c_contiguous:
                    _refuse(call, f"{where} \"{pname}\": the array is not C-contiguous (row-"
                            "major); pass np.ascontiguousarray(a)")
                shape, dtype = array.shape, array.dtype
                keep.append(array)
                values[i] = array.ctypes.data
            else:
                shape, dtype = tuple(entry[1]), np.dtype(entry[2])
                if len(entry) == 4:
                    requires_grad = bool(entry[3])
            if dtype not in _CODES:  # the library checks every other rule of a descriptor
                _refuse(call, f"{where} \"{pname}\": dtype {dtype} is not one of the library's "
                        "(float32, float64, bfloat16 as uint16 bits, float16)")
            cshape = (ctypes.c_int64 * max(len(shape), 1))(*[int(e) for e in shape])
            keep += [pname.encode(), cshape]
            descs[i] = _capi.ParamDesc(keep[-2], len(shape), cshape if shape else None,
                                       _CODES[dtype], 1 if requires_grad else 0)
        opts = _capi.UnitOptions()
        opts.size = ctypes.sizeof(opts)
        opts.name = name.encode() if name else None
        opts.param_dtype = _choice(call, "param_dtype", _DTYPES, param_dtype)
        opts.reduce_dtype = _choice(call, "reduce_dtype", _DTYPES, reduce_dtype)
        opts.sync_from_rank0 = 1 if sync_from_rank0 else 0
        opts.layout = _choice(call, "layout", _capi.LAYOUTS, layout)
        opts.used_by = _choice(call, "used_by", _capi.USED_BY, used_by)
        handle = ctypes.c_void_p()
        _check(_lib.fsdp_unit_create_ex(ctx._handle, len(params), descs, values,
                                        ctypes.byref(opts), ctypes.byref(handle)))
        unit = cls(ctx, handle)
        unit.used_by = used_by  # as created: "all_ranks" or "any_ranks"
        ctx.units.append(unit)
        return unit

    def index(self, param, call="fsdp_param_data"):
        """The index of a parameter given by index or name (`call`: whose error an unknown name
        is)."""
        if isinstance(param, str):
            if param not in self.names:
                _refuse(call, f"param: no parameter named \"{param}\" in this unit "
                        f"(it has {self.names})")
            return self.names.index(param)
        return int(param)  # the library checks the range

    # ---- the cycle ---------------------------------------------------------------------------
    def unshard(self):
        _check(_lib.fsdp_unshard(self._handle))

    def unshard_async(self):
        req = ctypes.c_void_p()
        _check(_lib.fsdp_unshard_async(self._handle, ctypes.byref(req)))
        return Request(req)

    def reshard(self):
        _check(_lib.fsdp_reshard(self._handle))

    def reduce_grads(self):
        _check(_lib.fsdp_reduce_grads(self._handle))

    def reduce_grads_async(self):
        req = ctypes.c_void_p()
        _check(_lib.fsdp_reduce_grads_async(self._handle, ctypes.byref(req)))
        return Request(req)

    def wait(self):
        _check(_lib.fsdp_unit_wait(self._handle))

    def set_grad_sync(self, enabled):
        """Gradient sync for this unit alone (fsdp_unit_set_grad_sync); local."""
        _check(_lib.fsdp_unit_set_grad_sync(self._handle, 1 if enabled else 0))

    def set_grad_divide_factor(self, factor):
        """What this unit's reduced gradient is divided by (fsdp_unit_set_grad_divide_factor):
        the sum over the ranks / factor; 0 restores the context's rule. Local."""
        _check(_lib.fsdp_unit_set_grad_divide_factor(self._handle, float(factor)))

    @property
    def grad_sync(self):
        """Whether reduce_grads communicates now: this unit's and the context's setting both on
        (fsdp_unit_grad_sync)."""
        on = ctypes.c_int()
        _check(_lib.fsdp_unit_grad_sync(self._handle, ctypes.byref(on)))
        return bool(on.value)

    def zero_grads(self):
        """Every gradient None (the shard marked zero; fsdp_zero_grads). Local."""
        _check(_lib.fsdp_zero_grads(self._handle))

    def grad_none(self):
        """Per parameter, whether its gradient is None (fsdp_grad_none): a list of bools; frozen
        parameters read True. Local."""
        flags = (ctypes.c_int * len(self.names))()
        _check(_lib.fsdp_grad_none(self._handle, flags, len(self.names)))
        return [bool(f) for f in flags]

    def set_grad_none(self, param, none=True):
        """Marks a trainable parameter (index or name) without a gradient, PyTorch's
        p.grad = None, until the next reduction or zero_grads; none=False gives it its gradient
        back (fsdp_grad_set_none). The library's optimizers skip it. Local: every rank marks
        alike."""
        _check(_lib.fsdp_grad_set_none(self._handle, self.index(param), 1 if none else 0))

    # ---- buffers -----------------------------------------------------------------------------
    def dlpack(self, which, param=None):
        """A buffer of the unit as a libfsdp.DLPackBuffer (fsdp_dlpack), which torch.from_dlpack,
        np.from_dlpack, cupy.from_dlpack and jax.numpy.from_dlpack view without a copy, in host
        or CUDA memory alike. which: "param" or "grad" with `param` (index or name): the
        unsharded parameter (valid until reshard) or its full gradient (valid until
        reduce_grads), of its shape in param_dtype; "shard" or "shard_grad" without `param`:
        the 1-D shard or gradient shard in the unit's dtype (valid for the unit's life)."""
        call = "fsdp_dlpack"
        _choice(call, "which", _capi.BUFFERS, which)
        if which in ("param", "grad"):
            if param is None:
                _refuse(call, f"param: which = '{which}' needs a parameter (index or name)")
            index = self.index(param, call)
        else:
            if param is not None:
                _refuse(call, f"param: which = '{which}' takes none, got {param!r}")
            index = 0
        return unit_buffer(self._handle, which, index)

    def param(self, param):
        """The unsharded parameter (by index or name), of its shape in param_dtype: the
        library's buffer (valid until reshard(); writes are discarded there) as a numpy view in
        host memory, as its DLPackBuffer in CUDA memory."""
        return hand_out(unit_buffer(self._handle, "param", self.index(param)))

    def unsharded(self):
        """Every unsharded parameter in order, flattened and concatenated into one 1-D array in
        param_dtype, padding excluded: a copy, since the buffer has padding between parameters
        (each starts where the library aligned it) and between sections (trainable, frozen).
        Each parameter is read where fsdp_param_data says it is. The unit must be unsharded.
        Host memory only (a CUDA context's parameters: Unit.dlpack)."""
        self.context._host_memory("fsdp_param_data", "the unsharded parameters")
        return np.concatenate([self.param(i).reshape(-1) for i in range(len(self.shapes))])

    def gather(self):
        """Every parameter's full master values (the storage dtype: float32 or float64, not the
        param_dtype copy unshard() gives) as new arrays of their shapes, through one all-gather
        of the shards (fsdp_gather_params). Collective over the shard group; the unit may be
        sharded or unsharded."""
        out = [np.empty(shape, self.dtype) for shape in self.shapes]
        ptrs = (ctypes.c_void_p * max(len(out), 1))(*[a.ctypes.data for a in out])
        _check(_lib.fsdp_gather_params(self._handle, ptrs))
        return out

    def grad(self, param):
        """The full gradient buffer of a parameter (shape, param_dtype) to write or add into;
        valid until reduce_grads(). A numpy view in host memory, a DLPackBuffer in CUDA memory."""
        return hand_out(unit_buffer(self._handle, "grad", self.index(param, "fsdp_grad_data")))

    def write_grad(self, param, values, accumulate=False):
        """Writes (or adds, accumulate=True) a full gradient. `values`: a numpy array, or any
        array of host memory that exports DLPack (a CPU torch tensor, a JAX array: read through
        np.from_dlpack, no copy); an array on another device (a CUDA tensor) is refused. It must
        have the parameter's exact shape and dtype (float32 is also accepted for bfloat16 /
        float16 param_dtype and converted); otherwise Error names the argument and nothing is
        written."""
        call = "fsdp_grad_data"
        self.context._host_memory(call, "gradients")
        i = self.index(param, call)
        values = host_array(call, values)
        if values.shape != self.shapes[i]:
            _refuse(call, f"values: shape {values.shape}, but parameter {i} \"{self.names[i]}\" "
                    f"has shape {self.shapes[i]}")
        converts = self.param_dtype in (np.uint16, np.float16) and values.dtype == np.float32
        if values.dtype != self.param_dtype and not converts:
            _refuse(call, f"values: dtype {values.dtype}, but the unit's gradients are "
                    f"{self._dtype_name(self.param_dtype)}")
        if converts and accumulate:  # would round twice; the caller should sum in float32 first
            _refuse(call, "accumulate: adding float32 into a 16-bit gradient is not supported; "
                    "sum the micro-batches in float32 first")
        target = self.grad(i)
        if converts:
            src = np.ascontiguousarray(values)
            converted = np.empty(target.shape, self.param_dtype)
            to = _capi.BFLOAT16 if self.param_dtype == np.uint16 else _capi.FLOAT16
            _check(_lib.fsdp_convert(converted.ctypes.data, to, src.ctypes.data, _capi.FLOAT32,
                                     src.size))
            values = converted
        if accumulate:
            target += values
        else:
            target[...] = values

    @staticmethod
    def _dtype_name(dtype):
        return "bfloat16 (uint16 bits)" if dtype == np.uint16 else str(dtype)

    def shard(self):
        """This rank's master shard (1-D, the unit's dtype, padding included); unit's life. A
        numpy view in host memory, a DLPackBuffer in CUDA memory."""
        return hand_out(unit_buffer(self._handle, "shard", 0))

    def shard_grad(self):
        """This rank's gradient shard (1-D); fetch again after zero_grads(). A numpy view in
        host memory, a DLPackBuffer in CUDA memory."""
        return hand_out(unit_buffer(self._handle, "shard_grad", 0))

    def shard_range(self, param):
        """(shard_offset, param_offset, length) of the parameter's part in this rank's shard."""
        out = [ctypes.c_size_t() for _ in range(3)]
        i = self.index(param, "fsdp_param_shard_range")
        _check(_lib.fsdp_param_shard_range(self._handle, i,
                                           *[ctypes.byref(o) for o in out]))
        return tuple(o.value for o in out)

    def numel(self):
        """(numel, padded_numel, shard_numel) of the unit."""
        out = [ctypes.c_size_t() for _ in range(3)]
        _check(_lib.fsdp_unit_numel(self._handle, *[ctypes.byref(o) for o in out]))
        return tuple(o.value for o in out)

    def destroy(self):
        _check(_lib.fsdp_unit_destroy(ctypes.byref(self._handle)))
        self.context.units.remove(self)
