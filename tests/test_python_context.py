"""Context.save_async, Context.progress_thread and Optimizer.set_lr (python/libfsdp) against
references made without them: the checkpoint save_async writes loads back to the values numpy
holds and does not differ (fsdp_checkpoint_diff) from the one save writes of the same state;
progress_thread is what MPI's thread level and FSDP_PROGRESS_THREAD say it must be; an SGD step
after set_lr(x) gives the shards of an optimizer created with lr=x, and numpy's w - x * g.
Run under mpiexec with 1 to 4 ranks: test_python_context.py <scratch dir>."""
import ctypes
import os
import sys

import numpy as np

import libfsdp
from pychecks import check, failure_count, finish, set_rank

ctx = libfsdp.init(param_dtype="float32")
rank, world = ctx.group()
set_rank(rank)
lib = libfsdp._lib

# ---- progress_thread: MPI_THREAD_MULTIPLE and FSDP_PROGRESS_THREAD unset or not "0" ------------
provided, world_fcomm = ctypes.c_int(), ctypes.c_int()
check(lib.fsdp_mpi_init(1, ctypes.byref(provided), ctypes.byref(world_fcomm)) == 0,
      "fsdp_mpi_init once MPI runs")
wanted = os.environ.get("FSDP_PROGRESS_THREAD", "") != "0"
check(ctx.progress_thread == (bool(provided.value) and wanted),
      f"progress_thread {ctx.progress_thread}: MPI_THREAD_MULTIPLE {bool(provided.value)}, "
      f"FSDP_PROGRESS_THREAD {os.environ.get('FSDP_PROGRESS_THREAD')}")
old = os.environ.get("FSDP_PROGRESS_THREAD")
os.environ["FSDP_PROGRESS_THREAD"] = "0"  # read when a context is created
off = libfsdp.init(param_dtype="float32")
check(off.progress_thread is False, "FSDP_PROGRESS_THREAD=0: no progress thread")
off.finalize()
if old is None:
    del os.environ["FSDP_PROGRESS_THREAD"]
else:
    os.environ["FSDP_PROGRESS_THREAD"] = old

# ---- set_lr: the same step as an optimizer created with that lr, and numpy's SGD ---------------
rng = np.random.default_rng(7)  # the same values on every rank
w0 = rng.standard_normal(37).astype(np.float32)
g = rng.standard_normal(37).astype(np.float32)


def sgd_step(lr_created, lr_set=None):
    u = ctx.unit([("w", w0)])
    o = ctx.optimizer("sgd", [u], lr=lr_created)
    if lr_set is not None:
        o.set_lr(lr_set)
    u.unshard()
    u.write_grad("w", g)  # the same on every rank: the mean-reduced gradient is g
    u.reduce_grads()
    u.reshard()
    o.step()
    w = u.gather()[0]
    o.destroy()
    u.destroy()
    return w


set_to = sgd_step(0.5, lr_set=0.05)
created = sgd_step(0.05)
check(np.array_equal(set_to, created), "set_lr(0.05) after lr=0.5: the step of lr=0.05")
check(np.allclose(set_to, w0 - np.float32(0.05) * g, rtol=1e-6, atol=1e-7),
      "set_lr(0.05): w - 0.05 g")
check(not np.allclose(set_to, w0 - np.float32(0.5) * g, rtol=1e-3), "set_lr changed the lr")

# ---- save_async: the same checkpoint as save, and the values it was given ----------------------
scratch = sys.argv[1]
os.makedirs(scratch, exist_ok=True)
sync_path = os.path.join(scratch, f"context_sync_{world}.h5")
async_path = os.path.join(scratch, f"context_async_{world}.h5")
later_path = os.path.join(scratch, f"context_later_{world}.h5")
b0 = rng.standard_normal(9).astype(np.float32)
u = ctx.unit([("fc.w", w0), ("fc.b", b0)], name="fc")
opt = ctx.optimizer("adamw", [u], lr=0.01)


def train_step():
    u.unshard()
    u.write_grad("fc.w", g)
    u.write_grad("fc.b", b0 * np.float32(0.5))
    u.reduce_grads()
    u.reshard()
    opt.step()


train_step()
saved = [p.copy() for p in u.gather()]
ctx.save(sync_path, [opt], {"step": "1"})
req = ctx.save_async(async_path, [opt], {"step": "1"})
req.wait()
check(os.path.exists(async_path), "save_async wrote the file once waited on")


def differ(a, b):
    d = ctypes.c_int(-1)
    check(lib.fsdp_checkpoint_diff_fcomm(world_fcomm.value, a.encode(), b.encode(), None,
                                         ctypes.byref(d)) == 0, f"fsdp_checkpoint_diff {a} {b}")
    return d.value


check(differ(sync_path, async_path) == 0, "save_async's checkpoint equals save's")
check(libfsdp.checkpoint_metadata(async_path, "step") == "1", "save_async's metadata")
train_step()  # the diff sees a change: a later state differs
ctx.save(later_path, [opt])
check(differ(sync_path, later_path) == 1, "a checkpoint after another step differs")

# Loaded into a fresh unit: the values numpy kept at the save.
v = ctx.unit([("fc.w", w0.shape, "float32"), ("fc.b", b0.shape, "float32")], name="fc")
vopt = ctx.optimizer("adamw", [v], lr=0.01)
ctx.load(async_path, [vopt])
got = v.gather()
check(all(np.array_equal(a, b) for a, b in zip(got, saved)), "save_async's file loads the values")

all_failures = ctx.allreduce(np.array([float(failure_count())]))[0]
ctx.finalize()
finish("save_async, progress_thread, set_lr", failed=all_failures, show=rank == 0)
