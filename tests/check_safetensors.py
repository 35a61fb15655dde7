#!/usr/bin/env python3
"""A safetensors reader written from the format's specification (stdlib only), checking a file
exported by fsdp-ckpt against reference float32 values (<name>.bin files, raw little-endian).

Usage: check_safetensors.py <file.safetensors> <reference dir> <F32|BF16|F16>
The spec: 8-byte little-endian unsigned header size N; N bytes of JSON: name -> {dtype, shape,
data_offsets [begin, end)} relative to the byte buffer that follows, plus an optional
"__metadata__" str->str map; the tensors cover the buffer exactly; data little-endian, row-major."""
import json
import os
import struct
import sys


def bf16_bits(f32_bits: int) -> int:
    """float32 -> bfloat16, round to nearest even (NaN kept quiet)."""
    if (f32_bits & 0x7F800000) == 0x7F800000 and (f32_bits & 0x7FFFFF):
        return (f32_bits >> 16) | 0x40
    return (f32_bits + 0x7FFF + ((f32_bits >> 16) & 1)) >> 16


def expected_bytes(ref: bytes, dtype: str) -> bytes:
    n = len(ref) // 4
    if dtype == "F32":
        return ref
    if dtype == "BF16":
        words = struct.unpack("<%dI" % n, ref)
        return struct.pack("<%dH" % n, *(bf16_bits(w) for w in words))
    if dtype == "F16":  # struct 'e' rounds to nearest even; float32 -> float64 is exact
        return struct.pack("<%de" % n, *struct.unpack("<%df" % n, ref))
    raise SystemExit("unknown dtype " + dtype)


def main() -> int:
    path, refdir, dtype = sys.argv[1:4]
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    buf = data[8 + n:]
    meta = header.pop("__metadata__", {})
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()), "metadata"
    assert n % 8 == 0, "header not padded to 8 bytes"
    spans = sorted((v["data_offsets"][0], v["data_offsets"][1]) for v in header.values())
    pos = 0
    for b, e in spans:
        assert b == pos, "hole or overlap in the byte buffer at %d" % pos
        pos = e
    assert pos == len(buf), "buffer not covered exactly (%d of %d)" % (pos, len(buf))
    sizes = {"F32": 4, "BF16": 2, "F16": 2, "F64": 8}
    refs = sorted(f[:-4] for f in os.listdir(refdir) if f.endswith(".bin"))
    assert sorted(header) == refs, "tensor names %s != %s" % (sorted(header), refs)
    bad = 0
    for name in refs:
        t = header[name]
        ref = open(os.path.join(refdir, name + ".bin"), "rb").read()
        numel = 1
        for d in t["shape"]:
            numel *= d
        b, e = t["data_offsets"]
        ok = (t["dtype"] == dtype and numel * 4 == len(ref) and e - b == numel * sizes[dtype]
              and buf[b:e] == expected_bytes(ref, dtype))
        print("%-16s %-5s %-10s %s" % (name, t["dtype"], t["shape"], "ok" if ok else "DIFFERS"))
        bad += not ok
    print("metadata:", meta)
    print("PASS" if bad == 0 else "FAIL: %d tensor(s)" % bad)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
