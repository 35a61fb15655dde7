"""libfsdp.pytorch's per-step overhead on a small model (issue 32 item 6): the median step time of
    unsharded    the plain nn.Module with torch.optim.AdamW (no communication)
    lib          FullyShard + the library's sharded AdamW (ctx.optimizer)
    torch        FullyShard + torch.optim.AdamW over model.parameters() (the shard views)
    fully_shard  the drop-in fully_shard on each layer and the root + torch.optim.AdamW over its
                 DTensor parameters (PyTorch >= 2.6)
    fully_shard+lib  the same model, the library's sharded AdamW over units(model)
    FSDP2        PyTorch's fully_shard the same way, on gloo (the peer: its DTensor parameters
                 cost torch.optim the same dispatch)
and their ratios to `unsharded`, interleaved per round, medians after 5 warm-up steps.
    mpiexec -n 2 VENV/bin/python bench/fullyshard_overhead.py [--layers 8 --dim 128 --steps 40]"""
import argparse
import statistics
import time

import torch
import torch.nn as nn

import libfsdp
from libfsdp.pytorch import FullyShard, fully_shard, units
from libfsdp.pytorch._compat import TORCH_2_6


def model(layers, dim):
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(dim, dim), nn.ReLU()) for _ in range(layers)])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=40)
    a = ap.parse_args()
    torch.set_num_threads(1)
    ctx = libfsdp.init()
    rank, world = ctx.group()
    x = torch.randn(a.batch, a.dim, generator=torch.Generator().manual_seed(rank))
    runs = {}
    plain = model(a.layers, a.dim)
    runs["unsharded"] = (plain, torch.optim.AdamW(plain.parameters(), lr=1e-3))
    for kind in ("lib", "torch"):
        m = model(a.layers, a.dim)
        sharded = FullyShard(ctx, m, list(m))
        opt = (ctx.optimizer("adamw", sharded.units, lr=1e-3) if kind == "lib"
               else torch.optim.AdamW(m.parameters(), lr=1e-3))
        runs[kind] = (m, opt)
    if TORCH_2_6:
        m = model(a.layers, a.dim)
        for layer in m:
            fully_shard(layer)
        fully_shard(m)
        runs["fully_shard"] = (m, torch.optim.AdamW(m.parameters(), lr=1e-3))
        m = model(a.layers, a.dim)
        for layer in m:
            fully_shard(layer)
        fully_shard(m)
        drop_in = units(m)
        runs["fully_shard+lib"] = (m, drop_in[0].context.optimizer("adamw", drop_in, lr=1e-3))
        from torch.distributed.fsdp import fully_shard as torch_fully_shard
        m = model(a.layers, a.dim)  # on the gloo group the drop-in made
        for layer in m:
            torch_fully_shard(layer)
        torch_fully_shard(m)
        runs["FSDP2"] = (m, torch.optim.AdamW(m.parameters(), lr=1e-3))
    times = {k: [] for k in runs}
    for step in range(a.steps + 5):
        for kind, (m, opt) in runs.items():
            t0 = time.perf_counter()
            m(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
            if step >= 5:
                times[kind].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    if rank == 0:
        print(f"{world} ranks, {a.layers} x Linear({a.dim}, {a.dim}), batch {a.batch}, "
              f"{a.steps} steps, torch {torch.__version__}")
        for k, v in med.items():
            print(f"  {k:15s} {v * 1e3:8.3f} ms/step  x{v / med['unsharded']:.2f} of unsharded")


if __name__ == "__main__":
    main()
