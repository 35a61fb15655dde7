#!/usr/bin/env bash
# `make bench`: every benchmark, then a summary. Writes JSON, markdown and PNG plots to
# <build>/bench/, and the summary (with the machine it ran on) to <build>/bench/summary.md.
# Timings on a shared machine are noisy: every comparison is a ratio measured in the same run.
# Usage: run.sh [build dir] [mpiexec] [parts...]
#   parts: kernels collectives training checkpoint e2e published (default: all), gpt (make
#   bench-gpt)
set -euo pipefail
build=${1:-build}
mpiexec=${2:-$(command -v mpiexec.mpich || command -v mpiexec)}
parts=${*:3}
parts=${parts:-kernels collectives training checkpoint e2e published}
want() { [[ " $parts " == *" $1 "* ]]; }
here=$(cd "$(dirname "$0")" && pwd)
out="$build/bench"
mkdir -p "$out"
python=$(bash "$here/setup-python.sh")
# The machine, stated once for every result.
{
  echo "{\"host\": \"$(hostname)\", \"cpus\": $(nproc), \"cpu\": \"$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')\","
  echo " \"memory_gib\": $(awk '/MemTotal/ {printf "%.1f", $2 / 1048576}' /proc/meminfo),"
  echo " \"kernel\": \"$(uname -r)\", \"mpi\": \"$("$mpiexec" --version 2>&1 | grep -m1 -i version | tr -d '"' | xargs)\","
  echo " \"date\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\"}"
} > "$out/machine.json"

# Host kernels (optimizer updates, norms, casts, scaled stores), one core, against the memory
# bandwidth of their own bytes at 2^20 and 2^24 elements.
if want kernels; then
  "$build/bench/bench_kernels" --out "$out/kernels.json" | tee "$out/kernels.md"
fi
# Collectives: library (shm and mpi transports) vs raw MPI vs memcpy, 4 KiB to 256 MiB, and the
# node memory of unsharded buffers per transport.
if want collectives; then
  : > "$out/collectives.md"
  for n in 2 4; do
    "$mpiexec" -n "$n" "$build/bench/bench_collectives" --out "$out/collectives-np$n.json" |
      tee -a "$out/collectives.md"
    echo | tee -a "$out/collectives.md"
  done
  # Units used by any subset of ranks against collective units of the same size.
  for n in 2 4; do
    "$mpiexec" -n "$n" "$build/bench/bench_any_ranks" --out "$out/any-ranks-np$n.json" |
      tee -a "$out/collectives.md"
    echo | tee -a "$out/collectives.md"
  done
  # The dim-0 unit layout (FSDP2's) against the flat one, per host transport.
  for n in 2 4; do
    "$mpiexec" -n "$n" "$build/bench/bench_layout" --out "$out/layout-np$n.json" |
      tee -a "$out/collectives.md"
    echo | tee -a "$out/collectives.md"
  done
fi
# Memory against FSDP's formula and a replicated model, overlap with and without prefetch, and
# per-call CPU overhead: once per host transport, and once in debug mode (FSDP_DEBUG_COLLECTIVES).
if want training; then
  : > "$out/training.md"
  for n in 2 4; do
    for t in shm mpi; do
      FSDP_TRANSPORT=$t "$mpiexec" -n "$n" "$build/bench/bench_training" \
        --out "$out/training-np$n-$t.json" | tee -a "$out/training.md"
    done
    # Debug mode's cost: the same run with every collective call compared across ranks first.
    FSDP_TRANSPORT=shm FSDP_DEBUG_COLLECTIVES=1 "$mpiexec" -n "$n" "$build/bench/bench_training" \
      --out "$out/training-np$n-shm-debug.json" | tee -a "$out/training.md"
  done
fi
# Past one machine: full, hybrid, HFSDP and hpZ at 4 ranks as 2 nodes of 2, per-rank memory and
# inter-node bytes per step measured (memory stats, the trace) against fsdp-plan's prediction.
if want training; then
  FSDP_TRANSPORT=mpi FSDP_RANKS_PER_NODE=2 "$mpiexec" -n 4 "$build/bench/bench_strategies" \
    --out "$out/strategies.json" | tee "$out/strategies.md"
fi
# Checkpoints: save/load against raw POSIX I/O, 1, 2 and 4 ranks, 64 MiB to 2 GiB, and a model
# of 2,000 parameters (with the parallel-HDF5 pitfalls measured). Scratch files in $out/ckpt.
if want checkpoint; then
  mkdir -p "$out/ckpt"
  {
    echo "| model | params | ranks | raw write GiB/s | raw new-file write GiB/s | save GiB/s |" \
         "save/raw | save/raw new-file | raw read GiB/s | load GiB/s | load/raw |" \
         "resharded load GiB/s | resharded/same | async blocks | pitfalls |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
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
  # The same against PyTorch DCP (FSDP2's DTensors), parameters + AdamW state, 1, 2, 4 ranks.
  {
    echo "| checkpoint MiB | ranks | libfsdp save GiB/s | DCP save GiB/s | save vs DCP |" \
         "libfsdp cold load GiB/s | DCP cold load GiB/s | cold load vs DCP |" \
         "libfsdp warm load GiB/s | DCP warm load GiB/s | warm load vs DCP |" \
         "raw cold read GiB/s | libfsdp cold load / raw read | DCP cold load / raw read | cold reads |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  } > "$out/checkpoint-dcp.md"
  : > "$out/checkpoint-dcp.json"
  for n in 1 2 4; do
    for mib in 64 512 2048; do
      PYTHONPATH="$here/../python" LIBFSDP_LIBRARY="$build/src/libfsdp.so" \
        "$mpiexec" -n "$n" "$python" "$here/bench_dcp.py" "$out/ckpt" "$mib" 4 \
        2>> "$out/checkpoint-dcp.json" | tee -a "$out/checkpoint-dcp.md"
    done
  done
  rm -rf "$out/ckpt"
fi
# End to end: the GPT example with libfsdp, PyTorch FSDP2 and PyTorch DDP.
if want e2e; then
  "$python" "$here/e2e_gpt.py" --build "$build" --mpiexec "$mpiexec" --python "$python" \
    --nproc 2 --reps 5 --out "$out/e2e-np2.json" | tee "$out/e2e.log"
fi
# The planner against the seeds' published runs (the FSDP paper, the AWS note): planned and
# published side by side with their ratio (bench/data/published/runs.json), seconds.
# Without the planner's machine model there is nothing to compare: said, and the rest goes on.
if want published; then
  if "$build/src/fsdp-plan" --help | grep -c -- --machine > /dev/null; then  # -c reads it all: no SIGPIPE under pipefail
    "$python" "$here/published_runs.py" --plan "$build/src/fsdp-plan" --out "$out/published-runs.md"
  else
    echo "published: not compared, $build/src/fsdp-plan has no --machine (step-time model)" |
      tee "$out/published-runs.md"
  fi
fi
# The seed's Table 3.1 (make bench-gpt only: about 30 minutes).
if want gpt; then
  "$python" "$here/bench_gpt.py" --build "$build" --mpiexec "$mpiexec" --python "$python" \
    --nproc 2 --out "$out/gpt" | tee "$out/gpt.log"
fi
"$python" "$here/summarize.py" "$out"
echo "results: $out/summary.md, $out/*.json, $out/*.png"
