#!/usr/bin/env python3
"""Writes fsdp_constants.inc, the constants of module fsdp_c, from include/fsdp.h at build time
(fortran/CMakeLists.txt): the version, every enumerator of the header's enums (but the *_COUNT
sentinels) as integer(c_int) parameters, FSDP_MAX_NDIM and FSDP_CONFIG_MAGIC. Nothing is copied
by hand, so the Fortran binding cannot drift from the header.
Usage: generate_constants.py include/fsdp.h OUTPUT"""
import re
import sys

header, output = sys.argv[1], sys.argv[2]
text = open(header).read()
code = re.sub(r"/\*.*?\*/", "", text, flags=re.S)  # comments
code = re.sub(r"//[^\n]*", "", code)


def define(name):
    m = re.search(r"^#define " + name + r"\s+(\S+)", code, re.M)
    if not m:
        sys.exit(f"generate_constants.py: {name} not found in {header}")
    return m.group(1)


out = ["! Generated from include/fsdp.h by fortran/generate_constants.py: do not edit.",
       "  ! ---- Versions (the header's; module fsdp checks them against the library's at "
       "fsdp_init)"]
major, minor, patch = (int(define(f"FSDP_VERSION_{p}")) for p in ("MAJOR", "MINOR", "PATCH"))
out.append(f"  integer(c_int), parameter :: FSDP_VERSION_MAJOR = {major}")
out.append(f"  integer(c_int), parameter :: FSDP_VERSION_MINOR = {minor}")
out.append(f"  integer(c_int), parameter :: FSDP_VERSION_PATCH = {patch}")
out.append("  integer(c_int32_t), parameter :: FSDP_VERSION = FSDP_VERSION_MAJOR * 10000 &")
out.append("                                                  + FSDP_VERSION_MINOR * 100 "
           "+ FSDP_VERSION_PATCH")
enums = re.findall(r"typedef enum (\w+)\s*\{(.*?)\}\s*(\w+)\s*;", code, re.S)
if not enums:
    sys.exit(f"generate_constants.py: no enums in {header}")
for _, body, typename in enums:
    out.append(f"  ! ---- {typename}")
    value = -1
    for item in (i.strip() for i in body.split(",")):
        if not item:
            continue
        m = re.fullmatch(r"(FSDP_\w+)(?:\s*=\s*(-?\d+))?", item)
        if not m:
            sys.exit(f"generate_constants.py: cannot read enumerator '{item}' of {typename}")
        value = int(m.group(2)) if m.group(2) is not None else value + 1
        if not m.group(1).endswith("_COUNT"):
            out.append(f"  integer(c_int), parameter :: {m.group(1)} = {value}")
out.append(f"  integer(c_int), parameter :: FSDP_MAX_NDIM = {int(define('FSDP_MAX_NDIM'))}")
magic = int(define("FSDP_CONFIG_MAGIC").rstrip("uUlL"), 0)
out.append(f"  integer(c_int32_t), parameter :: FSDP_CONFIG_MAGIC = int(z'{magic:08X}', c_int32_t)")
open(output, "w").write("\n".join(out) + "\n")
