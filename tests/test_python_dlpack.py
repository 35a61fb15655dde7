"""DLPack through the Python binding (libfsdp.DLPackBuffer: Unit.dlpack, Optimizer.state_dlpack)
on a host context, against references computed here:
  - each buffer (param, grad, shard, shard_grad, optimizer state) is the library's memory: its
    data_ptr is the raw C call's pointer, np.from_dlpack and torch.from_dlpack of it view that
    memory (a write through one view is read through the C pointer and another view), shape,
    dtype (bfloat16 through torch) and device are the unit's; Unit.param/grad/shard/shard_grad
    and Optimizer.state are numpy views of the same memory;
  - values: the initial parameters, the mean of the ranks' gradients, SGD's first momentum (the
    gradient);
  - capsules: "dltensor_versioned" for max_version >= (1, 0), "dltensor" otherwise; a capsule
    never consumed frees its tensor; copy=True and another dl_device raise BufferError;
  - bad input (a resharded unit's param, a destroyed unit, an unknown which, param or state
    name) raises libfsdp.Error naming the call.
Runs under any numpy >= 1.22 (the legacy capsule path under numpy 1.x and PyTorch before 2.4,
the versioned one after). Exits 77 (skipped) when torch is missing, after the numpy checks.
Run under mpiexec with 2 ranks."""
import ctypes
import gc

import numpy as np

import libfsdp
from pychecks import check, expect, failure_count, finish, set_rank, skip

try:
    import torch
except ImportError:
    torch = None

E = libfsdp.Error

ctx = libfsdp.init()
rank, world = ctx.group()
set_rank(rank)


def barrier():
    ctx.allreduce(np.zeros(1))


lib = libfsdp._lib
mean = (world + 1) / 2.0  # every rank writes rank + 1 into its gradients

rng = np.random.default_rng(3)
w0 = rng.standard_normal((5, 3)).astype(np.float32)
b0 = rng.standard_normal(7).astype(np.float32)
unit = ctx.unit([("w", w0), ("b", b0)], name="dl")
opt = ctx.optimizer("sgd", [unit], lr=0.1, momentum=0.9)


def raw(call, *args):
    """The pointer the raw C call gives: fsdp_param_data(unit, i), fsdp_grad_data(unit, i),
    fsdp_shard_data(unit), fsdp_shard_grad(unit) (their numel not asked)."""
    ptr = ctypes.c_void_p()
    numel = [] if call in ("fsdp_param_data", "fsdp_grad_data") else [None]
    check(getattr(lib, call)(*args, ctypes.byref(ptr), *numel) == 0,
          f"{call}: {lib.fsdp_last_error().decode()}")
    return ptr.value


def at(address, ctype=ctypes.c_float):
    return ctype.from_address(address).value


def flat_reference(values):
    """A 1-D array of the shard's layout: each parameter's part of `values` (one array per
    parameter, or a scalar for all) where fsdp_param_shard_range puts it, zero elsewhere."""
    n = unit.numel()[2]
    out = np.zeros(n, np.float32)
    for i, v in enumerate(values):
        so, po, length = unit.shard_range(i)
        src = np.full(length, v, np.float32) if np.isscalar(v) else np.asarray(v).reshape(-1)
        out[so:so + length] = src[po:po + length]
    return out


def capsule_name(capsule):
    get = ctypes.pythonapi.PyCapsule_GetName
    get.restype, get.argtypes = ctypes.c_char_p, [ctypes.py_object]
    return get(capsule).decode()


# ---- param: every view is the library's unsharded buffer -------------------------------------
unit.unshard()
buf = unit.dlpack("param", "w")
p_w = raw("fsdp_param_data", unit._handle, 0)
check(buf.data_ptr == p_w, f"param data_ptr {buf.data_ptr:#x} != fsdp_param_data {p_w:#x}")
check(buf.shape == (5, 3) and buf.strides == (3, 1) and buf.dtype == "float32",
      f"param buffer {buf!r}, strides {buf.strides}")
check(buf.__dlpack_device__() == (1, 0), f"host memory is kDLCPU: {buf.__dlpack_device__()}")
a = np.from_dlpack(buf)
check(a.ctypes.data == p_w and np.array_equal(a, w0), "np.from_dlpack views the parameter")
view = unit.param("w")
check(isinstance(view, np.ndarray) and view.ctypes.data == p_w and view.flags.writeable
      and view.dtype == np.float32 and view.shape == (5, 3), "Unit.param is a writable view")
# Parameters are read, never written (doc/shared-memory.md: with node shared memory the ranks of
# a node share the buffer, mapped read-only in debug builds); the writes through the views are
# the gradients' (below).
check(at(p_w) == w0[0, 0] and at(p_w + 4 * 5) == w0[1, 2], "the C pointer holds the values")
if torch is not None:
    t = torch.from_dlpack(unit.dlpack("param", "w"))
    check(t.data_ptr() == p_w and t.dtype == torch.float32 and tuple(t.shape) == (5, 3)
          and t.device.type == "cpu", f"torch.from_dlpack of the parameter: {t.dtype} {t.shape}")
    check(torch.equal(t, torch.from_numpy(w0)), "torch reads the parameter's values")

# ---- capsules: versioned for max_version >= (1, 0), legacy otherwise ------------------------
c = unit.dlpack("param", "b").__dlpack__(max_version=(1, 0))
check(capsule_name(c) == "dltensor_versioned", f"max_version (1, 0): {capsule_name(c)}")
c = unit.dlpack("param", "b").__dlpack__()
check(capsule_name(c) == "dltensor", f"no max_version: {capsule_name(c)}")
del c
gc.collect()  # unconsumed capsules delete their tensors (the sanitize build would see a leak)
expect(BufferError, "copy", unit.dlpack("param", "b").__dlpack__, copy=True)
expect(BufferError, "dl_device", unit.dlpack("param", "b").__dlpack__, dl_device=(2, 0))
twice = unit.dlpack("param", "b")
check(np.array_equal(np.from_dlpack(twice), b0) and np.array_equal(np.from_dlpack(twice), b0),
      "a buffer hands out a tensor per __dlpack__")

# ---- grad: written through DLPack views, reduced -------------------------------------------
gbuf = unit.dlpack("grad", "w")
check(gbuf.data_ptr == raw("fsdp_grad_data", unit._handle, 0) and gbuf.shape == (5, 3),
      "grad data_ptr and shape")
if torch is not None:
    torch.from_dlpack(gbuf).fill_(rank + 1.0)
else:
    unit.grad("w")[...] = rank + 1.0
gb = unit.grad("b")
check(gb.ctypes.data == raw("fsdp_grad_data", unit._handle, 1), "Unit.grad views the gradient")
gb[...] = rank + 1.0
check(np.all(unit.grad("w") == rank + 1.0), "the gradient written through torch is in numpy")
unit.reduce_grads()
unit.reshard()

# ---- write_grad: any host-memory DLPack array, nothing from another device ---------------------
class Producer:
    """A DLPack producer that is not a numpy array: `array`'s buffer, on DLPack `device`."""

    def __init__(self, array, device=(1, 0)):
        self.array, self.device = array, device

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.device


wg = ctx.unit([("v", np.zeros((2, 3), np.float32))], name="write_grad")
wg.unshard()
want = np.arange(6, dtype=np.float32).reshape(2, 3) + rank
wg.write_grad("v", Producer(want))
check(np.array_equal(wg.grad("v"), want), "write_grad of a host DLPack producer")
if torch is not None:
    wg.write_grad("v", torch.from_numpy(want * 2), accumulate=True)
    check(np.array_equal(wg.grad("v"), want * 3), "write_grad (accumulate) of a CPU torch tensor")
before = wg.grad("v").copy()
expect((E, "FSDP_ERR_INVALID_ARGUMENT"), "not host memory", wg.write_grad, "v",
       Producer(want, device=(2, 0)))
expect((E, "FSDP_ERR_INVALID_ARGUMENT"), "values", wg.write_grad, "v", [[0.0] * 3] * 2)
check(np.array_equal(wg.grad("v"), before), "refused write_grads changed nothing")
wg.reshard()
wg.destroy()

# ---- shards ---------------------------------------------------------------------------------
sg = unit.dlpack("shard_grad")
sg_raw = raw("fsdp_shard_grad", unit._handle)
check(sg.data_ptr == sg_raw and sg.shape == (unit.numel()[2],) and sg.dtype == "float32",
      f"shard_grad {sg!r}")
check(np.array_equal(unit.shard_grad(), flat_reference([mean, mean])),
      "the gradient shard holds the ranks' mean")
if torch is not None:
    tg = torch.from_dlpack(sg)
    check(tg.data_ptr() == sg_raw and torch.equal(tg, torch.from_numpy(
        flat_reference([mean, mean]))), "torch reads the gradient shard")
sh = unit.dlpack("shard")
sh_raw = raw("fsdp_shard_data", unit._handle)
check(sh.data_ptr == sh_raw and sh.shape == (unit.numel()[2],), f"shard {sh!r}")
check(np.array_equal(unit.shard(), flat_reference([w0, b0])), "the shard holds the parameters")
barrier()  # every rank resharded: the shard may be written (zero-copy storage)
if torch is not None:
    ts = torch.from_dlpack(sh)
    ts += 1.0
    check(np.array_equal(unit.shard(), flat_reference([w0, b0]) + 1),
          "a write through torch into the shard is in Unit.shard")
    ts -= 1.0
barrier()

# ---- optimizer state: SGD's first momentum is the gradient ----------------------------------
opt.step()
st = opt.state_dlpack(unit, "momentum")
st_raw = ctypes.c_void_p()
check(lib.fsdp_optimizer_state(opt._handle, unit._handle, b"momentum", ctypes.byref(st_raw),
                               None) == 0, "fsdp_optimizer_state")
check(st.data_ptr == st_raw.value and st.dtype == "float32", f"state {st!r}")
check(np.array_equal(opt.state(unit, "momentum"), flat_reference([mean, mean])[:st.shape[0]]),
      "Optimizer.state: the momentum is the mean gradient")
if torch is not None:
    check(torch.from_dlpack(st).data_ptr() == st_raw.value, "torch views the state")

# ---- bfloat16: kDLBfloat, torch.bfloat16; numpy shows the bits as uint16 --------------------
bf = ctx.unit([("w", w0)], name="bf", param_dtype="bfloat16")
bf.unshard()
bb = bf.dlpack("param", 0)
check(bb.dtype == "bfloat16" and bb.shape == (5, 3), f"bfloat16 param {bb!r}")
bits = bf.param(0)
check(bits.dtype == np.uint16 and bits.ctypes.data == bb.data_ptr, "Unit.param: uint16 bits")
expected = (w0.view(np.uint32) + 0x7FFF + ((w0.view(np.uint32) >> 16) & 1)) >> 16  # RNE
check(np.array_equal(bits, expected.astype(np.uint16)), "the bfloat16 bits are float32's, rounded")
if torch is not None:
    tb = torch.from_dlpack(bb)
    check(tb.dtype == torch.bfloat16 and tb.data_ptr() == bb.data_ptr
          and torch.equal(tb, torch.from_numpy(w0).to(torch.bfloat16)),
          f"torch.from_dlpack of bfloat16: {tb.dtype}")
check(bf.dlpack("shard").dtype == "float32", "the shard stays in the storage dtype")
bf.reshard()

# ---- bad input: libfsdp.Error naming the call -------------------------------------------------
expect((E, "FSDP_ERR_STATE"), "fsdp_dlpack", unit.dlpack, "param", "w")
expect((E, "FSDP_ERR_STATE"), "fsdp_dlpack", unit.param, "w")
expect((E, "FSDP_ERR_INVALID_ARGUMENT"), "which", unit.dlpack, "weights")
expect((E, "FSDP_ERR_INVALID_ARGUMENT"), "param", unit.dlpack, "grad")
expect((E, "FSDP_ERR_INVALID_ARGUMENT"), "param", unit.dlpack, "shard", 0)
expect((E, "FSDP_ERR_INVALID_ARGUMENT"), "param", unit.dlpack, "param", "nope")
expect((E, "FSDP_ERR_INVALID_ARGUMENT"), "name", opt.state_dlpack, unit, "exp_avg")
doomed = ctx.unit([("x", b0)], name="doomed")
stale = doomed._handle.value
doomed.destroy()
expect((E, "FSDP_ERR_INVALID_HANDLE"), "fsdp_dlpack", doomed.dlpack, "shard")
expect((E, "FSDP_ERR_DESTROYED_HANDLE"), "fsdp_dlpack",
       libfsdp._dlpack.unit_buffer, ctypes.c_void_p(stale), "shard", 0)

all_failures = ctx.allreduce(np.array([float(failure_count())]))[0]
ctx.finalize()
if torch is None and not all_failures:
    skip(f"torch is missing (the numpy {np.__version__} checks passed)")
finish(f"DLPack (numpy {np.__version__}, torch {torch.__version__ if torch else 'missing'})",
       failed=all_failures, show=rank == 0)
