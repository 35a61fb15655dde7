"""hello: one unit on every rank: unshard, read it, write a gradient, reduce, finalize.
    mpiexec -n 2 python3 hello.py   (PYTHONPATH: the repository's python/ or the installed one)"""
import sys

import numpy as np

import libfsdp

ctx = libfsdp.init()  # MPI_COMM_WORLD, full sharding over all ranks
rank, world = ctx.group()

# One unit holding a 3 x 4 weight; each rank keeps 1/world of the unit (padded to blocks of a
# multiple of 8 elements).
unit = ctx.unit([("weight", np.arange(1, 13, dtype=np.float32).reshape(3, 4))])

unit.unshard()  # all-gather: the whole weight, a numpy view of the library's buffer
print(f"rank {rank} of {world}: weight[1][2] = {unit.param('weight')[1, 2]}")
ok = unit.param("weight")[1, 2] == 7
unit.reshard()

unit.grad("weight")[...] = rank + 1  # every rank's gradient is its rank + 1
unit.reduce_grads()  # reduce-scatter: the mean, sharded
at, _, n = unit.shard_range("weight")  # where this rank's part of the weight sits in its shard
mine = unit.shard_grad()[at:at + n]
print(f"rank {rank}: {n} gradient element(s) of the weight, each {(world + 1) / 2} expected")
ok = ok and bool((mine == (world + 1) / 2).all())

ctx.finalize()
libfsdp.finalize_mpi()
sys.exit(0 if ok else 1)
