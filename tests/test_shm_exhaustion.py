"""Node shared memory that runs out (a container's small /dev/shm) must not crash: run on 2 ranks
inside a private mount namespace whose /dev/shm is a small tmpfs (test_shm_exhaustion.sh), with
FSDP_TRANSPORT as the caller set it and a unit twice the size of /dev/shm:
- auto: unshard and reduce fall back to MPI for that unit, with exact results, twice over;
- shm (asked for): FSDP_ERR_OUT_OF_MEMORY on every rank naming the size and /dev/shm's free
  space, for unshard (twice) and reduce; nothing left charged;
- shm_zero_copy: the unit's creation is refused the same way, and nothing is created;
and in each case a unit that fits then works with exact values.
    test_shm_exhaustion.py <tmpfs MiB>"""
import os
import sys

import numpy as np

import libfsdp
from pychecks import check, finish, set_rank

tmpfs_mib = int(sys.argv[1])
ctx = libfsdp.init()
rank, world = ctx.group()
set_rank(rank)
def refused(what, fn):
    try:
        fn()
        check(False, f"{what}: refused with FSDP_ERR_OUT_OF_MEMORY")
        return False
    except libfsdp.Error as e:
        msg = str(e)
        check(e.status_name == "FSDP_ERR_OUT_OF_MEMORY", f"{what}: status {e.status_name}")
        check("/dev/shm has" in msg and f"of {tmpfs_mib} MiB" in msg and "bytes" in msg,
              f"{what}: message names the size and /dev/shm's space: {msg}")
        print(f"rank {rank}: {what}: {msg}", flush=True)
        return True


n = (2 * tmpfs_mib << 20) // 4  # a unit of twice the tmpfs
transport = os.environ.get("FSDP_TRANSPORT", "auto")
if transport == "shm_zero_copy":
    # The shard lives in the node's copy: creating the unit needs the memory.
    before = len(ctx.units)
    refused("zero-copy unit creation", lambda: ctx.unit([("w", np.full(n, 3.0, np.float32))]))
    check(len(ctx.units) == before, "no unit created")
elif transport == "auto":
    # AUTO falls back to MPI for what does not fit (a one-line warning on stderr): exact results.
    big = ctx.unit([("w", np.full(n, 3.0, np.float32))])
    for attempt in (1, 2):
        big.unshard()
        check(bool((big.param(0) == 3.0).all()), f"unshard through MPI (attempt {attempt})")
        check(ctx.memory_stats()["unsharded_bytes"] == 4 * n, "a private copy is charged whole")
        big.reshard()
    check(ctx.memory_stats()["unsharded_bytes"] == 0, "and released at reshard")
    for attempt in (1, 2):
        big.grad(0)[...] = float(rank + 1)
        big.reduce_grads()
        expect = (1 + world) / 2 * attempt  # gradient shards accumulate
        check(bool(np.allclose(big.shard_grad(), expect)), f"reduce through MPI (attempt {attempt})")
    big.destroy()
else:
    big = ctx.unit([("w", np.full(n, 3.0, np.float32))])
    for attempt in (1, 2):
        refused(f"unshard (attempt {attempt})", big.unshard)
    stats = ctx.memory_stats()
    check(stats["unsharded_bytes"] == 0, f"nothing charged after the refusal: {stats}")
    big.grad(0)[...] = 1.0
    refused("reduce_grads", big.reduce_grads)
    big.destroy()
small = ctx.unit([("s", np.arange(1000, dtype=np.float32))])
small.unshard()
check(np.array_equal(small.param(0), np.arange(1000, dtype=np.float32)),
      "a unit that fits unshards exactly afterwards")
small.reshard()
small.grad(0)[...] = float(rank + 1)
small.reduce_grads()
so, _, length = small.shard_range(0)
check(np.allclose(small.shard_grad()[so:so + length], (1 + world) / 2), "and reduces exactly")
ctx.finalize()
finish(f"FSDP_TRANSPORT={transport}")
