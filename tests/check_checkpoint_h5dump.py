#!/usr/bin/env python3
"""Reads a libfsdp checkpoint with h5dump alone (no libfsdp, no h5py) and checks it against
reference values the test program wrote as raw little-endian files: every parameter's bytes, and
its crc32c attribute recomputed here with a bitwise CRC-32C written from the definition. The
/index table must agree with what h5dump reports of each dataset: shape, storage offset, crc32c.

Usage: check_checkpoint_h5dump.py <h5dump> <checkpoint.h5> <reference dir>
The reference dir holds <name>.bin for each parameter."""
import os
import re
import subprocess
import sys
import tempfile


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


INDEX_ROW = re.compile(
    r'\(\d+\): \{\s*"([^"\\]*)(?:\\000)*",\s*"([^"\\]*)(?:\\000)*",\s*(\d+),\s*'
    r'\[([^\]]*)\],\s*(\d+),\s*(\d+),\s*(-?\d+)\s*\}')


def index_rows(h5dump: str, ckpt: str) -> dict:
    """path -> (dtype, shape, offset, crc32c, step), parsed from h5dump's text of /index."""
    text = subprocess.run([h5dump, "-d", "/index", ckpt], check=True, capture_output=True,
                          text=True).stdout
    rows = {}
    for path, dtype, ndim, shape, offset, crc, step in INDEX_ROW.findall(text):
        dims = [int(x) for x in shape.split(",")][:int(ndim)]
        rows[path] = (dtype, dims, int(offset), int(crc), int(step))
    return rows


def dataset_header(h5dump: str, ckpt: str, path: str) -> tuple:
    """(shape, storage offset) of a dataset, from h5dump's header and properties."""
    text = subprocess.run([h5dump, "-p", "-H", "-d", path, ckpt], check=True,
                          capture_output=True, text=True).stdout
    dims = re.search(r"DATASPACE\s+SIMPLE \{ \( ([^)]*) \)", text)  # absent: a scalar
    offset = int(re.search(r"OFFSET (\d+)", text).group(1))
    return [int(x) for x in dims.group(1).split(",")] if dims else [], offset


def main() -> int:
    h5dump, ckpt, refdir = sys.argv[1:4]
    names = sorted(f[:-4] for f in os.listdir(refdir) if f.endswith(".bin"))
    if not names:
        print("FAIL: no reference files in", refdir)
        return 1
    failures = 0
    index = index_rows(h5dump, ckpt)
    for name in names:
        want = open(os.path.join(refdir, name + ".bin"), "rb").read()
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "data.bin")
            subprocess.run([h5dump, "-d", "/model/" + name, "-b", "LE", "-o", out, ckpt],
                           check=True, stdout=subprocess.DEVNULL)
            got = open(out, "rb").read()
        attr = subprocess.run([h5dump, "-a", "/model/%s/crc32c" % name, ckpt], check=True,
                              capture_output=True, text=True).stdout
        stored = int(re.search(r"\(0\): (\d+)", attr).group(1))
        shape, offset = dataset_header(h5dump, ckpt, "/model/" + name)
        row = index.get("/model/" + name)
        index_ok = row is not None and row[1] == shape and row[2] == offset and row[3] == stored
        ok = got == want and crc32c(got) == stored and index_ok
        print("%-16s %6d bytes  values %s  crc32c %08x %s  index %s" %
              (name, len(got), "equal" if got == want else "DIFFER", stored,
               "ok" if crc32c(got) == stored else "MISMATCH (computed %08x)" % crc32c(got),
               "ok" if index_ok else "WRONG %r (dataset: shape %r offset %d)" %
               (row, shape, offset)))
        failures += not ok
    print("PASS" if failures == 0 else "FAIL: %d parameter(s)" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
