#!/usr/bin/env bash
# libfsdp.pytorch.fully_shard under PyTorch's own checkpointing (torch.distributed.checkpoint with
# get_state_dict / set_state_dict, model and torch.optim.AdamW state): saved on 2 ranks, loaded on
# 1, 2 and 4; the two steps after each load give the losses the saving run had (every rank's
# optimizer state is in the checkpoint: none is dropped as replicated).
# Usage: test_pytorch_fully_shard_dcp.sh <mpiexec and its options> <python with PyTorch >= 2.6,
#        or empty> <scratch dir> <tests source dir>
set -u
mpiexec=$1 py=$2 dir=$3 src=$4
if [ -z "$py" ] || [ ! -x "$py" ]; then
  echo "skipped: no Python with PyTorch >= 2.6 (bench/setup-python.sh)"
  exit 77
fi
rm -rf "$dir" && mkdir -p "$dir"
$mpiexec -n 2 "$py" "$src/test_pytorch_fully_shard.py" save "$dir/ckpt"; rc=$?
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || { echo "FAIL: the save on 2 ranks (exit $rc)"; exit 1; }
for n in 1 2 4; do
  $mpiexec -n $n "$py" "$src/test_pytorch_fully_shard.py" load "$dir/ckpt" ||
    { echo "FAIL: the load on $n rank(s)"; exit 1; }
done
echo "PASS: fully_shard DCP"
