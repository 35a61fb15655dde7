"""Trains the GPT decoder twice on the same model, data and seed: with libfsdp (PyTorch forward
and backward, libfsdp sharding, communication, AdamW and a checkpoint; under mpiexec) and with
PyTorch DDP over gloo (or FSDP2 with --against fsdp2: the same MixedPrecisionPolicy). Prints both
loss curves, tokens/s and peak memory per rank, plots them to a PNG, and fails unless libfsdp's
losses follow the reference's step by step (relative --rtol, default 1e-3) and fall. Model options
(--tied, --ckpt, --precision, sizes) go to both runs.
    python3 compare_gpt.py --mpiexec mpiexec.mpich --nproc 2 --steps 300 --workdir out/
Exit code 77 (skipped) when PyTorch is not installed, or FSDP2 is asked of a PyTorch below 2.6."""
import argparse
import json
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
p = argparse.ArgumentParser(description=__doc__)
p.add_argument("--mpiexec", default="mpiexec")
p.add_argument("--nproc", type=int, default=2)
p.add_argument("--steps", type=int, default=300)
p.add_argument("--workdir", default=".")
p.add_argument("--png", help="plot file; default <workdir>/gpt_libfsdp_vs_<against>.png")
p.add_argument("--against", choices=("ddp", "fsdp2"), default="ddp")
p.add_argument("--rtol", type=float, default=1e-3)
p.add_argument("--drop", type=float, default=0.5, help="how much the loss must fall")
a, model_args = p.parse_known_args()
try:
    import torch  # noqa: F401
except ImportError:
    print("skipped: PyTorch is not installed for", sys.executable)
    sys.exit(77)
if a.against == "fsdp2" and tuple(int(x) for x in torch.__version__.split(".")[:2]) < (2, 6):
    print(f"skipped: FSDP2 needs PyTorch >= 2.6 ({sys.executable} has {torch.__version__})")
    sys.exit(77)

os.makedirs(a.workdir, exist_ok=True)
env = dict(os.environ, OMP_NUM_THREADS="1",
           PYTHONPATH=os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]))
common = ["--steps", str(a.steps)] + model_args
ref = a.against
tag = "".join(x for x in model_args if x.isalnum())  # one set of files per configuration
out = {name: os.path.join(a.workdir, f"gpt_{name}{tag}.{{rank}}.json") for name in ("libfsdp", ref)}
subprocess.run([a.mpiexec, "-n", str(a.nproc), sys.executable,
                os.path.join(here, "train_gpt_libfsdp.py"), "--out", out["libfsdp"]] + common,
               env=env, check=True)
subprocess.run([sys.executable, os.path.join(here, f"train_gpt_{ref}.py"), "--nproc",
                str(a.nproc), "--out", out[ref]] + common, env=env, check=True)
runs = {name: [json.load(open(path.replace("{rank}", str(r)))) for r in range(a.nproc)]
        for name, path in out.items()}

lf, ddp = runs["libfsdp"][0]["losses"], runs[ref][0]["losses"]
print(f"\n{'step':>6} {'libfsdp loss':>13} {ref + ' loss':>10}")
for s in sorted(set(range(0, a.steps, max(a.steps // 10, 1))) | {a.steps - 1}):
    print(f"{s:6d} {lf[s]:13.5f} {ddp[s]:10.5f}")
print(f"\n{'run':<10} {'tokens/s':>9} " + " ".join(f"{'rank %d RSS' % r:>13}" for r in
                                                  range(a.nproc)))
for name, ranks in runs.items():
    print(f"{name:<10} {ranks[0]['tokens_per_s']:9.0f} " +
          " ".join(f"{r['peak_rss_mib']:9.1f} MiB" for r in ranks))
print(f"libfsdp / {ref} tokens/s: {runs['libfsdp'][0]['tokens_per_s'] / runs[ref][0]['tokens_per_s']:.3f}")
lib = runs["libfsdp"][0]
print(f"libfsdp's own peak per rank: {lib['library_peak_bytes'] / 2**20:.2f} MiB "
      f"(an unsharded model is {lib['unsharded_model_bytes'] / 2**20:.2f} MiB of parameters)")

png = a.png or os.path.join(a.workdir, f"gpt_libfsdp_vs_{ref}{tag}.png")
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot(ddp, label=f"PyTorch {ref.upper()} (gloo)", linewidth=3, alpha=0.5)
    left.plot(lf, label="libfsdp + PyTorch autograd", linestyle="--")
    left.set(xlabel="step", ylabel="loss (rank 0's batch)", title="GPT decoder, period-5 task")
    left.legend()
    names = list(runs)
    width = 0.8 / a.nproc
    for r in range(a.nproc):
        right.bar([i + r * width for i in range(len(names))],
                  [runs[n][r]["peak_rss_mib"] for n in names], width, label=f"rank {r}")
    right.set_xticks([i + width * (a.nproc - 1) / 2 for i in range(len(names))], names)
    right.set(ylabel="peak RSS (MiB)", title="peak memory per rank")
    right.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    print("plot:", png)
except ImportError:
    print("no matplotlib: plot skipped")

worst = max(abs(x - y) / abs(y) for x, y in zip(lf, ddp))
ok = worst <= a.rtol and lf[-1] < lf[0] - a.drop
print(f"largest relative loss difference to {ref}: {worst:.2e} (allowed {a.rtol:g}); "
      f"loss {lf[0]:.4f} -> {lf[-1]:.4f}: {'OK' if ok else 'FAILED'}")
sys.exit(0 if ok else 1)
