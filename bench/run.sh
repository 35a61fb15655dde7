#!/usr/bin/env bash
# `make bench`: the collectives and training benchmarks at 2 and 4 ranks, and the checkpoint
# matrix. Writes JSON and a markdown summary to <build>/bench/. Timings on a shared 2-core machine
# are noisy: compare ratios within one run.
# Usage: run.sh [build dir] [mpiexec] [collectives] [training] [checkpoint]  (default: all three)
set -euo pipefail
build=${1:-build}
mpiexec=${2:-$(command -v mpiexec.mpich || command -v mpiexec)}
parts=${*:3}
parts=${parts:-collectives training checkpoint}
want() { [[ " $parts " == *" $1 "* ]]; }
out="$build/bench"
mkdir -p "$out"
if want collectives; then
: > "$out/collectives.md"
for n in 2 4; do
  "$mpiexec" -n "$n" "$build/bench/bench_collectives" --out "$out/collectives-np$n.json" |
    tee -a "$out/collectives.md"
  echo | tee -a "$out/collectives.md"
done
fi
if want training; then
: > "$out/training.md"
for n in 2 4; do
  "$mpiexec" -n "$n" "$build/bench/bench_training" --out "$out/training-np$n.json" |
    tee -a "$out/training.md"
done
fi
# Checkpoints: save/load against raw POSIX I/O, 1, 2 and 4 ranks, 64 MiB to 2 GiB, and a model
# of 2,000 parameters (with the parallel-HDF5 pitfalls measured). Scratch files in $out/ckpt.
if want checkpoint; then
mkdir -p "$out/ckpt"
{
  echo "| model | params | ranks | raw write GiB/s | save GiB/s | save/raw | raw read GiB/s |" \
       "load GiB/s | load/raw | resharded load GiB/s | resharded/same | async blocks | pitfalls |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
} > "$out/checkpoint.md"
: > "$out/checkpoint.json"
for n in 1 2 4; do
  for mib in 64 512 2048; do
    "$mpiexec" -n "$n" "$build/bench/bench_checkpoint" "$out/ckpt" "$mib" 8 3 \
      2>> "$out/checkpoint.json" | tee -a "$out/checkpoint.md"
  done
  "$mpiexec" -n "$n" "$build/bench/bench_checkpoint" "$out/ckpt" 256 2000 3 --pitfalls \
    2>> "$out/checkpoint.json" | tee -a "$out/checkpoint.md"
done
fi
echo "results: $out/collectives-np{2,4}.json $out/collectives.md $out/training-np{2,4}.json" \
  "$out/training.md" "$out/checkpoint.md" "$out/checkpoint.json"
