#!/usr/bin/env python3
"""The bind(C) types of module fsdp_c (fortran/fsdp_c.f90) against the structs of fsdp.h, as the
two compilers lay them out: for every type, each field's offset and the whole size, printed by a
Fortran program (c_loc differences, c_sizeof) and by a C program (offsetof, sizeof) and compared.
A Fortran struct may only be a prefix of the C one: the structs grow at their end, and the
library reads `size` to know which fields the caller has. Exit 77 (skipped) without a compiler.
Handles (a C pointer, a type around one c_ptr in Fortran) compare by size.
Usage: check_fortran_layout.py fsdp_c.f90 INCLUDE_DIR MODULE_DIR CC FC WORK_DIR"""
import os
import re
import subprocess
import sys

src, include, moddir, cc, fc, work = sys.argv[1:7]
text = open(src).read()
types = []
for name, body in re.findall(r"type, bind\(C\) :: (\w+)\n(.*?)\n\s*end type", text, re.S):
    body = re.sub(r"&\s*\n\s*", " ", body)
    fields = []
    for line in body.splitlines():
        if "::" not in line:
            continue
        decl = line.split("::", 1)[1]
        decl = re.sub(r"\([^()]*\)", "", decl)  # initializers' parentheses
        for item in decl.split(","):
            f = item.split("=")[0].strip()
            if f:
                fields.append(f)
    if fields == ["ptr"]:  # a handle: one pointer in C, a type around one c_ptr here
        fields = []
    types.append((name, fields))
if not types:
    sys.exit("no bind(C) types found in " + src)
os.makedirs(work, exist_ok=True)

c = ["#include <stddef.h>", "#include <stdio.h>", '#include "fsdp.h"', "int main(void) {"]
f = ["program layout", "  use, intrinsic :: iso_c_binding", "  use fsdp_c", "  implicit none"]
for i, (name, fields) in enumerate(types):
    f.append(f"  type({name}), target :: v{i}")
f.append("  integer(c_intptr_t) :: base")
for i, (name, fields) in enumerate(types):
    c.append(f'  printf("{name} size %zu\\n", sizeof({name}));')
    f.append(f"  print '(a, i0)', '{name} size ', c_sizeof(v{i})")
    f.append(f"  base = transfer(c_loc(v{i}), base)")
    for fld in fields:
        c.append(f'  printf("{name}.{fld} %zu\\n", offsetof({name}, {fld}));')
        f.append(f"  print '(a, i0)', '{name}.{fld} ', transfer(c_loc(v{i}%{fld}), base) - base")
c += ["  return 0;", "}"]
f.append("end program")
open(os.path.join(work, "layout.c"), "w").write("\n".join(c) + "\n")
open(os.path.join(work, "layout.f90"), "w").write("\n".join(f) + "\n")


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stdout}{r.stderr}")
    return r.stdout


for tool in (cc, fc):
    if not tool or subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True).returncode:
        print(f"skipped: no compiler {tool!r}")
        sys.exit(77)
run([cc, "-I", include, os.path.join(work, "layout.c"), "-o", os.path.join(work, "layout_c")])
run([fc, "-I", moddir, os.path.join(work, "layout.f90"), "-o", os.path.join(work, "layout_f")])
want = dict(line.rsplit(" ", 1) for line in run([os.path.join(work, "layout_c")]).split("\n") if line)
got = dict(line.strip().rsplit(" ", 1) for line in run([os.path.join(work, "layout_f")]).split("\n")
           if line.strip())
bad = []
for key, value in got.items():
    name = key.split(" ")[0]
    if key.endswith(" size"):
        fields = dict(types)[name]
        # a struct may be a prefix of C's (it grows at its end); a handle is exactly a pointer
        if int(value) > int(want[key]) or (not fields and value != want[key]):
            bad.append(f"{name}: Fortran size {value}, C size {want[key]}")
    elif value != want.get(key):
        bad.append(f"{key}: Fortran offset {value}, C offset {want.get(key)}")
for b in bad:
    print("FAILED:", b)
if bad:
    sys.exit(1)
print(f"fortran layout: {len(types)} types, {len(got) - len(types)} fields at C's offsets")
