"""End to end: the GPT decoder of examples/python trained with libfsdp, PyTorch FSDP2 (fully_shard,
CPU mesh, gloo) and PyTorch DDP (gloo); same model, data, batch, seed and steps. Repeats the three
runs interleaved, and reports per framework the median tokens/s (steps after the first), the
median of the largest peak RSS of any rank, and the final loss.
    e2e_gpt.py --build build --mpiexec mpiexec.mpich --nproc 2 --reps 5 --out e2e.json"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "examples", "python")


def run(cmd, env, workdir, tag, nproc):
    subprocess.run(cmd, env=env, cwd=workdir, check=True, stdout=subprocess.DEVNULL,
                   stdin=subprocess.DEVNULL, timeout=900)
    ranks = [json.load(open(os.path.join(workdir, f"{tag}.{r}.json"))) for r in range(nproc)]
    return {"tokens_per_s": ranks[0]["tokens_per_s"],
            "peak_rss_mib": max(r["peak_rss_mib"] for r in ranks),
            "final_loss": statistics.fmean(r["losses"][-1] for r in ranks)}


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--build", default="build")
    p.add_argument("--mpiexec", default="mpiexec.mpich")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--model", default="--dim 256 --layers 4 --heads 4 --seq 32 --batch 8")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    env = dict(os.environ, PYTHONPATH=os.path.join(HERE, "..", "python"),
               LIBFSDP_LIBRARY=os.path.abspath(os.path.join(a.build, "src", "libfsdp.so")),
               OMP_NUM_THREADS="1")
    version = subprocess.run([a.python, "-c", "import torch; print(torch.__version__)"],
                             capture_output=True, text=True, check=True).stdout.strip()
    major, minor = (int(x) for x in version.split(".")[:2])
    fsdp2 = (major, minor) >= (2, 6)
    model = a.model.split() + ["--steps", str(a.steps)]
    script = lambda name: os.path.join(EXAMPLES, name)
    frameworks = {
        "libfsdp": lambda out: [a.mpiexec, "-n", str(a.nproc), a.python,
                                script("train_gpt_libfsdp.py"), *model, "--out", out],
        "fsdp2": lambda out: [a.python, script("train_gpt_fsdp2.py"), "--nproc", str(a.nproc),
                              *model, "--out", out],
        "ddp": lambda out: [a.python, script("train_gpt_ddp.py"), "--nproc", str(a.nproc),
                            *model, "--out", out],
    }
    if not fsdp2:
        print(f"PyTorch {version} has no FSDP2 (needs 2.6+): comparing with DDP only")
        del frameworks["fsdp2"]
    samples = {name: [] for name in frameworks}
    with tempfile.TemporaryDirectory() as work:
        for rep in range(a.reps + 1):  # the first round warms caches and is dropped
            order = list(frameworks)[rep % len(frameworks):] + list(frameworks)[:rep % len(frameworks)]
            for name in order:
                r = run(frameworks[name](f"{name}.{{rank}}.json"), env, work, name, a.nproc)
                if rep > 0:
                    samples[name].append(r)
                print(f"rep {rep} {name:8s} {r['tokens_per_s']:9.0f} tokens/s  "
                      f"peak RSS {r['peak_rss_mib']:7.1f} MiB  loss {r['final_loss']:.4f}",
                      flush=True)
    result = {"benchmark": "e2e_gpt", "torch": version, "ranks": a.nproc, "steps": a.steps,
              "model": a.model, "reps": a.reps, "statistic": "median over reps", "frameworks": {}}
    for name, rs in samples.items():
        result["frameworks"][name] = {
            k: statistics.median(r[k] for r in rs) for k in ("tokens_per_s", "peak_rss_mib",
                                                            "final_loss")}
    f = result["frameworks"]
    ratios = {"tokens_vs_ddp": f["libfsdp"]["tokens_per_s"] / f["ddp"]["tokens_per_s"]}
    if "fsdp2" in f:
        ratios["tokens_vs_fsdp2"] = f["libfsdp"]["tokens_per_s"] / f["fsdp2"]["tokens_per_s"]
        ratios["peak_rss_vs_fsdp2"] = f["libfsdp"]["peak_rss_mib"] / f["fsdp2"]["peak_rss_mib"]
    result["ratios"] = ratios
    with open(a.out, "w") as out:
        json.dump(result, out, indent=1)
    print(json.dumps(result["ratios"]))


if __name__ == "__main__":
    main()
