"""The Python binding (python/libfsdp) against numpy references computed here: unsharded values,
mean-reduced gradients, an SGD step, a checkpoint round trip, and bad input refused with the
argument named and nothing written. Run under mpiexec with 1 to 4 ranks."""
import ctypes
import ctypes.util
import fnmatch
import os
import sys
import tempfile

import numpy as np

import libfsdp
from libfsdp import dcp
from libfsdp.optimizer import group_of, kind_info
from libfsdp.unit import resolve_precision, storage_dtype
from pychecks import check, expect_error, failure_count, finish, set_rank

ctx = libfsdp.init(param_dtype="float32")
rank, world = ctx.group()
set_rank(rank)
rng = np.random.default_rng(42)  # the same values on every rank
w0 = rng.standard_normal((5, 3)).astype(np.float32)
b0 = rng.standard_normal(5).astype(np.float32)
unit = ctx.unit([("fc.weight", w0), ("fc.bias", b0)], name="fc")
check(unit.names == ["fc.weight", "fc.bias"] and unit.shapes == [(5, 3), (5,)], "param info")

# Unshard: each parameter viewed at its shape, equal to its initial values.
unit.unshard()
check(np.array_equal(unit.param("fc.weight"), w0), "unsharded weight")
check(np.array_equal(unit.param(1), b0), "unsharded bias")
check(unit.param(0).base is not None and not unit.param(0).flags.owndata, "a view, not a copy")
flat = unit.unsharded()  # fc.bias starts at element 16 of the buffer, not 15
check(np.array_equal(flat, np.concatenate([w0.ravel(), b0])), f"unsharded() of fc: {flat}")
unit.reshard()

# Unit.gather(): the float32 masters whole (not the bfloat16 copy of a bfloat16-compute unit), one
# all-gather; Context.broadcast(): rank 0's value everywhere, in place.
half = ctx.unit([("h.w", w0), ("h.b", b0)], name="half", param_dtype="bfloat16")
got = half.gather()
check(all(g.dtype == np.float32 for g in got) and np.array_equal(got[0], w0) and
      np.array_equal(got[1], b0), "gather(): float32 masters of a bfloat16-compute unit")
half.destroy()
token = np.array([rank + 41, 7], np.int64)
check(list(ctx.broadcast(token)) == [41, 7] and list(token) == [41, 7], "broadcast from rank 0")
expect_error("FSDP_ERR_INVALID_ARGUMENT", "root", ctx.broadcast, token, root=world)
expect_error("FSDP_ERR_INVALID_ARGUMENT", "contiguous", ctx.broadcast, np.zeros((4, 4))[:, 1])
# Context.allreduce(): float64 values reduced over the ranks, in place.
partial = np.array([rank + 1.0, -rank])
check(list(ctx.allreduce(partial)) == [world * (world + 1) / 2, -world * (world - 1) / 2],
      "allreduce sum")
partial = np.array([float(rank), -float(rank)])
check(list(ctx.allreduce(partial, op="max")) == [world - 1.0, 0.0], "allreduce max")
expect_error("FSDP_ERR_INVALID_ARGUMENT", "op", ctx.allreduce, partial, op="prod")
expect_error("FSDP_ERR_INVALID_ARGUMENT", "float64", ctx.allreduce, np.zeros(2, np.float32))
# Unit.set_grad_sync / grad_sync: one unit's switch, and the context's beside it.
sync_unit = ctx.unit([("s.w", w0)], name="sync")
sync_unit.set_grad_sync(False)
check(not sync_unit.grad_sync, "set_grad_sync(False): the unit does not communicate")
sync_unit.set_grad_sync(True)
ctx.set_grad_sync(False)
check(not sync_unit.grad_sync, "the context's no_sync switches every unit off")
ctx.set_grad_sync(True)
check(sync_unit.grad_sync, "both on: it communicates")
sync_unit.destroy()

# Unit.unsharded(): every parameter in order, padding excluded, whatever the layout: odd sizes
# (each parameter starts at a multiple of 8 elements in the buffer) and a frozen parameter (the
# frozen section comes after the trainable one). References built here, not read back.
odd_rng = np.random.default_rng(7)
odd = [("a", np.arange(3, dtype=np.float32)), ("b", np.arange(10, 15, dtype=np.float32)),
       ("c", odd_rng.standard_normal((3, 3)).astype(np.float32), False),
       ("d", np.array([42.0], np.float32)),
       ("e", odd_rng.standard_normal((2, 1, 7)).astype(np.float32))]
for params in (odd[:2], odd):
    odd_unit = ctx.unit(params, name="odd")
    odd_unit.unshard()
    flat = odd_unit.unsharded()
    ref = np.concatenate([p[1].ravel() for p in params])
    check(flat.dtype == np.float32 and np.array_equal(flat, ref),
          f"unsharded() of {[p[0] for p in params]}: {flat}, expected {ref}")
    odd_unit.reshard()
    expect_error("FSDP_ERR_STATE", "", odd_unit.unsharded)  # sharded: nothing to read
    odd_unit.destroy()

# layout="dim0": rank r's shard holds rows [r*c, (r+1)*c) of each parameter, c = ceil(d0 / W)
# (fsdp.h's FSDP_LAYOUT_DIM0); unsharded, every parameter is whole. A layout the library does not
# know is refused naming it, and nothing is created.
for params in (odd[:2], odd):
    rows_unit = ctx.unit(params, name="rows", layout="dim0")
    shard = rows_unit.shard()
    for name, *value in params:
        a = value[0]
        d0 = a.shape[0] if a.ndim else 1
        c = -(-d0 // world)
        first, held = rank * c, max(0, min(c, d0 - rank * c))
        shard_off, param_off, length = rows_unit.shard_range(name)
        check(length == held * (a.size // d0) and (not held or param_off == first * (a.size // d0)),
              f"dim0: the rows of {name} on rank {rank}")
        check(np.array_equal(shard[shard_off:shard_off + length], a.ravel()[param_off:][:length]),
              f"dim0: the shard holds {name}'s rows")
    rows_unit.unshard()
    check(np.array_equal(rows_unit.unsharded(), np.concatenate([p[1].ravel() for p in params])),
          "dim0: unsharded() is every parameter whole")
    rows_unit.reshard()
    rows_unit.destroy()
units_before = len(ctx.units)
expect_error("FSDP_ERR_INVALID_ARGUMENT", "layout", ctx.unit, odd, layout="rows")
check(len(ctx.units) == units_before, "a refused layout creates nothing")

# Gradients: rank r writes (r + 1) * g; the mean over ranks is g * (W + 1) / 2.
gw = rng.standard_normal((5, 3)).astype(np.float32)
gb = rng.standard_normal(5).astype(np.float32)
unit.write_grad("fc.weight", gw * (rank + 1))
unit.grad("fc.bias")[...] = gb * (rank + 1)  # the view directly
unit.reduce_grads()
full_mean = np.concatenate([gw.ravel(), gb.ravel()]) * (world + 1) / 2
grad_shard = unit.shard_grad()
for i in range(2):
    shard_off, param_off, length = unit.shard_range(i)
    ref = full_mean[(0 if i == 0 else 15) + param_off:][:length]
    check(np.allclose(grad_shard[shard_off:shard_off + length], ref, rtol=1e-6),
          f"reduced gradient of parameter {i}")

# SGD step against numpy.
opt = ctx.optimizer("sgd", [unit], lr=0.5)
before = unit.shard().copy()
opt.step()
check(np.allclose(unit.shard()[:len(grad_shard)], before[:len(grad_shard)] - 0.5 * grad_shard,
                  rtol=1e-6), "SGD step")
unit.unshard()
stepped = {n: unit.param(n).copy() for n in unit.names}
unit.reshard()
check(np.allclose(stepped["fc.weight"], w0 - 0.5 * gw * (world + 1) / 2, rtol=1e-5),
      "stepped weight equals the numpy reference")

# Checkpoint round trip, with metadata.
path = os.path.join(sys.argv[1] if len(sys.argv) > 1 else tempfile.gettempdir(),
                    f"test_python_binding.np{world}.h5")
ctx.save(path, [opt], {"step": "7"})
check(libfsdp.checkpoint_metadata(path, "step") == "7", "metadata")
info = libfsdp.describe_checkpoint(path)
check([(p["name"], p["shape"]) for p in info["params"]] == [("fc.bias", [5]),
                                                          ("fc.weight", [5, 3])]
      and info["optimizers"][0]["kind"] == "sgd" and info["world_size"] == world
      and info["metadata"] == {"step": "7"}, f"describe_checkpoint {info}")
check(opt.steps(unit) == 1, "one SGD step counted")
check(unit.grad_none() == [False, False], "after a reduction every parameter has its gradient")
check([opt.param_steps(unit, n) for n in unit.names] == [1, 1], "per-parameter counts")

# Parameters without a gradient (fsdp_grad_set_none): the step skips fc.bias; zero_grad() leaves
# every gradient None (a step changes nothing), zero_grad(set_to_none=False) a zero one where there
# was a gradient.
unit.write_grad("fc.weight", gw)
unit.reduce_grads()
unit.set_grad_none("fc.bias")
check(unit.grad_none() == [False, True], "fc.bias marked without gradient")
marked = unit.shard_grad().copy()
pre = unit.shard().copy()
opt.step()
b_off, _, b_len = unit.shard_range("fc.bias")
w_off, _, w_len = unit.shard_range("fc.weight")
check(np.array_equal(unit.shard()[b_off:b_off + b_len], pre[b_off:b_off + b_len]) and
      np.allclose(unit.shard()[w_off:w_off + w_len],
                  pre[w_off:w_off + w_len] - 0.5 * marked[w_off:w_off + w_len], rtol=1e-6) and
      not marked[b_off:b_off + b_len].any(), "the step skips the parameter without gradient")
check([opt.param_steps(unit, n) for n in unit.names] == [2, 1], "its count stays")
opt.zero_grad()
check(unit.grad_none() == [True, True], "zero_grad(): every gradient None")
pre = unit.shard().copy()
opt.step()
check(np.array_equal(unit.shard(), pre), "a step with every gradient None changes nothing")
opt.zero_grad(set_to_none=False)
check(unit.grad_none() == [True, True],
      "zero_grad(set_to_none=False) keeps a None gradient None (torch.optim's rule)")
unit.write_grad("fc.weight", gw)
unit.reduce_grads()
opt.zero_grad(set_to_none=False)
check(unit.grad_none() == [False, False], "zero_grad(set_to_none=False): zero gradients")
opt.set_param_steps(unit, "fc.bias", 1)
expect_error("FSDP_ERR_OUT_OF_RANGE", "index = 7", unit.set_grad_none, 7)
expect_error("FSDP_ERR_INVALID_ARGUMENT", "steps = -1", opt.set_param_steps, unit, 0, -1)
expect_error("FSDP_ERR_INVALID_ARGUMENT", "name = 'exp_avg'", opt.state, unit, "exp_avg")
expect_error("FSDP_ERR_INVALID_ARGUMENT", "steps = -2", opt.set_steps, unit, -2)
expect_error("FSDP_ERR_IO", "no-such.h5", libfsdp.describe_checkpoint, path + ".no-such.h5")
unit.shard()[:] = 0.0
report = ctx.load(path, [opt])
check(report["loaded"] == 2 and report["missing"] == 0, f"load report {report}")
unit.unshard()
check(np.array_equal(unit.param("fc.weight"), stepped["fc.weight"]), "weight after load")

# Queries (fsdp_param_group_of, fsdp_optimizer_kind_info, fsdp_storage_dtype,
# fsdp_precision_resolve), each against a reference computed without the library.
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.fnmatch.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int]


def posix_group(patterns, name):
    """The first group g >= 1 whose pattern POSIX fnmatch(3) matches, else 0."""
    return next((g for g, p in enumerate(patterns)
                 if g and libc.fnmatch(p.encode(), name.encode(), 0) == 0), 0)


patterns = ["", "a\\*b", "*.bias", "blk[0-9].w", "x\\\\y", "c?d", "[!z]*"]
for name in ["a*b", "axb", "a\\xyzb", "enc.bias", "enc/x.bias", "blk3.w", "blkx.w", "x\\y",
             "c/d", "zz", "z"]:
    got = group_of(patterns, name)
    check(got == posix_group(patterns, name), f"group_of({name!r}) = {got}, fnmatch(3) says "
          f"{posix_group(patterns, name)}")
# Where Python's fnmatchcase differs (a backslash is no escape there): the library answers POSIX's.
check(fnmatch.fnmatchcase("a\\xyzb", "a\\*b") and group_of(["", "a\\*b"], "a\\xyzb") == 0,
      "a quoted '*' matches only '*'")
for name in ["w*", "a?b[c]", "back\\slash", "plain.name"]:
    check(group_of(["", dcp._exact(name)], name) == 1 and
          group_of(["", dcp._exact(name)], name + "x") == 0, f"_exact({name!r}) matches it alone")
expect_error("FSDP_ERR_INVALID_ARGUMENT", "npatterns = 0", group_of, [], "w")
expect_error("FSDP_ERR_INVALID_ARGUMENT", "patterns[1]: NULL or empty", group_of, ["", ""], "w")
out = ctypes.c_int()
check(libfsdp._lib.fsdp_param_group_of(None, 1, b"w", ctypes.byref(out)) == 1 and
      "fsdp_param_group_of: patterns: NULL" in libfsdp._lib.fsdp_last_error().decode(),
      "fsdp_param_group_of refuses NULL patterns")

# The hyperparameters a kind reads: changing one changes two steps' result, any other does not.
# The second step's gradient (accumulated: g - 0.9 g) is smaller, so that AdamW's exp_avg_sq
# shrinks (beta2 0.9) and amsgrad's running maximum differs from it.
base = {"sgd": {"lr": 0.1, "momentum": 0.9}, "adamw": {"lr": 0.1, "beta2": 0.9}}
other = {"lr": 0.2, "weight_decay": 0.1, "momentum": 0.5, "dampening": 0.5, "nesterov": True,
         "beta1": 0.5, "beta2": 0.5, "eps": 0.1, "amsgrad": True, "maximize": True}
g = np.linspace(-1, 1, 12, dtype=np.float32)


def two_steps(kind, hp):
    u = ctx.unit([("w", np.arange(12, dtype=np.float32))])
    try:
        o = ctx.optimizer(kind, [u], **hp)
    except libfsdp.Error:
        u.destroy()
        raise
    for scale in (1.0, -0.9):
        u.unshard()
        u.write_grad("w", g * np.float32(scale))
        u.reduce_grads()
        u.reshard()
        o.step()
    values = u.gather()[0]
    o.destroy()
    u.destroy()
    return values


for kind in ("sgd", "adamw"):
    info = kind_info(kind)
    reference = two_steps(kind, base[kind])
    read = set()
    for f, value in other.items():
        try:
            if not np.array_equal(two_steps(kind, dict(base[kind], **{f: value})), reference):
                read.add(f)
        except libfsdp.Error:  # refused for this kind (SGD's amsgrad): not read
            pass
    check(read == set(info.hyperparams), f"{kind} reads {sorted(read)}, the library says "
          f"{sorted(info.hyperparams)}")
    hp = libfsdp.optimizer.defaults(kind)  # PyTorch's documented defaults
    want = {"lr": 1e-3, "weight_decay": 1e-2 if kind == "adamw" else 0.0, "momentum": 0.0,
            "dampening": 0.0, "nesterov": 0, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}
    check({f: getattr(hp, f) for f in want} == want, f"{kind} defaults {hp}")
check(kind_info("adamw").step_count and not kind_info("sgd").step_count,
      "AdamW reads its update count (bias correction), SGD only whether it is 0")
expect_error("FSDP_ERR_INVALID_ARGUMENT", "kind: 'adam'", kind_info, "adam")
name = ctypes.c_char_p()
check(libfsdp._lib.fsdp_optimizer_state_name(0, 1, ctypes.byref(name), None) == 5 and
      "index = 1: sgd has 1 state buffer(s)" in libfsdp._lib.fsdp_last_error().decode(),
      "fsdp_optimizer_state_name: OUT_OF_RANGE past the last buffer")
check(libfsdp._lib.fsdp_optimizer_kind_info(7, None, None, None, None) == 1 and
      "kind = 7" in libfsdp._lib.fsdp_last_error().decode(), "fsdp_optimizer_kind_info: bad kind")

# Storage dtype: float64 stays, every narrower dtype gets a float32 master (doc/api.md).
for dtype, want in [("float32", "float32"), ("float64", "float64"), ("bfloat16", "float32"),
                    ("float16", "float32")]:
    check(storage_dtype(dtype) == want, f"storage_dtype({dtype}) = {storage_dtype(dtype)}")
expect_error("FSDP_ERR_INVALID_ARGUMENT", "dtype = -1", storage_dtype, "auto")
# Precision: the query answers as a unit's creation does (created here), its refusals included.
for storage in ("float32", "float64"):
    for param in (None, "float64", "bfloat16"):
        for reduce in (None, "float32", "float16"):
            try:
                answer = resolve_precision(ctx, storage, param, reduce)
            except libfsdp.Error as e:
                answer = e.status_name
            try:
                u = ctx.unit([("w", np.zeros(4, storage))], param_dtype=param, reduce_dtype=reduce)
                made = (u.param_dtype.name if u.param_dtype != np.uint16 else "bfloat16",
                        u.reduce_dtype.name if u.reduce_dtype != np.uint16 else "bfloat16")
                u.destroy()
            except libfsdp.Error as e:
                made = e.status_name
            check(answer == made, f"precision {storage}/{param}/{reduce}: query {answer}, unit "
                  f"{made}")
check(resolve_precision(None, "float32", "bfloat16") == ("bfloat16", "bfloat16"),
      "reduce_dtype defaults to param_dtype")
expect_error("FSDP_ERR_INVALID_ARGUMENT", "float64 parameters only in float64", resolve_precision,
             None, "float64", "bfloat16")
expect_error("FSDP_ERR_INVALID_ARGUMENT", "storage = bfloat16", resolve_precision, None,
             "bfloat16")

# Bad input: the argument named, nothing written.
weight_before = unit.param(0).copy()
expect_error("FSDP_ERR_STATE", "fsdp_unshard", unit.unshard)
unit.reshard()
expect_error("FSDP_ERR_INVALID_ARGUMENT", "values: shape (3, 5)", unit.write_grad, 0,
             np.zeros((3, 5), np.float32))
expect_error("FSDP_ERR_INVALID_ARGUMENT", "values: dtype float64", unit.write_grad, 0,
             np.zeros((5, 3), np.float64))
expect_error("FSDP_ERR_INVALID_ARGUMENT", "values: a numpy array", unit.write_grad, 0, [1.0])
expect_error("FSDP_ERR_INVALID_ARGUMENT", "no parameter named \"fc.w\"", unit.write_grad, "fc.w",
             np.zeros((5, 3), np.float32))
expect_error("FSDP_ERR_STATE", "", unit.reduce_grads)  # nothing was written by the refusals
expect_error("FSDP_ERR_OUT_OF_RANGE", "", unit.param, 5)
expect_error("FSDP_ERR_INVALID_ARGUMENT", "params[0] \"x\": dtype int32", ctx.unit,
             [("x", np.zeros(3, np.int32))])
expect_error("FSDP_ERR_INVALID_ARGUMENT", "not C-contiguous", ctx.unit,
             [("x", np.zeros((4, 4), np.float32)[:, ::2])])
expect_error("FSDP_ERR_INVALID_ARGUMENT", "all parameters of a unit share one dtype",
             ctx.unit, [("x", np.zeros(3, np.float32)), ("y", np.zeros(3, np.float64))])
expect_error("FSDP_ERR_INVALID_ARGUMENT", "strategy: 'fully'", libfsdp.init, strategy="fully")
expect_error("FSDP_ERR_INVALID_ARGUMENT", "momentun", ctx.optimizer, "sgd", [unit], momentun=0.9)
expect_error("FSDP_ERR_INVALID_ARGUMENT", "metadata", ctx.save, path, [], {"step": 8})
check(len(ctx.units) == 1, "refused units were not created")
check(libfsdp.checkpoint_metadata(path, "step") == "7", "the checkpoint is intact")
unit.unshard()
check(np.array_equal(unit.param(0), weight_before), "parameters unchanged by the refusals")
unit.reshard()
ctx.finalize()
expect_error("FSDP_ERR_FINALIZED", "", unit.unshard)

# Zero-copy storage (FSDP_TRANSPORT=shm_zero_copy, read by fsdp_init): every rank here is on one
# node, so a float32 unit keeps its shard in the node's copy, and unshards to its values.
transport = os.environ.get("FSDP_TRANSPORT")
if transport != "shm_zero_copy":
    check(unit.zero_copy is False, "no zero-copy storage on the other transports")
os.environ["FSDP_TRANSPORT"] = "shm_zero_copy"
zctx = libfsdp.init(param_dtype="float32")
if transport is None:
    del os.environ["FSDP_TRANSPORT"]
else:
    os.environ["FSDP_TRANSPORT"] = transport
zunit = zctx.unit([("w", w0)])

# Every field of fsdp_config_t from init(): the placement asked for is the one resolved.
saved = os.environ.pop("FSDP_TRANSPORT", None)  # the environment would override the config
mctx = libfsdp.init(transport="mpi", timeout_s=120.0, on_timeout="error", debug_collectives=True)
placement = mctx.placement()
check(placement == {"memory_space": "host", "device": -1, "cpu_offload": False,
                    "transport": "mpi"}, f"init(transport='mpi') gives {placement}")
mctx.finalize()
if saved is not None:
    os.environ["FSDP_TRANSPORT"] = saved
# A CUDA context: its buffers are DLPackBuffers in device memory (test_python_dlpack); what takes or
# makes numpy arrays of them (write_grad, unsharded) is refused by name. Without a GPU init itself
# is refused; the refusal is then checked on a host context marked as a device one (what init()
# records for a CUDA context).
try:
    cctx = libfsdp.init(memory_space="cuda")
except libfsdp.Error as e:
    check(e.status_name == "FSDP_ERR_UNSUPPORTED" and "memory_space" in str(e),
          f"init(memory_space='cuda') without a usable GPU: {e}")
    cctx = libfsdp.init()
    cctx._on_device = True
else:
    check(cctx.placement()["memory_space"] == "cuda", "a CUDA context says so")
cunit = cctx.unit([("w", w0)])
on_gpu = cctx.placement()["memory_space"] == "cuda"
shard_before = None if on_gpu else cunit.shard().copy()
for name, call in [("fsdp_grad_data", lambda: cunit.write_grad(0, w0)),
                   ("fsdp_param_data", cunit.unsharded)]:
    expect_error("FSDP_ERR_UNSUPPORTED", name, call)
    expect_error("FSDP_ERR_UNSUPPORTED", "CUDA context", call)
if on_gpu:
    shard = cunit.shard()
    check(isinstance(shard, libfsdp.DLPackBuffer) and shard.__dlpack_device__()[0] == 2,
          f"a CUDA context's shard is a DLPackBuffer on the GPU: {shard!r}")
else:
    cctx._on_device = False
    check(np.array_equal(cunit.shard(), shard_before), "a refused call changed nothing")
cctx.finalize()
expect_error("FSDP_ERR_INVALID_ARGUMENT", "transport", libfsdp.init, transport="carrier pigeon")
expect_error("FSDP_ERR_INVALID_ARGUMENT", "timeout_s", libfsdp.init, timeout_s="soon")
expect_error("FSDP_ERR_INVALID_ARGUMENT", "on_timeout", libfsdp.init, on_timeout="panic")
# HFSDP and hpZ reach fsdp_config_t: refused by the library where they mean nothing.
expect_error("FSDP_ERR_INVALID_ARGUMENT", "cfg->hfsdp", libfsdp.init, strategy="full", hfsdp=True)
expect_error("FSDP_ERR_INVALID_ARGUMENT", "cfg->hpz", libfsdp.init, strategy="none", hpz=True)
hctx = libfsdp.init(strategy="hybrid", hfsdp=True, transport="mpi")
hctx.finalize()
check(zunit.zero_copy is True, "a float32 unit on one node has zero-copy storage")
zunit.unshard()
check(np.array_equal(zunit.param(0), w0), "a zero-copy unit unshards to its initial values")
zunit.reshard()
zctx.finalize()

if rank == 0 and failure_count() == 0:
    os.remove(path)
finish("the Python binding")
