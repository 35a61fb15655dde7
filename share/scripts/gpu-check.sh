#!/usr/bin/env bash
# The GPU run (doc/gpu.md), on a machine with a GPU after `make build`: every GPU test
# (ctest -L gpu), then bench_gpu on every visible GPU, then one line each: the tests' verdict and
# the benchmark's ratios against raw NCCL (target <= 1.05) and against the copy bandwidth
# (target >= 0.8). Exit status: nonzero when a test failed or the benchmark did not run.
# Usage: gpu-check.sh [build dir] [mpiexec]
set -uo pipefail
build=${1:-build}
mpiexec=${2:-$(command -v mpiexec.mpich || command -v mpiexec)}
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "${gpus:-0}" -ge 1 ] || { echo "gpu-check: no GPU visible (nvidia-smi -L)"; exit 77; }
(cd "$build" && ctest -L gpu --output-on-failure) | tee "$build/gpu-tests.log"
tests=${PIPESTATUS[0]}
"$mpiexec" -n "$gpus" "$build/bench/bench_gpu" | tee "$build/bench_gpu.jsonl"
bench=${PIPESTATUS[0]}
echo "---- gpu-check: $gpus GPU(s)"
grep -E "tests passed|tests failed" "$build/gpu-tests.log" | tail -1
python3 - "$build/bench_gpu.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    line = line.strip()
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    if "MiB" in r:
        print(f"{r['MiB']:>6} MiB  unshard/ncclAllGather {r['ratio']:.3f}  "
              f"reduce_grads/ncclReduceScatter {r['ratio_rs']:.3f}  (target <= 1.05)")
    elif "cast_fraction_of_copy_bw" in r:
        print(f"cast {r['cast_fraction_of_copy_bw']:.3f}, AdamW {r['adamw_fraction_of_copy_bw']:.3f}"
              f" of the copy bandwidth {r['copy_GBps']} GB/s (target >= 0.8)")
    elif "cudaMalloc_per_step" in r:
        print(f"cudaMalloc per steady-state step: {r['cudaMalloc_per_step']} (target 0)")
PY
[ "$tests" = 0 ] && [ "$bench" = 0 ] && echo "gpu-check: PASS" && exit 0
echo "gpu-check: FAIL (tests $tests, bench_gpu $bench)"
exit 1
