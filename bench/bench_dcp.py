"""libfsdp checkpoints against PyTorch Distributed Checkpoint (DCP), the same state in the same run:
parameters and AdamW state (exp_avg, exp_avg_sq, step) of `mib` MiB in all, float32, sharded over
the ranks (libfsdp units; FSDP2's DTensors sharded on dim 0 for DCP), saved to the same disk and
loaded back, turn about (which of the two goes first alternates). Both write new files each time
(libfsdp: a new checkpoint path; DCP: a new directory) and make them durable (libfsdp fsyncs;
DCP's FileSystemWriter too, sync_files=True); the previous ones are removed outside the timing.
Loads are timed cold (page cache dropped first; needs root, else "cold": false) and warm (right
again). libfsdp's load verifies every checksum before it writes the shards. Beside them, the
limit of a cold load: raw POSIX reads of the libfsdp file's bytes from a cold cache, each rank a
contiguous 1/N of the file in 16 MiB `readinto`s ("disk_read_cold"; the cold loads are reported
as a fraction of it). Medians of `reps`
rounds (rounded up to even, so that each goes first equally often: on this disk a write right
after another runs up to 4x slower) after one warm-up round; every round's times are in the
JSON line.

    mpiexec -n N python bench_dcp.py DIR MIB REPS [TENSORS]

TENSORS: how many parameters (8 unless given; a GPT-2 Large has about 580), each with its two
AdamW states.

Prints a markdown row; a JSON line goes to stderr."""
import json
import os
import shutil
import statistics
import sys
import time

import torch  # before libfsdp loads (see libfsdp._capi.LazyLibrary)
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard

import numpy as np
import libfsdp

ROWS_MULTIPLE = 12  # rows divisible by 1, 2, 3 and 4 ranks


def agree(ctx, value):
    """Rank 0's float `value` on every rank (a one-element unit created from rank 0's value)."""
    unit = ctx.unit([("agree", np.array([value], np.float64))], sync_from_rank0=True)
    unit.unshard()
    out = float(unit.param(0)[0])
    unit.reshard()
    unit.destroy()
    return out


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def drop_caches(rank):
    """Cold reads: the page cache emptied (rank 0, after every rank's files are synced)."""
    os.sync()
    dist.barrier()
    ok = 1.0
    if rank == 0:
        try:
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("1\n")
        except OSError:
            ok = 0.0
    flag = torch.tensor([ok])
    dist.broadcast(flag, 0)
    dist.barrier()
    return bool(flag.item())


def read_share(path, rank, world):
    """This rank's contiguous 1/world of the file, read sequentially in 16 MiB pieces."""
    size = os.path.getsize(path)
    share = -(-size // world)
    begin, end = rank * share, min(size, (rank + 1) * share)
    buf = bytearray(16 << 20)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        f.seek(begin)
        left = end - begin
        while left > 0:
            n = f.readinto(view[:min(left, len(buf))])
            if not n:
                break
            left -= n


def timed(fn):
    dist.barrier()
    t0 = time.perf_counter()
    fn()
    dist.barrier()
    return time.perf_counter() - t0


def main():
    directory, mib, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    ntensors = int(sys.argv[4]) if len(sys.argv) > 4 else 8
    reps += reps % 2
    torch.set_num_threads(1)
    ctx = libfsdp.init()
    rank, world = ctx.group()
    port = int(agree(ctx, float(free_port()) if rank == 0 else 0.0))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))

    # Sizes: ntensors parameters of (rows, cols), rows a multiple of 12; params + 2 states = mib.
    cols = 1024
    per_param = mib * (1 << 20) // 3 // ntensors // 4
    rows = max(ROWS_MULTIPLE, per_param // cols // ROWS_MULTIPLE * ROWS_MULTIPLE)
    names = [f"layers.{i}.weight" for i in range(ntensors)]
    nbytes = 3 * ntensors * rows * cols * 4

    # libfsdp: two units, AdamW with state filled and a step count.
    half = ntensors // 2
    units = [ctx.unit([(n, (rows, cols), np.float32) for n in names[:half]], name="a"),
             ctx.unit([(n, (rows, cols), np.float32) for n in names[half:]], name="b")]
    opt = ctx.optimizer("adamw", units, lr=1e-3)
    rng = np.random.default_rng(rank)
    for u in units:
        u.shard()[:] = rng.standard_normal(u.shard().shape, dtype=np.float32)
        for k in ("exp_avg", "exp_avg_sq"):
            buf = opt.state(u, k)
            buf[:] = np.abs(rng.standard_normal(buf.shape, dtype=np.float32))
        opt.set_steps(u, 10)

    # DCP: the same tensors as DTensors sharded on dim 0, as FSDP2 holds them.
    local_rows = rows // world

    def dtensor():
        local = torch.randn(local_rows, cols)
        return DTensor.from_local(local, mesh, [Shard(0)], run_check=False,
                                  shape=torch.Size([rows, cols]), stride=(cols, 1))
    sd = {"model": {n: dtensor() for n in names},
          "optim": {"state": {n: {"exp_avg": dtensor(), "exp_avg_sq": dtensor(),
                                  "step": torch.tensor(10.0)} for n in names}}}

    counter = [0]

    def fresh(kind):
        counter[0] += 1
        return os.path.join(directory, f"{kind}-{counter[0]}" + (".h5" if kind == "libfsdp" else ""))

    def remove(path):
        dist.barrier()
        if rank == 0:
            if os.path.isdir(path):
                shutil.rmtree(path)
            elif os.path.exists(path):
                os.remove(path)
        dist.barrier()

    rounds = []
    results = {k: [] for k in ("libfsdp_save", "dcp_save", "libfsdp_load_cold", "dcp_load_cold",
                               "libfsdp_load_warm", "dcp_load_warm", "disk_read_cold")}
    cold = True
    if rank == 0:
        os.makedirs(directory, exist_ok=True)
    dist.barrier()
    for rep in range(reps + 1):
        paths = {"libfsdp": fresh("libfsdp"), "dcp": fresh("dcp")}
        order = ["libfsdp", "dcp"] if rep % 2 == 0 else ["dcp", "libfsdp"]
        times = {}
        for who in order:
            if who == "libfsdp":
                times["libfsdp_save"] = timed(lambda: ctx.save(paths["libfsdp"], [opt]))
            else:
                times["dcp_save"] = timed(lambda: dcp.save(sd, checkpoint_id=paths["dcp"]))
        for who in order:
            cold = drop_caches(rank) and cold
            if who == "libfsdp":
                times["libfsdp_load_cold"] = timed(lambda: ctx.load(paths["libfsdp"], [opt]))
                times["libfsdp_load_warm"] = timed(lambda: ctx.load(paths["libfsdp"], [opt]))
            else:
                times["dcp_load_cold"] = timed(lambda: dcp.load(sd, checkpoint_id=paths["dcp"]))
                times["dcp_load_warm"] = timed(lambda: dcp.load(sd, checkpoint_id=paths["dcp"]))
        cold = drop_caches(rank) and cold
        times["disk_read_cold"] = timed(lambda: read_share(paths["libfsdp"], rank, world))
        for p in paths.values():
            remove(p)
        if rep > 0:  # the first round warms up
            rounds.append({"first": order[0], **{k: round(v, 4) for k, v in times.items()}})
            for k, v in times.items():
                results[k].append(v)
    med = {k: statistics.median(v) for k, v in results.items()}
    gib = nbytes / (1 << 30)
    row = {"bench": "dcp", "mib": mib, "tensors": ntensors, "bytes": nbytes, "ranks": world, "reps": reps,
           "cold_reads": cold, "torch": torch.__version__, "libfsdp": libfsdp.__version__,
           **{k + "_s": round(v, 4) for k, v in med.items()},
           "save_vs_dcp": round(med["dcp_save"] / med["libfsdp_save"], 3),
           "load_cold_vs_dcp": round(med["dcp_load_cold"] / med["libfsdp_load_cold"], 3),
           "load_warm_vs_dcp": round(med["dcp_load_warm"] / med["libfsdp_load_warm"], 3),
           "libfsdp_cold_of_disk": round(med["disk_read_cold"] / med["libfsdp_load_cold"], 3),
           "dcp_cold_of_disk": round(med["disk_read_cold"] / med["dcp_load_cold"], 3),
           "rounds": rounds}
    if rank == 0:
        print(json.dumps(row), file=sys.stderr)
        print(f"| {nbytes / (1 << 20):.0f} | {world} | {gib / med['libfsdp_save']:.2f} | "
              f"{gib / med['dcp_save']:.2f} | {row['save_vs_dcp']:.2f} | "
              f"{gib / med['libfsdp_load_cold']:.2f} | {gib / med['dcp_load_cold']:.2f} | "
              f"{row['load_cold_vs_dcp']:.2f} | {gib / med['libfsdp_load_warm']:.2f} | "
              f"{gib / med['dcp_load_warm']:.2f} | {row['load_warm_vs_dcp']:.2f} | "
              f"{gib / med['disk_read_cold']:.2f} | {row['libfsdp_cold_of_disk']:.2f} | "
              f"{row['dcp_cold_of_disk']:.2f} | {'yes' if cold else 'no'} |", flush=True)
    opt.destroy()
    for u in units:
        u.destroy()
    dist.destroy_process_group()
    ctx.finalize()


if __name__ == "__main__":
    main()
