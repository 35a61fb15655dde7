"""DLPack: the library's buffers as objects every array library takes without a copy.

A `DLPackBuffer` holds a DLPack tensor the C library made (fsdp_dlpack,
fsdp_optimizer_state_dlpack): its data pointer is exactly the raw call's, its device, dtype,
shape and strides are the library's answer. It implements the Python array API standard's
protocol (`__dlpack__`, `__dlpack_device__`), so `torch.from_dlpack(b)`, `np.from_dlpack(b)`,
`cupy.from_dlpack(b)` and `jax.numpy.from_dlpack(b)` view the library's memory, and, for memory
the CPU can address, numpy's `__array_interface__`, which `np.asarray(b)` reads as a writable
view on every numpy (numpy before 2.1 makes every DLPack import read-only).

Capsules follow the DLPack spec: "dltensor_versioned" (DLManagedTensorVersioned) for a consumer
that passes max_version >= (1, 0), else "dltensor" (DLManagedTensor, fsdp_dlpack_unversioned)
for older ones (numpy 1.x, PyTorch before 2.4). A consumer renames the capsule when it takes the
tensor and calls its deleter itself; a capsule never consumed calls the deleter when collected.
The deleter frees the tensor's description only: the memory stays the library's, valid as long
as the raw pointer would be (fsdp.h, fsdp_dlpack)."""
import ctypes

import numpy as np

from . import _capi
from . import _check, _lib, _refuse


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32),
                ("dtype", _DataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _ManagedVersioned(ctypes.Structure):  # DLManagedTensorVersioned, DLPack 1.x
    _fields_ = [("version", _Version), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64),
                ("dl_tensor", _Tensor)]


class _Managed(ctypes.Structure):  # DLManagedTensor, before DLPack 1.0
    _fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

# DLPack's device types and dtype codes (dlpack.h).
KDL_CPU, KDL_CUDA, KDL_CUDA_HOST = 1, 2, 3
_HOST_ADDRESSABLE = (KDL_CPU, KDL_CUDA_HOST)
_KDL_UINT, _KDL_FLOAT, _KDL_BFLOAT = 1, 2, 4
_DTYPE_NAMES = {(_KDL_FLOAT, 16): "float16", (_KDL_FLOAT, 32): "float32",
                (_KDL_FLOAT, 64): "float64", (_KDL_BFLOAT, 16): "bfloat16"}
# numpy's typestr of each: numpy has no bfloat16, so its view shows the bits as uint16, as the
# binding always has (libfsdp.to_float32 converts).
_TYPESTR = {name: np.dtype(t).str for name, t in (("float16", np.float16), ("float32", np.float32),
                                                   ("float64", np.float64),
                                                   ("bfloat16", np.uint16))}

# The capsule names must outlive every capsule: module constants.
_VERSIONED_NAME = ctypes.create_string_buffer(b"dltensor_versioned")
_LEGACY_NAME = ctypes.create_string_buffer(b"dltensor")

# The CPython capsule API, taking the capsule by address: a destructor runs while the capsule is
# being freed, when a new reference to it must not be made.
_api = ctypes.pythonapi
_capsule_new = _api.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_capsule_valid = _api.PyCapsule_IsValid
_capsule_valid.restype = ctypes.c_int
_capsule_valid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_capsule_pointer = _api.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]


_deleters = {}  # a deleter's address: its callable (the library has one or two)


def _call_deleter(address, struct):
    """Calls the deleter of the managed tensor at `address` (a `struct`), if it has one."""
    deleter = struct.from_address(address).deleter
    if deleter:
        call = _deleters.get(deleter)
        if call is None:
            call = _deleters.setdefault(deleter, _DELETER(deleter))
        call(address)


def _destructor(name, struct):
    """A capsule destructor (DLPack's rule): the tensor is deleted here only if no consumer took
    it (a consumer renames the capsule, "used_dltensor...", and deletes the tensor itself)."""
    @ctypes.CFUNCTYPE(None, ctypes.c_void_p)
    def destroy(capsule):
        if _capsule_valid(capsule, name):
            _call_deleter(_capsule_pointer(capsule, name), struct)
    return destroy


_VERSIONED_DESTRUCTOR = _destructor(_VERSIONED_NAME, _ManagedVersioned)
_LEGACY_DESTRUCTOR = _destructor(_LEGACY_NAME, _Managed)


class DLPackBuffer:
    """A buffer of the library (a unit's parameter, gradient, shard, gradient shard, an
    optimizer's state) as DLPack describes it. Made by Unit.dlpack and Optimizer.state_dlpack:
    the C call runs then (its errors are raised then, as libfsdp.Error). Each __dlpack__ hands
    out a tensor of its own: the first the one made then, later ones made anew by the same call.

    shape (tuple), dtype ("float32", "float64", "float16", "bfloat16"), device
    (`__dlpack_device__()`: (1, 0) host, (3, 0) pinned host, (2, d) CUDA device d) and data_ptr
    (int) describe it."""

    def __init__(self, make):
        self._make = make  # () -> the address of a new DLManagedTensorVersioned (the C call)
        self._address = make()
        t = _ManagedVersioned.from_address(self._address).dl_tensor
        self.data_ptr = t.data or 0
        self.shape = tuple(t.shape[d] for d in range(t.ndim))
        self.strides = tuple(t.strides[d] for d in range(t.ndim))
        self.dtype = _DTYPE_NAMES[(t.dtype.code, t.dtype.bits)]
        self._device = (int(t.device.device_type), int(t.device.device_id))

    def __del__(self):
        address, self._address = getattr(self, "_address", None), None
        if address and _call_deleter is not None:  # None: the interpreter is shutting down
            _call_deleter(address, _ManagedVersioned)

    def __repr__(self):
        return (f"DLPackBuffer(shape={self.shape}, dtype={self.dtype}, "
                f"device={self._device}, data_ptr={self.data_ptr:#x})")

    def _take(self):
        """A tensor of this buffer that the caller now owns."""
        address, self._address = self._address, None
        return address if address else self._make()

    # ---- the array API standard's protocol -------------------------------------------------
    def __dlpack_device__(self):
        return self._device

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """A capsule of this buffer's memory. stream: accepted and not waited on: the library
        ordered its work before the caller's stream when it handed the memory out (fsdp.h,
        fsdp_set_stream). copy=True and a dl_device other than the buffer's raise BufferError:
        the library hands out its own memory, where it is, never a copy."""
        if copy:
            raise BufferError("libfsdp hands out its own memory, never a copy (copy=True)")
        if dl_device is not None and tuple(dl_device) != self._device:
            raise BufferError(f"dl_device={tuple(dl_device)}: the buffer is on {self._device}")
        address = self._take()
        if max_version is not None and tuple(max_version) >= (1, 0):
            return _capsule_new(address, _VERSIONED_NAME, _VERSIONED_DESTRUCTOR)
        legacy = ctypes.c_void_p()
        try:
            _check(_lib.fsdp_dlpack_unversioned(address, ctypes.byref(legacy)))
        except BaseException:
            _call_deleter(address, _ManagedVersioned)
            raise
        return _capsule_new(legacy.value, _LEGACY_NAME, _LEGACY_DESTRUCTOR)

    # ---- numpy, for memory the CPU addresses -----------------------------------------------
    @property
    def __array_interface__(self):
        if self._device[0] not in _HOST_ADDRESSABLE:
            raise AttributeError("__array_interface__: the buffer is in device memory "
                                 f"{self._device}; take it through __dlpack__")
        return {"version": 3, "shape": self.shape, "typestr": _TYPESTR[self.dtype],
                "data": (self.data_ptr, False), "strides": None}


def hand_out(buffer):
    """What the binding's accessors (Unit.param, Unit.grad, Unit.shard, Unit.shard_grad,
    Optimizer.state) return: a numpy view (np.asarray: writable, bfloat16 as uint16 bits) of
    memory the CPU addresses, the DLPackBuffer itself for device memory (torch.from_dlpack,
    cupy.from_dlpack, jax.numpy.from_dlpack take it without a copy)."""
    if buffer.__dlpack_device__()[0] in _HOST_ADDRESSABLE:
        return np.asarray(buffer)
    return buffer


def unit_buffer(unit_handle, which, index):
    """The DLPackBuffer of fsdp_dlpack(unit, which, index); `which` "param", "grad", "shard" or
    "shard_grad" (fsdp_buffer_t)."""
    code = _capi.BUFFERS[which]

    def make():
        out = ctypes.c_void_p()
        _check(_lib.fsdp_dlpack(unit_handle, code, index, ctypes.byref(out)))
        return out.value
    return DLPackBuffer(make)


def state_buffer(opt_handle, unit_handle, name):
    """The DLPackBuffer of fsdp_optimizer_state_dlpack(opt, unit, name)."""
    def make():
        out = ctypes.c_void_p()
        _check(_lib.fsdp_optimizer_state_dlpack(opt_handle, unit_handle, name,
                                                ctypes.byref(out)))
        return out.value
    return DLPackBuffer(make)


def host_array(call, values):
    """`values` as a numpy array: itself, or a view of a host-memory DLPack producer's buffer
    (np.from_dlpack). Refuses, naming `values`, an object that is neither, one on a device the
    CPU cannot address (DLPack device kDLCPU or kDLCUDAHost only), or one numpy cannot read."""
    if isinstance(values, np.ndarray):
        return values
    kind = type(values).__name__
    if not hasattr(values, "__dlpack__") or not hasattr(values, "__dlpack_device__"):
        _refuse(call, f"values: a numpy array or a DLPack array of host memory is needed, got "
                f"{kind}")
    device = tuple(values.__dlpack_device__())
    if device[0] not in _HOST_ADDRESSABLE:
        _refuse(call, f"values: a {kind} on DLPack device {device} (not host memory) given to a "
                "host context: copy it to the CPU first")
    try:
        return np.from_dlpack(values)
    except (TypeError, ValueError, BufferError, RuntimeError) as e:
        _refuse(call, f"values: numpy cannot read this {kind} through DLPack ({e}); pass a "
                "float32 copy or, for bfloat16, its bits as a uint16 numpy array")
