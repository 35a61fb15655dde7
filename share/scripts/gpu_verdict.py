#!/usr/bin/env python3
"""The verdict of a GPU run (share/scripts/gpu-check.sh; doc/gpu.md, "The first run").

Reads what the run produced and prints one line per finding, then the verdict:
  --probe LINE   fsdp_gpu_probe's line: devices=N driver=D runtime=R error=NAME
  --smi N        GPUs nvidia-smi lists (0 if it is missing): a GPU the runtime cannot use is a FAIL
  --tests LOG    the output of `ctest -L gpu`
  --bench JSONL  bench_gpu's JSON lines (missing or empty: the benchmark did not run)
PASS only when every GPU test ran and passed, NCCL ran a collective between ranks, every stated
ratio was met and steady-state steps made no cudaMalloc. Exit status 0 on PASS, 1 otherwise.
"""
import argparse
import json
import re
import sys

# Targets stated in doc/gpu.md ("Benchmark targets").
MAX_COLLECTIVE_RATIO = 1.05
MIN_BANDWIDTH_FRACTION = 0.8

RESULT = re.compile(r"Test\s+#\d+:\s+(\S+)\s+\.*\s*(?:\*+)?(Passed|Failed|Skipped|Not Run|Timeout|"
                    r"Exception|SEGFAULT|Child aborted|Subprocess aborted)")


def parse_tests(text):
    """{test name: result} from ctest's output."""
    return {m.group(1): m.group(2) for m in RESULT.finditer(text)}


def needs_two_gpus(name):
    """Tests that need one GPU per rank on >= 2 ranks (NCCL refuses two ranks on one GPU): the
    nccl variants beyond one rank and the NCCL fault tests."""
    return (".nccl." in name and not name.endswith(".np1")) or name.startswith("test_gpu_faults")


def nccl_exercised(results):
    """NCCL moved data between ranks: an nccl variant on >= 2 ranks passed."""
    return any(".nccl." in n and not n.endswith(".np1") and r == "Passed"
               for n, r in results.items())


def verdict(probe, smi, tests_text, bench_lines):
    """(lines, passed)."""
    lines, failures = [], []
    m = re.search(r"devices=(\d+).*error=(\S+)", probe or "")
    devices = int(m.group(1)) if m else 0
    error = m.group(2) if m else "no probe output"
    if error != "none":
        lines.append(f"CUDA runtime: {error} (nvidia-smi lists {smi} GPU(s))")
        failures.append(f"the CUDA runtime failed: {error}" if smi else "no usable GPU")
    elif devices == 0:
        failures.append("no GPU visible to the CUDA runtime")
    lines.append(f"GPUs visible to CUDA: {devices}")

    results = parse_tests(tests_text or "")
    if not results:
        failures.append("no GPU test ran")
    counts = {}
    for r in results.values():
        counts[r] = counts.get(r, 0) + 1
    lines.append("GPU tests: " + ", ".join(f"{v} {k.lower()}" for k, v in sorted(counts.items())))
    failed = sorted(n for n, r in results.items() if r not in ("Passed", "Skipped"))
    if failed:
        failures.append("tests failed: " + " ".join(failed))
    skips = sorted(n for n, r in results.items() if r == "Skipped")
    multi = [n for n in skips if needs_two_gpus(n) and devices < 2]
    other_skips = [n for n in skips if n not in multi]
    if multi:
        lines.append("needs >= 2 GPUs, skipped: " + " ".join(multi))
    if other_skips and devices > 0:
        failures.append("tests skipped while a GPU is visible: " + " ".join(other_skips))
    nccl_skips = [n for n in multi if ".nccl." in n]
    if nccl_exercised(results):
        lines.append("NCCL: exercised between ranks")
    else:
        why = "needs >= 2 GPUs" if devices < 2 else "no nccl test on >= 2 ranks passed"
        lines.append(f"NCCL not exercised: {why}" +
                     (f" (skipped: {' '.join(nccl_skips)})" if nccl_skips else ""))
        failures.append(f"NCCL not exercised: {why}")

    rows = [json.loads(l) for l in bench_lines if l.strip().startswith("{")]
    if not rows:
        failures.append("bench_gpu did not run")
    for r in rows:
        if "ratio" in r:
            ok = r["ratio"] <= MAX_COLLECTIVE_RATIO and r["ratio_rs"] <= MAX_COLLECTIVE_RATIO
            lines.append(f"{r['MiB']:>6} MiB  unshard/ncclAllGather {r['ratio']:.3f}  "
                         f"reduce_grads/(ncclReduceScatter + epilogue) {r['ratio_rs']:.3f}  "
                         f"(target <= {MAX_COLLECTIVE_RATIO}) {'ok' if ok else 'MISSED'}")
            if not ok:
                failures.append(f"collective ratio missed at {r['MiB']} MiB")
        elif "nccl" in r:
            lines.append(f"NCCL ratios: {r['nccl']}")
        elif "cast_fraction_of_copy_bw" in r:
            c, a = r["cast_fraction_of_copy_bw"], r["adamw_fraction_of_copy_bw"]
            ok = c >= MIN_BANDWIDTH_FRACTION and a >= MIN_BANDWIDTH_FRACTION
            lines.append(f"cast {c:.3f}, AdamW {a:.3f} of the copy bandwidth {r['copy_GBps']} GB/s "
                         f"(target >= {MIN_BANDWIDTH_FRACTION}) {'ok' if ok else 'MISSED'}")
            if not ok:
                failures.append("kernel bandwidth fraction missed")
        elif "cudaMalloc_per_step" in r:
            ok = r["cudaMalloc_per_step"] == 0
            lines.append(f"cudaMalloc per steady-state step: {r['cudaMalloc_per_step']} (target 0)"
                         f" {'ok' if ok else 'MISSED'}")
            if not ok:
                failures.append("steady-state steps call cudaMalloc")
    if failures:
        lines.append("gpu-check: FAIL: " + "; ".join(failures))
    else:
        lines.append("gpu-check: PASS")
    return lines, not failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--probe", default="")
    ap.add_argument("--smi", type=int, default=0)
    ap.add_argument("--tests", required=True)
    ap.add_argument("--bench", required=True)
    a = ap.parse_args()
    def read(path):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""
    lines, ok = verdict(a.probe, a.smi, read(a.tests), read(a.bench).splitlines())
    print("\n".join(lines))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
