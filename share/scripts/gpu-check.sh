#!/usr/bin/env bash
# The GPU run (doc/gpu.md, "The first run"), on a machine with a GPU after a CUDA + NCCL build
# (`make gpu-check` configures and builds it): every GPU test (ctest -L gpu), then bench_gpu with
# one rank per GPU, then the verdict (share/scripts/gpu_verdict.py): one line per finding and
# "gpu-check: PASS" or "gpu-check: FAIL: <reasons>". Exit status 0 on PASS only.
# Usage: gpu-check.sh [build dir] [mpiexec]
set -uo pipefail
build=${1:-build}
mpiexec=${2:-$(command -v mpiexec.mpich || command -v mpiexec)}
here=$(cd "$(dirname "$0")" && pwd)
python=$(command -v python3 || command -v python)
[ -x "$build/tests/fsdp_gpu_probe" ] || { echo "gpu-check: $build has no CUDA build (fsdp_gpu_probe)"; exit 1; }
# GPUs as the CUDA runtime counts them (CUDA_VISIBLE_DEVICES and MIG honoured), and its error.
probe=$("$build/tests/fsdp_gpu_probe" 2>"$build/gpu-probe.err" | head -1)
smi=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
echo "probe: $probe"
[ -s "$build/gpu-probe.err" ] && cat "$build/gpu-probe.err"
gpus=$(sed -n 's/^devices=\([0-9]*\).*/\1/p' <<<"$probe")
(cd "$build" && ctest -L gpu --output-on-failure) 2>&1 | tee "$build/gpu-tests.log"
: >"$build/bench_gpu.jsonl"
if [ "${gpus:-0}" -ge 1 ]; then
  "$mpiexec" -n "$gpus" "$build/bench/bench_gpu" | tee "$build/bench_gpu.jsonl"
fi
echo "---- gpu-check"
"$python" "$here/gpu_verdict.py" --probe "$probe" --smi "${smi:-0}" \
  --tests "$build/gpu-tests.log" --bench "$build/bench_gpu.jsonl"
