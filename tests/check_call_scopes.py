#!/usr/bin/env python3
"""Every collective C entry point of a context records its call (Context::begin_call, a
CallScope; or agreed_group_call, which opens one), so debug mode (FSDP_DEBUG_COLLECTIVES) compares
it across ranks and the watchdog names it. The collective entry points are the ones fsdp.h
documents as "Collective" whose first parameter is a library handle (a context, unit, optimizer
or grad scaler); the calls over a bare MPI communicator (checkpoint verify/diff, safetensors) have
no context to record in. Each body in src/capi/*.cpp must open the scope itself or through a
helper of src/capi it calls. EXEMPT lists the ones that cannot, with the reason.
Usage: check_call_scopes.py FSDP_H CAPI_DIR [--pretend-collective NAME] (the check's own test: a
local call claimed collective must be reported)"""
import glob
import os
import re
import sys

EXEMPT = {
    "fsdp_init": "makes the context: no call log exists before it returns",
    "fsdp_finalize": "ends the context: its call log is freed inside the call",
}
HANDLES = ("fsdp_context_t", "fsdp_unit_t", "fsdp_optimizer_t", "fsdp_grad_scaler_t")
SCOPE = re.compile(r"\bbegin_call\(|\bagreed_group_call\(")

args = sys.argv[1:]
pretend = []
while "--pretend-collective" in args:
    i = args.index("--pretend-collective")
    pretend.append(args[i + 1])
    del args[i:i + 2]
header, capi = args[:2]

declared = {}
text = open(header).read()
for m in re.finditer(r"/\*\*((?:(?!\*/).)*)\*/\s*FSDP_EXPORT\s+[\w\s\*]+?\b(fsdp_\w+)\s*\(([^)]*)\)",
                     text, re.S):
    doc, name, params = m.groups()
    first = params.split(",")[0]
    declared[name] = (bool(re.search(r"\bCollective\b", doc)) or name in pretend,
                      any(h in first for h in HANDLES))

bodies = {}
for path in sorted(glob.glob(os.path.join(capi, "*.cpp"))):
    src = open(path).read()
    for m in re.finditer(r"^[\w:<>\*& ]+?\b(\w+)\(([^;{]*?)\)\s*\{", src, re.M | re.S):
        end = src.find("\n}\n", m.end())
        bodies.setdefault(m.group(1), src[m.end():end if end > 0 else len(src)])


def scoped(name, depth=0):
    body = bodies.get(name, "")
    if SCOPE.search(body):
        return True
    if depth == 1:
        return False
    return any(scoped(callee, 1) for callee in set(re.findall(r"\b(\w+)\(", body))
               if callee in bodies and callee != name)


checked, missing = 0, []
for name, (collective, on_handle) in sorted(declared.items()):
    if not collective or not on_handle or name in EXEMPT:
        continue
    checked += 1
    if name not in bodies:
        missing.append(f"{name}: no definition found in {capi}")
    elif not scoped(name):
        missing.append(f"{name}: documented collective, but records no call (begin_call)")
for line in missing:
    print("MISSING:", line)
print(f"{checked} collective entry points of a context checked, {len(missing)} without a "
      f"recorded call; exempt: " + "; ".join(f"{k} ({v})" for k, v in EXEMPT.items()))
sys.exit(1 if missing else 0)
