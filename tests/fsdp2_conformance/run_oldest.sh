#!/usr/bin/env bash
# The conformance suite on the oldest PyTorch fully_shard supports (2.6.0, PyPI), 2 ranks, against
# a build tree: each test_*.py run as `make check` runs it, under a second virtual environment
# made here once (idempotent; several GB with PyTorch's CUDA libraries, which the CPU never loads).
# PyTorch 2.6's own fully_shard does not run on the CPU, so its control column reads "control
# unavailable" and each behaviour is checked against its reference (DDP, an unsharded model).
# Usage: run_oldest.sh BUILD_DIR [MPIEXEC]   (venv: $FSDP_TORCH26_VENV or
#        ~/.cache/libfsdp/torch26-venv; FSDP_CONFORMANCE_TABLE=rows.jsonl as under ctest)
set -euo pipefail
build=$(cd "$1" && pwd)
mpiexec=${2:-mpiexec.mpich}
here=$(cd "$(dirname "$0")" && pwd)
venv=${FSDP_TORCH26_VENV:-$HOME/.cache/libfsdp/torch26-venv}
if ! "$venv/bin/python" -c 'import torch, numpy; assert torch.__version__.startswith("2.6.")' \
    2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q torch==2.6.0 numpy
fi
lib="$build/src/libfsdp.so"
failed=0
for t in "$here"/test_*.py; do
  echo "== $(basename "$t")"
  PYTHONPATH="$here/../../python" LIBFSDP_LIBRARY="$lib" OMP_NUM_THREADS=1 \
    "$mpiexec" -n 2 "$venv/bin/python" "$t" || failed=$((failed + 1))
done
echo "$failed file(s) failing under PyTorch $("$venv/bin/python" -c 'import torch; print(torch.__version__)')"
exit $((failed > 0))
