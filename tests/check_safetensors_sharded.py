#!/usr/bin/env python3
"""A sharded export (fsdp-ckpt export --max-shard-size, fsdp_safetensors_export) read by the PyPI
`safetensors` package, shard by shard, against reference float32 values (<name>.bin files, raw
little-endian), and its index checked as transformers reads it: every tensor mapped to the shard
that holds it, total_size the tensors' bytes, shards named model-0000k-of-0000n.safetensors, none
over the size limit unless it holds a single tensor.

Usage: check_safetensors_sharded.py <export dir> <reference dir> <max shard bytes>
Exit 77 (skipped) without the safetensors package or numpy."""
import json
import os
import re
import sys

try:
    import numpy as np
    from safetensors import safe_open
    from safetensors.numpy import load_file
except ImportError as e:
    print(f"SKIP: {e}")
    sys.exit(77)


def main() -> int:
    out, refdir, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
    refs = {f[:-4]: np.fromfile(os.path.join(refdir, f), dtype="<f4")
            for f in os.listdir(refdir) if f.endswith(".bin")}
    index_path = os.path.join(out, "model.safetensors.index.json")
    with open(index_path) as f:
        index = json.load(f)
    weight_map = index["weight_map"]
    failures = []
    if sorted(weight_map) != sorted(refs):
        failures.append(f"weight_map names {sorted(weight_map)} != {sorted(refs)}")
    shards = sorted(set(weight_map.values()))
    n = len(shards)
    if n < 2:
        failures.append(f"{n} shard(s): the limit should have split the model")
    for k, name in enumerate(shards):
        if name != f"model-{k + 1:05d}-of-{n:05d}.safetensors":
            failures.append(f"shard name {name}")
    total = 0
    for shard in shards:
        path = os.path.join(out, shard)
        tensors = load_file(path)  # the package's own reader: header, offsets, sizes
        with safe_open(path, framework="numpy") as f:
            if f.metadata().get("format") != "pt":
                failures.append(f"{shard}: metadata format is not 'pt'")
        listed = sorted(k for k, v in weight_map.items() if v == shard)
        if sorted(tensors) != listed:
            failures.append(f"{shard} holds {sorted(tensors)}, the index lists {listed}")
        data = sum(t.nbytes for t in tensors.values())
        total += data
        if data > limit and len(tensors) > 1:
            failures.append(f"{shard}: {data} bytes of tensors over the {limit}-byte limit")
        for name, t in tensors.items():
            ref = refs.get(name)
            if ref is None or t.dtype != np.float32 or t.size != ref.size:
                failures.append(f"{name}: dtype {t.dtype}, {t.size} elements")
            elif not np.array_equal(t.reshape(-1), ref):
                failures.append(f"{name}: values differ from the reference")
    if int(index["metadata"]["total_size"]) != total:
        failures.append(f"total_size {index['metadata']['total_size']} != {total}")
    for f in failures:
        print("FAIL", f)
    if failures:
        return 1
    print(f"PASS: {len(weight_map)} tensors in {n} shards read by safetensors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
