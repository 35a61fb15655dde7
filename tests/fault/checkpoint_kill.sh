#!/usr/bin/env bash
# A rank SIGKILLed in the middle of a save: the previous checkpoint under the same name must still
# load (and so verify its checksums), and no partial file may appear under the final name.
# Usage: checkpoint_kill.sh <mpiexec> <test_checkpoint_reshard> <dir>
set -u
mpiexec=$1 prog=$2 dir=$3
file=$dir/killed.h5
rm -f "$file" "$file.tmp"
$mpiexec -n 2 "$prog" save "$file" full a 2 || { echo "FAIL: the first save failed"; exit 1; }
before=$(cksum < "$file")
# Rank 1 kills itself after the file's structure exists and before its data is written.
if FSDP_CKPT_TEST_KILL_RANK=1 $mpiexec -n 2 "$prog" save "$file" full a 3 >/dev/null 2>&1; then
  echo "FAIL: the killed save reported success"; exit 1
fi
[ -e "$file.tmp" ] || { echo "FAIL: the kill did not happen mid-save (no $file.tmp)"; exit 1; }
[ "$(cksum < "$file")" = "$before" ] || { echo "FAIL: $file changed"; exit 1; }
# The old checkpoint loads, verified, at its step (2), into another grouping.
$mpiexec -n 2 "$prog" load "$file" full b || { echo "FAIL: the old checkpoint does not load"; exit 1; }
# And a later save replaces the stale temporary file and commits.
$mpiexec -n 2 "$prog" save "$file" full a 3 || { echo "FAIL: a save after the kill failed"; exit 1; }
[ ! -e "$file.tmp" ] || { echo "FAIL: $file.tmp left behind"; exit 1; }
$mpiexec -n 2 "$prog" load "$file" full c || exit 1
echo "PASS: checkpoint survives a SIGKILL mid-save"
