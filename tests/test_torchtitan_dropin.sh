#!/usr/bin/env bash
# torchtitan (PyPI) through libfsdp.pytorch.fully_shard on 2 CPU ranks: see
# test_torchtitan_dropin.py. Usage: test_torchtitan_dropin.sh <python with PyTorch >= 2.6, or
# empty> <libfsdp.so> <mpiexec and its options>
# Exit 77 (skipped) without PyTorch >= 2.6 or torchtitan.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
py=${1:-}
lib=${2:-${LIBFSDP_LIBRARY:-$root/build/src/libfsdp.so}}
mpiexec=${3:-mpiexec.mpich}
[ -n "$py" ] && [ -x "$py" ] || { echo "skipped: no Python with PyTorch >= 2.6"; exit 77; }
[ -f "$lib" ] || { echo "skipped: no $lib (build first)"; exit 77; }
# A free port for torch.distributed's env:// rendezvous (torchtitan's init_distributed).
port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
keep=$(mktemp -d)
trap 'rm -rf "$keep"' EXIT
cd "$root"
# A failed run gets one more try, on a new rendezvous port, saying so: once in four suite runs on
# 2 busy cores (2026-11-29) the 4-rank resume ended with one rank's exit code 1 and no message,
# and passed when rerun; the cause is not found (the notes of that session). A second failure
# fails the test; a skip (77) is not retried.
run() {  # ranks, then environment assignments
  local n=$1 rc=1
  shift
  for try in 1 2; do
    case "$*" in *LIBFSDP_TT_KEEP=*) rm -rf "$keep/run" ;; esac  # a try keeps only its own
    env "$@" PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}" LIBFSDP_LIBRARY="$lib" \
      MASTER_ADDR=127.0.0.1 MASTER_PORT=$(port) OMP_NUM_THREADS=1 \
      timeout "${LIBFSDP_TT_TIMEOUT:-900}" $mpiexec -n "$n" "$py" "$here/test_torchtitan_dropin.py" \
      2>&1
    rc=$?
    [ "$rc" -eq 0 ] || [ "$rc" -eq 77 ] && return "$rc"
    [ "$try" -eq 1 ] && echo "note: the $n-rank run failed (exit $rc): once more"
  done
  return "$rc"
}
# 2 ranks against torch's fully_shard, keeping the checkpoint; then resumed on 4 ranks.
run 2 LIBFSDP_TT_KEEP="$keep/run" || exit $?
run 4 LIBFSDP_TT_RESUME_FROM="$keep/run"
