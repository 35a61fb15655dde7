"""The seed's Table 3.1 on this machine (`make bench-gpt`): the seed's GPT (Small 6L/8H/512,
Medium 12L/12H/768, Large 16L/16H/1024; vocabulary 16,384; embedding tied to the output head;
period-5 pattern with 5% noise; AdamW lr 2e-4) trained on 2 ranks by PyTorch DDP, PyTorch FSDP2
(fully_shard on each block and on the root, gloo), libfsdp's drop-in fully_shard (the FSDP2
program with libfsdp's import), libfsdp (FullyShard the same way, default transport) and a run
with no communication (each rank trains its own replica), in FP32, BF16 and FP16, without and with activation checkpointing. Methods run interleaved per cell, in a rotating
order. Step 0 is a warm-up; tokens/s comes from the median of the other steps. Peak RSS is the
training loop's (VmHWM reset after construction), the largest of the ranks.
    bench_gpt.py --build build --mpiexec mpiexec.mpich --python VENV/bin/python --out DIR"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "examples", "python")
SIZES = {"Small": (6, 8, 512), "Medium": (12, 12, 768), "Large": (16, 16, 1024)}
METHODS = ("DDP", "FSDP2", "fully_shard", "libfsdp", "libfsdp+torch.optim", "no-comm")
# libfsdp's forms: the drop-in fully_shard (torch.optim.AdamW over its DTensor parameters),
# FullyShard with its own sharded AdamW, and with torch.optim.AdamW over the parameter views.
LIBFSDP = ("fully_shard", "libfsdp", "libfsdp+torch.optim")


def run_cell(a, env, size, precision, ckpt, rotation, workdir):
    layers, heads, dim = SIZES[size]
    seq, batch = (a.fp16_seq, a.fp16_batch) if precision == "fp16" else (a.seq, a.batch)
    model = ["--layers", str(layers), "--heads", str(heads), "--dim", str(dim), "--seq", str(seq),
             "--batch", str(batch), "--steps", str(a.steps), "--tied", "--precision", precision,
             "--lr", "2e-4"] + (["--ckpt"] if ckpt else [])
    script = lambda name: os.path.join(EXAMPLES, name)
    commands = {
        "DDP": [a.python, script("train_gpt_ddp.py"), "--nproc", str(a.nproc)],
        "FSDP2": [a.python, script("train_gpt_fsdp2.py"), "--nproc", str(a.nproc)],
        "fully_shard": [a.mpiexec, "-n", str(a.nproc), a.python,
                        script("train_gpt_fully_shard.py")],
        "libfsdp": [a.mpiexec, "-n", str(a.nproc), a.python, script("train_gpt_libfsdp.py"),
                    "--no-save"],
        "libfsdp+torch.optim": [a.mpiexec, "-n", str(a.nproc), a.python,
                                script("train_gpt_libfsdp.py"), "--no-save", "--torch-optim"],
        "no-comm": [a.python, script("train_gpt_ddp.py"), "--no-comm", "--nproc", str(a.nproc)],
    }
    methods = [m for m in METHODS if m in a.methods.split(",")]
    k = rotation % len(methods)
    order = methods[k:] + methods[:k]
    cell = {}
    for method in order:
        tag = f"{size}-{precision}-{'ckpt' if ckpt else 'nockpt'}-{method}"
        out = os.path.join(workdir, tag + ".{rank}.json")
        started = time.time()
        subprocess.run(commands[method] + model + ["--out", out], env=env, check=True,
                       stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL, timeout=1800)
        ranks = [json.load(open(out.replace("{rank}", str(r)))) for r in range(a.nproc)]
        cell[method] = {
            "tokens_per_s": ranks[0]["tokens_per_s"],
            "peak_rss_mib": max(r["peak_rss_mib"] for r in ranks),
            "final_loss": statistics.fmean(r["losses"][-1] for r in ranks),
            "losses": ranks[0]["losses"],
            "library_peak_mib": (ranks[0].get("library_peak_bytes", 0) / 2**20) or None,
            "seconds": time.time() - started}
        print(f"{size:6s} {precision} ckpt={'yes' if ckpt else 'no ':3s} {method:8s} "
              f"{cell[method]['tokens_per_s']:9.1f} tokens/s  peak RSS "
              f"{cell[method]['peak_rss_mib']:8.1f} MiB  loss {cell[method]['final_loss']:.4f}",
              flush=True)
    return {"size": size, "precision": precision, "ckpt": ckpt, "seq": seq, "batch": batch,
            "methods": cell}


def loss_gap(cell, method):
    """libfsdp's largest relative loss difference per step to the run that computes the same
    thing: DDP in FP32 (the same arithmetic), FSDP2 under the same policy in BF16/FP16 (DDP uses
    autocast there, another arithmetic)."""
    ref = cell["methods"]["DDP" if cell["precision"] == "fp32" else "FSDP2"]["losses"]
    mine = cell["methods"][method]["losses"]
    return max(abs(x - y) / abs(y) for x, y in zip(mine, ref))


def table(cells):
    lines = ["| Size | Method | Prec. | Act. Ckpt | Tokens/s | Peak RSS (MiB) | Library peak "
             "(MiB) | Loss | tokens/s vs FSDP2 | vs DDP | vs no-comm | RSS vs FSDP2 | vs DDP | "
             "loss vs ref. |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        m = c["methods"]
        for method in (x for x in METHODS if x in m):  # older runs lack a method
            r = m[method]
            if method in LIBFSDP:
                t, s = r["tokens_per_s"], r["peak_rss_mib"]
                ref = "DDP" if c["precision"] == "fp32" else "FSDP2"
                ratios = (f"{t / m['FSDP2']['tokens_per_s']:.2f} | {t / m['DDP']['tokens_per_s']:.2f}"
                          f" | {t / m['no-comm']['tokens_per_s']:.2f} | "
                          f"{s / m['FSDP2']['peak_rss_mib']:.2f} | {s / m['DDP']['peak_rss_mib']:.2f}"
                          f" | {loss_gap(c, method):.1e} ({ref})")
            else:
                ratios = " |  |  |  |  | "
            lib = f"{r['library_peak_mib']:.1f}" if r["library_peak_mib"] else "-"
            tokens = r["tokens_per_s"]
            tokens = f"{tokens:.0f}" if tokens >= 100 else f"{tokens:.2f}"  # FP16 runs are slow
            lines.append(f"| {c['size']} | {method} | {c['precision'].upper()} | "
                         f"{'Yes' if c['ckpt'] else 'No'} | {tokens} | {r['peak_rss_mib']:.0f} | "
                         f"{lib} | {r['final_loss']:.4f} | {ratios} |")
    return "\n".join(lines)


def summary(cells):
    """The figures of the issue, over every cell."""
    lib = [(c, c["methods"]) for c in cells]
    ratio = lambda k, a, b: [m[a][k] / m[b][k] for _, m in lib if a in m]
    lines = []
    for mine in LIBFSDP:
        for name, values in (("tokens/s vs FSDP2", ratio("tokens_per_s", mine, "FSDP2")),
                             ("tokens/s vs DDP", ratio("tokens_per_s", mine, "DDP")),
                             ("tokens/s vs no-comm", ratio("tokens_per_s", mine, "no-comm")),
                             ("peak RSS vs FSDP2", ratio("peak_rss_mib", mine, "FSDP2")),
                             ("peak RSS vs DDP", ratio("peak_rss_mib", mine, "DDP"))):
            if values:
                lines.append(f"- {mine} {name}: {min(values):.2f} to {max(values):.2f} "
                             f"(median {statistics.median(values):.2f})")
    fp32 = [loss_gap(c, m) for c in cells if c["precision"] == "fp32"
            for m in LIBFSDP if m in c["methods"]]
    low = [loss_gap(c, m) for c in cells if c["precision"] != "fp32"
           for m in LIBFSDP if m in c["methods"]]
    if fp32:
        lines.append(f"- FP32: largest relative loss difference to DDP at any step {max(fp32):.1e}")
    if low:
        lines.append(f"- BF16/FP16: largest relative loss difference to FSDP2 (same policy) at any "
                     f"step {max(low):.1e}")
    return "\n".join(lines)


def plot(cells, png):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib: plot skipped")
        return
    sizes = [s for s in SIZES if any(c["size"] == s for c in cells)]
    precisions = [p for p in ("fp32", "bf16", "fp16") if any(c["precision"] == p for c in cells)]
    fig, axes = plt.subplots(len(sizes), len(precisions), squeeze=False,
                             figsize=(4.5 * len(precisions), 3.2 * len(sizes)))
    for i, size in enumerate(sizes):
        for j, prec in enumerate(precisions):
            ax = axes[i][j]
            for c in cells:
                if c["size"] != size or c["precision"] != prec:
                    continue
                for method in (x for x in METHODS if x in c["methods"]):
                    style = "--" if c["ckpt"] else "-"
                    ax.plot(c["methods"][method]["losses"], style,
                            label=f"{method}{' (ckpt)' if c['ckpt'] else ''}")
            ax.set(title=f"{size} {prec.upper()}", xlabel="step", ylabel="loss (rank 0)")
            ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(png, dpi=90)
    print("plot:", png)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--build", default="build")
    p.add_argument("--mpiexec", default="mpiexec.mpich")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--sizes", default="Small,Medium,Large")
    p.add_argument("--precisions", default="fp32,bf16,fp16")
    p.add_argument("--ckpt", default="no,yes")
    p.add_argument("--methods", default=",".join(METHODS),
                   help="a subset of " + ",".join(METHODS) + " (DDP, FSDP2 and no-comm are "
                   "the ratios' references)")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--fp16-seq", type=int, default=16)
    p.add_argument("--fp16-batch", type=int, default=1)
    p.add_argument("--out", required=True)
    p.add_argument("--render", action="store_true",
                   help="no runs: the table and plot again from OUT/gpt_table.json")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([os.path.join(HERE, "..", "python"), EXAMPLES]),
               LIBFSDP_LIBRARY=os.path.abspath(os.path.join(a.build, "src", "libfsdp.so")))
    version = subprocess.run([a.python, "-c", "import torch; print(torch.__version__)"],
                             capture_output=True, text=True, check=True).stdout.strip()
    scale = (f"Scaled to finish in about 30 minutes on this machine: {a.steps} steps per run (step "
             f"0 is warm-up), sequence {a.seq} x batch {a.batch} per rank (FP16: {a.fp16_seq} x "
             f"{a.fp16_batch}, because PyTorch multiplies float16 on this CPU ~70x slower than "
             "float32), instead of the seed's 8 epochs at batch 16 on 2 GPUs.")
    print(scale, flush=True)
    if a.render:  # the tables and plot again from an earlier run's JSON
        result = json.load(open(os.path.join(a.out, "gpt_table.json")))
    else:
        cells, rotation, started = [], 0, time.time()
        for size in a.sizes.split(","):
            for precision in a.precisions.split(","):
                for ckpt in a.ckpt.split(","):
                    cells.append(run_cell(a, env, size, precision, ckpt == "yes", rotation,
                                          a.out))
                    rotation += 1
        result = {"benchmark": "bench_gpt (seed Table 3.1)", "torch": version,
                  "ranks": a.nproc, "steps": a.steps, "scaling": scale,
                  "seconds": time.time() - started, "cells": cells}
        with open(os.path.join(a.out, "gpt_table.json"), "w") as f:
            json.dump(result, f, indent=1)
    cells = result["cells"]
    md = (f"# The seed's Table 3.1 on this machine\n\n{result['scaling']}\nPyTorch "
          f"{result['torch']}, {result['ranks']} ranks, {result['seconds']:.0f} s in all.\n\n"
          + summary(cells) + "\n\n" + table(cells) + "\n")
    with open(os.path.join(a.out, "gpt_table.md"), "w") as f:
        f.write(md)
    print(md)
    plot(cells, os.path.join(a.out, "gpt_loss_curves.png"))


if __name__ == "__main__":
    main()
