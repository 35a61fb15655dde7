"""A small end-to-end check of an installed libfsdp, under MPI:
    mpiexec -n 2 python -m libfsdp.selftest
Creates a context (full sharding), a unit from known values, unshards it and compares every
element, reduces a gradient and compares the shard with the mean, steps SGD, saves and reloads a
checkpoint, and says where the library was loaded from. Exit 0 and "libfsdp selftest: OK" on
every rank when all hold."""
import os
import sys

import numpy as np

import libfsdp
from libfsdp import _capi


def main():
    ctx = libfsdp.init()
    rank, world = ctx.group()
    failures = []
    values = np.arange(1, 24 * 5 + 1, dtype=np.float32).reshape(24, 5)
    unit = ctx.unit([("w", values), ("b", np.full(7, 0.5, np.float32))], name="selftest")
    unit.unshard()
    if not (np.array_equal(unit.param("w"), values) and (unit.param("b") == 0.5).all()):
        failures.append("unshard: parameters differ from their initial values")
    unit.reshard()
    unit.write_grad("w", np.full((24, 5), float(rank + 1), np.float32))
    unit.write_grad("b", np.full(7, float(rank + 1), np.float32))
    unit.reduce_grads()
    mean = (world + 1) / 2.0
    _, _, length = unit.numel()
    grad = unit.shard_grad()
    numel = values.size + 7
    own = [i for i in range(length) if rank * length + i < numel]
    if not np.allclose(grad[own], mean):
        failures.append(f"reduce_grads: gradient shard is not the mean {mean}")
    opt = ctx.optimizer("sgd", [unit], lr=0.1)
    opt.step()
    # In the working directory: the one place every rank of a job can be expected to share.
    path = os.path.abspath("libfsdp-selftest.h5")
    ctx.save(path, [opt], {"selftest": "1"})
    shard = unit.shard().copy()
    unit.shard()[...] = 0
    ctx.load(path, [opt])
    if not np.array_equal(unit.shard(), shard):
        failures.append("checkpoint: the reloaded shard differs from the saved one")
    opt.destroy()
    unit.destroy()
    ctx.finalize()  # collective: every rank is done with the file
    if rank == 0 and os.path.exists(path):
        os.remove(path)
    where = getattr(_capi, "LOADED_FROM", "?")
    if failures:
        print(f"libfsdp selftest: rank {rank}: FAILED: {'; '.join(failures)}", flush=True)
        sys.exit(1)
    print(f"libfsdp selftest: OK (rank {rank} of {world}, libfsdp {libfsdp.__version__}, "
          f"library {where})", flush=True)


if __name__ == "__main__":
    main()
