#!/usr/bin/env bash
# The Python environment `make bench` needs: a virtual environment with PyTorch >= 2.6 (FSDP2's
# fully_shard; Debian's python3-torch is older), NumPy and matplotlib (the plots). Idempotent:
# an environment that already imports them is kept. Prints the interpreter's path.
# Usage: setup-python.sh [venv dir]   (default: $FSDP_BENCH_VENV or ~/.cache/libfsdp/bench-venv)
set -euo pipefail
venv=${1:-${FSDP_BENCH_VENV:-$HOME/.cache/libfsdp/bench-venv}}
check='import torch, numpy, matplotlib
major, minor = (int(x) for x in torch.__version__.split(".")[:2])
assert (major, minor) >= (2, 6), torch.__version__'
# torchtitan (tests/test_torchtitan_dropin.sh, which reports itself skipped without it), pinned,
# without its declared dependencies (wandb, tensorboard, datasets, torchdata, ...: its trainer's,
# not needed by the model, parallelize, loss, optimizer and checkpoint pieces the test uses; pip
# would also replace huggingface_hub), plus the two it imports for those: spmd_types and tyro.
tt() {
  "$venv/bin/python" -c 'import torchtitan.models.llama3, torchtitan.components.checkpointer' \
    2>/dev/null && return 0
  "$venv/bin/pip" install -q --no-deps torchtitan==0.3.0 spmd_types==0.2.3 >&2 &&
    "$venv/bin/pip" install -q tyro >&2 || echo "torchtitan not installed" >&2
}
# JAX on the CPU (tests/test_jax_mlp.py and examples/jax/mlp.py, which report themselves skipped
# without it), pinned: jax and the jaxlib of the same version (PyPI's jaxlib wheel is the CPU one).
jx() {
  "$venv/bin/python" -c 'import jax, jaxlib; assert jax.__version__ == "0.10.2"' 2>/dev/null &&
    return 0
  "$venv/bin/pip" install -q jax==0.10.2 jaxlib==0.10.2 >&2 || echo "jax not installed" >&2
}
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$check" 2>/dev/null; then
  tt
  jx
  echo "$venv/bin/python"
  exit 0
fi
base=$(command -v python3)
"$base" -m venv "$venv" >&2
"$venv/bin/pip" install -q --upgrade pip >&2
# PyPI's Linux wheel of torch (the CPU-only index may be unreachable); several GB with its CUDA
# libraries, which the CPU runs here never load.
"$venv/bin/pip" install -q "torch>=2.6" numpy matplotlib >&2
# transformers and safetensors: tests/test_pytorch_hf.py (Hugging Face models through FullyShard),
# which reports itself skipped without them.
"$venv/bin/pip" install -q transformers safetensors >&2 || echo "transformers not installed" >&2
"$venv/bin/python" -c "$check" >&2
tt
jx
echo "$venv/bin/python"
