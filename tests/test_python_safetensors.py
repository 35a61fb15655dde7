"""Safetensors export and import through the Python binding (libfsdp.safetensors_export /
safetensors_import, over the _fcomm twins of the C calls): the exported file read here by the
safetensors layout itself (an 8-byte little-endian header length, a JSON header of dtype, shape
and data_offsets, then the data), its tensors equal to the saved values; the import loaded into
a new context equal to them bit for bit; bad input refused naming the argument. Run under
mpiexec with 1 or more ranks; argument: a scratch directory."""
import json
import os
import struct
import sys

import numpy as np

import libfsdp
from pychecks import check, expect_error, finish, set_rank

def read_safetensors(path):
    """{name: numpy array} from a .safetensors file, by the format's definition."""
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    kinds = {"F32": np.float32, "F64": np.float64}
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + begin:8 + n + end],
                                  kinds[t["dtype"]]).reshape(t["shape"])
    return out


ctx = libfsdp.init()
rank, world = ctx.group()
set_rank(rank)
base = os.path.join(sys.argv[1] if len(sys.argv) > 1 else ".", f"py_safetensors_np{world}")
rng = np.random.default_rng(7)  # the same values on every rank
w0 = rng.standard_normal((4, 3)).astype(np.float32)
b0 = rng.standard_normal(4).astype(np.float32)
unit = ctx.unit([("fc.weight", w0), ("fc.bias", b0)], name="fc")
ckpt = base + ".h5"
ctx.save(ckpt)

libfsdp.safetensors_export(ckpt, base + ".safetensors")
libfsdp.safetensors_export(ckpt, base + "_f64.safetensors", dtype="float64")
tensors = read_safetensors(base + ".safetensors")
check(sorted(tensors) == ["fc.bias", "fc.weight"], f"tensors {sorted(tensors)}")
check(tensors["fc.weight"].dtype == np.float32 and np.array_equal(tensors["fc.weight"], w0),
      "fc.weight exported as saved")
check(np.array_equal(tensors["fc.bias"], b0), "fc.bias exported as saved")
wide = read_safetensors(base + "_f64.safetensors")
check(wide["fc.weight"].dtype == np.float64 and np.array_equal(wide["fc.weight"], w0),
      "float64 export: float32 values widened exactly")

libfsdp.safetensors_import(base + ".safetensors", base + "_imported.h5")
ctx2 = libfsdp.init()
unit2 = ctx2.unit([("fc.weight", np.zeros((4, 3), np.float32)),
                   ("fc.bias", np.zeros(4, np.float32))], name="fc")
ctx2.load(base + "_imported.h5", flags=("model_only",))
got = unit2.gather()
check(np.array_equal(got[0], w0) and np.array_equal(got[1], b0), "imported values bit for bit")

expect_error("FSDP_ERR_INVALID_ARGUMENT", "dtype", libfsdp.safetensors_export, ckpt,
             base + "_x.safetensors", dtype="int8")
expect_error("FSDP_ERR_INVALID_ARGUMENT", "max_shard_bytes", libfsdp.safetensors_export, ckpt,
             base + "_x.safetensors", max_shard_bytes=-1)
expect_error("FSDP_ERR_INVALID_ARGUMENT", "comm", libfsdp.safetensors_import,
             base + ".safetensors", base + "_x.h5", comm="world")
expect_error("FSDP_ERR_INVALID_ARGUMENT", "checkpoint", libfsdp.safetensors_export, "",
             base + "_x.safetensors")
expect_error("FSDP_ERR_IO", "no-such", libfsdp.safetensors_import,
             base + ".no-such.safetensors", base + "_x.h5")
check(not os.path.exists(base + "_x.safetensors") and not os.path.exists(base + "_x.h5"),
      "nothing written by a refused call")

ctx2.finalize()
ctx.finalize()
finish(f"test_python_safetensors on {world} rank(s)")
