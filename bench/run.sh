#!/usr/bin/env bash
# `make bench`: the collectives and training benchmarks at 2 and 4 ranks. Writes JSON and a
# markdown summary to <build>/bench/. Timings on a shared 2-core machine are noisy: compare
# ratios within one run.
set -euo pipefail
build=${1:-build}
mpiexec=${2:-$(command -v mpiexec.mpich || command -v mpiexec)}
out="$build/bench"
mkdir -p "$out"
: > "$out/collectives.md"
for n in 2 4; do
  "$mpiexec" -n "$n" "$build/bench/bench_collectives" --out "$out/collectives-np$n.json" |
    tee -a "$out/collectives.md"
  echo | tee -a "$out/collectives.md"
done
: > "$out/training.md"
for n in 2 4; do
  "$mpiexec" -n "$n" "$build/bench/bench_training" --out "$out/training-np$n.json" |
    tee -a "$out/training.md"
done
echo "results: $out/collectives-np{2,4}.json $out/collectives.md $out/training-np{2,4}.json" \
  "$out/training.md"
