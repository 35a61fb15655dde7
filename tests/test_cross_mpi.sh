#!/usr/bin/env bash
# Two builds of libfsdp against two MPIs (MPICH and Open MPI), each used as the other's user
# would misuse it or rely on it:
#  - a program linked against one MPI started by the other's mpiexec: every rank would come up
#    as a 1-rank job of its own; fsdp_init refuses it with FSDP_ERR_MPI naming the launcher and
#    the MPI, on every rank, instead of training alone (never a crash, never a silent success);
#  - a checkpoint written under one MPI is read under the other, both ways, on another rank count
#    and another unit grouping: the file is MPI-independent (test_checkpoint_reshard checks every
#    value against its non-sharded reference).
#   test_cross_mpi.sh <this build> <other build> <work dir>
set -euo pipefail
this=$1 other=$2 work=$3
fail() { echo "FAIL: $*"; exit 1; }
launcher() { sed -n 's/^MPIEXEC_EXECUTABLE:FILEPATH=//p' "$1/CMakeCache.txt"; }
this_mpiexec=$(launcher "$this") other_mpiexec=$(launcher "$other")
[ -x "$other/examples/hello/hello_c" ] && [ -x "$other/tests/test_checkpoint_reshard" ] ||
  fail "$other is not a built libfsdp tree"
rm -rf "$work" && mkdir -p "$work"

# 1. The wrong launcher, both ways.
for pair in "$other_mpiexec|$this/examples/hello/hello_c" "$this_mpiexec|$other/examples/hello/hello_c"; do
  mpiexec=${pair%%|*} program=${pair#*|}
  set +e
  out=$(timeout 120 "$mpiexec" -n 2 "$program" 2>&1); rc=$?
  set -e
  echo "$mpiexec -n 2 $program: exit $rc"
  echo "$out" | grep -m2 "fsdp_init" || true
  [ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "$program under $mpiexec: exit $rc (want a refusal)"
  [ "$(grep -c "fsdp_init.*MPI_COMM_WORLD has 1 rank.*did not join that launcher's job" <<<"$out")" = 2 ] ||
    fail "$program under $mpiexec: no refusal on both ranks: $out"
done

# 2. Checkpoints across MPIs: saved on 2 ranks (grouping a), loaded on 3 (grouping b).
"$this_mpiexec" -n 2 "$this/tests/test_checkpoint_reshard" save "$work/this.h5" full a 2
"$other_mpiexec" -n 3 "$other/tests/test_checkpoint_reshard" load "$work/this.h5" full b
"$other_mpiexec" -n 2 "$other/tests/test_checkpoint_reshard" save "$work/other.h5" full c 2
"$this_mpiexec" -n 3 "$this/tests/test_checkpoint_reshard" load "$work/other.h5" full a
echo "PASS: the wrong launcher refused both ways; checkpoints read across MPIs both ways"
