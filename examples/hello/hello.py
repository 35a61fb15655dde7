"""hello: one unit on every rank: unshard, read it, write a gradient, reduce, finalize.
    mpiexec -n 2 python3 hello.py   (PYTHONPATH: the repository's python/ or the installed one)"""
import sys

import numpy as np

import libfsdp

ctx = libfsdp.init()  # MPI_COMM_WORLD, full sharding over all ranks
rank, world = ctx.group()

# One unit holding a 3 x 4 weight; each rank keeps 1/world of it.
unit = ctx.unit([("weight", np.arange(1, 13, dtype=np.float32).reshape(3, 4))])

unit.unshard()  # all-gather: the whole weight, a numpy view of the library's buffer
print(f"rank {rank} of {world}: weight[1][2] = {unit.param('weight')[1, 2]}")
ok = unit.param("weight")[1, 2] == 7
unit.reshard()

unit.grad("weight")[...] = rank + 1  # every rank's gradient is its rank + 1
unit.reduce_grads()  # reduce-scatter: the mean, sharded
shard = unit.shard_grad()
print(f"rank {rank}: {shard.size} gradient element(s), mean {shard[0]} (expected {(world + 1) / 2})")
ok = ok and shard[0] == (world + 1) / 2

ctx.finalize()
libfsdp.finalize_mpi()
sys.exit(0 if ok else 1)
