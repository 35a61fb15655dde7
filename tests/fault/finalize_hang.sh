#!/usr/bin/env bash
# fsdp_finalize with a collective its peer never joined (tests/fault/test_finalize_hang.c): the
# job must end within 60 s (timeout 2 s + grace 2 s + start-up), not hang, with the watchdog's
# report naming fsdp_finalize on standard error.
# Usage: finalize_hang.sh "<mpiexec>" <test_finalize_hang>
set -u
mpiexec=$1
exe=$2
err=$(mktemp)
start=$(date +%s)
timeout -s KILL 60 $mpiexec -n 2 "$exe" 2>"$err" >/dev/null
rc=$?
took=$(( $(date +%s) - start ))
cat "$err"
if [ "$rc" -eq 137 ] || [ "$took" -ge 60 ]; then
  echo "FAIL: the job hung in fsdp_finalize (killed after ${took} s)"; rm -f "$err"; exit 1
fi
if [ "$rc" -eq 0 ]; then
  echo "FAIL: the job exited 0: fsdp_finalize returned over a collective its peer never joined"
  rm -f "$err"; exit 1
fi
if ! grep -q "watchdog" "$err" || ! grep -q "fsdp_finalize" "$err"; then
  echo "FAIL: no watchdog report naming fsdp_finalize (exit $rc after ${took} s)"; rm -f "$err"; exit 1
fi
rm -f "$err"
echo "PASS: fsdp_finalize over a dead peer ended the job in ${took} s with the watchdog's report"
