"""The Python binding's copy of the C ABI (python/libfsdp/_capi.py) against include/fsdp.h: every
enumerator of every public enum (sentinels aside) with its value, the constants (config magic,
MAX_NDIM, the header version), and every struct's fields in order, with their offsets and sizes
measured by the C compiler (a program generated here and compiled against fsdp.h). Any
difference fails, naming it. The header is read here by its own small reader, not by the
generator's (bindings/fsdp_api.py), so that a mistake of the generator does not check itself.
    check_python_capi.py <include dir> <python package dir> <MPI C compiler (fsdp.h needs mpi.h)>
                         <generated _abi.py>"""
import ctypes
import os
import re
import subprocess
import sys
import tempfile
import types

include, package, cc, abi_path = sys.argv[1:5]
header = open(os.path.join(include, "fsdp.h")).read()
text = re.sub(r"/\*.*?\*/", "", header, flags=re.S)
text = re.sub(r"//[^\n]*", "", text)

# _capi.py alone (no library needed): run it as a module without importing the package, over
# the generated description it imports as libfsdp._abi.
abi = types.ModuleType("libfsdp._abi")
exec(compile(open(abi_path).read(), abi_path, "exec"), abi.__dict__)
sys.modules["libfsdp"] = types.ModuleType("libfsdp")
sys.modules["libfsdp"]._abi = sys.modules["libfsdp._abi"] = abi
capi = types.ModuleType("_capi")
exec(compile(open(os.path.join(package, "_capi.py")).read(), "_capi.py", "exec"), capi.__dict__)
problems = []

enums = {}
for body, name in re.findall(r"typedef enum(?: \w+)? \{(.*?)\} (\w+);", text, re.S):
    members, value = {}, -1
    for item in (e.strip() for e in body.split(",")):
        if not item:
            continue
        if "=" in item:
            key, expr = (x.strip() for x in item.split("=", 1))
            value = int(expr.replace("\n", ""), 0)
        else:
            key, value = item, value + 1
        if not key.endswith("_COUNT"):  # sentinels: not part of the ABI (doc/abi.md)
            members[key] = value
    enums[name] = members

# Status names in value order.
status = enums["fsdp_status_t"]
want = [k for k, _ in sorted(status.items(), key=lambda kv: kv[1])]
if capi.STATUS_NAMES != want or sorted(status.values()) != list(range(len(want))):
    problems.append(f"STATUS_NAMES {capi.STATUS_NAMES} != fsdp.h {want}")
checks = [("fsdp_dtype_t", {"DTYPE_AUTO": "FSDP_DTYPE_AUTO", "FLOAT32": "FSDP_FLOAT32",
                            "FLOAT64": "FSDP_FLOAT64", "BFLOAT16": "FSDP_BFLOAT16",
                            "FLOAT16": "FSDP_FLOAT16"}, None)]
tables = [("STRATEGIES", "fsdp_sharding_strategy_t",
           lambda k: "FSDP_NO_SHARD" if k == "none" else f"FSDP_{k.upper()}_SHARD"),
          ("REDUCTIONS", "fsdp_grad_reduction_t", lambda k: f"FSDP_REDUCE_{k.upper()}"),
          ("GROUPS", "fsdp_group_t", lambda k: f"FSDP_GROUP_{k.upper()}"),
          ("OPS", "fsdp_reduce_op_t", lambda k: f"FSDP_OP_{k.upper()}"),
          ("OPTIMIZERS", "fsdp_optimizer_kind_t", lambda k: f"FSDP_OPTIMIZER_{k.upper()}"),
          ("LOAD_FLAGS", "fsdp_load_flags_t", lambda k: f"FSDP_LOAD_{k.upper()}"),
          ("MEMORY_SPACES", "fsdp_memory_space_t", lambda k: f"FSDP_MEMORY_{k.upper()}"),
          ("TRANSPORTS", "fsdp_transport_t", lambda k: f"FSDP_TRANSPORT_{k.upper()}"),
          ("ON_TIMEOUT", "fsdp_on_timeout_t", lambda k: f"FSDP_ON_TIMEOUT_{k.upper()}"),
          ("LAYOUTS", "fsdp_unit_layout_t", lambda k: f"FSDP_LAYOUT_{k.upper()}"),
          ("USED_BY", "fsdp_unit_use_t", lambda k: f"FSDP_USED_BY_{k.upper()}"),
          ("BUFFERS", "fsdp_buffer_t",
           lambda k: "FSDP_BUFFER_GRAD_SHARD" if k == "shard_grad" else f"FSDP_BUFFER_{k.upper()}")]
for attr, cname in checks[0][1].items():
    if getattr(capi, attr) != enums["fsdp_dtype_t"][cname]:
        problems.append(f"{attr} = {getattr(capi, attr)}, fsdp.h {cname} = "
                        f"{enums['fsdp_dtype_t'][cname]}")
if set(checks[0][1].values()) != set(enums["fsdp_dtype_t"]):
    problems.append(f"dtypes: fsdp.h has {sorted(enums['fsdp_dtype_t'])}")
for attr, enum, to_c in tables:
    table = getattr(capi, attr)
    have = {to_c(k): v for k, v in table.items()}
    if have != enums[enum]:
        problems.append(f"{attr} {have} != fsdp.h {enum} {enums[enum]}")
define = lambda n: int(re.search(rf"#define {n} (\w+)", header).group(1).rstrip("uUlL"), 0)
if capi.CONFIG_MAGIC != define("FSDP_CONFIG_MAGIC"):
    problems.append("CONFIG_MAGIC differs from FSDP_CONFIG_MAGIC")
if capi.MAX_NDIM != define("FSDP_MAX_NDIM"):
    problems.append("MAX_NDIM differs from FSDP_MAX_NDIM")
version = tuple(define(f"FSDP_VERSION_{p}") for p in ("MAJOR", "MINOR", "PATCH"))
if capi.VERSION != version:
    problems.append(f"VERSION {capi.VERSION} != fsdp.h {version}")

# Structs: every one of the header, field names in order; offsets and sizes from the compiler.
declared = {}
for body, name in re.findall(r"typedef struct \w+ \{(.*?)\} (\w+);", text, re.S):
    declared[name] = [re.findall(r"(\w+)\s*$", f.strip())[0] for f in body.split(";")
                      if f.strip()]
structs = {"".join(w.capitalize() for w in c[len("fsdp_"):-len("_t")].split("_")): c
           for c in declared}
for py in structs:
    if not hasattr(capi, py):
        problems.append(f"_capi.py has no class {py} for fsdp.h's {structs[py]}")
lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "fsdp.h"', "int main(void) {"]
for py, c in structs.items():
    if not hasattr(capi, py):
        continue
    fields = [f for f, _ in getattr(capi, py)._fields_]
    if fields != declared[c]:
        problems.append(f"{py} fields {fields} != fsdp.h {c} {declared[c]}")
        continue
    lines.append(f'  printf("{py} sizeof %zu\\n", sizeof({c}));')
    for f in fields:
        lines.append(f'  printf("{py} {f} %zu\\n", offsetof({c}, {f}));')
lines.append("  return 0;\n}")
with tempfile.TemporaryDirectory() as d:
    src, exe = os.path.join(d, "layout.c"), os.path.join(d, "layout")
    open(src, "w").write("\n".join(lines) + "\n")
    subprocess.run([cc, "-std=c99", "-I", include, src, "-o", exe],
                   check=True)
    measured = subprocess.run([exe], capture_output=True, text=True, check=True).stdout
for line in measured.splitlines():
    py, field, value = line.split()
    cls = getattr(capi, py)
    have = ctypes.sizeof(cls) if field == "sizeof" else getattr(cls, field).offset
    if have != int(value):
        problems.append(f"{py}.{field}: ctypes {have}, C {value}")
for p in problems:
    print("MISMATCH:", p)
print(f"{'FAILED' if problems else 'PASS'}: _capi.py against fsdp.h ({len(enums)} enums, "
      f"{len(structs)} structs)")
sys.exit(1 if problems else 0)
