#!/usr/bin/env bash
# Runs test_shm_exhaustion.py on 2 ranks in a private mount namespace whose /dev/shm is a 48 MiB
# tmpfs (Docker's default is 64 MB), once per shared-memory transport. Skipped (exit 77) where
# unshare or mount is not permitted (not root, no user namespaces).
# Usage: test_shm_exhaustion.sh <mpiexec> <python> <tests source dir> <scratch prefix>
set -euo pipefail
mpiexec=$1 python=$2 src=$3 work=$4
mib=48
unshare -m true 2> /dev/null || { echo "skipped: unshare -m is not permitted here"; exit 77; }
unshare -m sh -c "mount -t tmpfs -o size=${mib}m tmpfs /tmp 2>/dev/null" ||
  { echo "skipped: mounting a tmpfs in a private namespace is not permitted here"; exit 77; }
for transport in auto shm shm_zero_copy; do
  FSDP_TRANSPORT=$transport unshare -m sh -c "mount -t tmpfs -o size=${mib}m tmpfs /dev/shm &&
    exec \"$mpiexec\" -n 2 \"$python\" \"$src/test_shm_exhaustion.py\" $mib" 2> "$work.$transport.err"
  cat "$work.$transport.err" >&2
  if [ "$transport" = auto ]; then  # the fallback says so, once per kind, on one line each
    [ "$(grep -c 'libfsdp: warning: node shared memory: a window of .* bytes cannot be backed; /dev/shm has' "$work.$transport.err")" = 2 ] ||
      { echo "FAIL: AUTO's fallback warnings"; exit 1; }
  fi
done
echo "PASS: node shared memory exhaustion is an error, not a crash"
