#!/usr/bin/env python3
"""Every collective C entry point of a context records its call (a CallScope), so debug mode
compares it across ranks and the watchdog names it. The entry points are generated from fsdp.h
(bindings/capi_entries.py): the generator records each call bindings/capi_calls.py SCOPES lists,
and refuses a call fsdp.h documents as "Collective" on a handle of a context that is neither
there nor in EXEMPT (with the reason). This check runs the same rule, and checks that the bodies
in src/capi/ open no scope of their own beyond capi_calls.BODY_SCOPES (one owner: the generator).
Usage: check_call_scopes.py FSDP_H CAPI_DIR [--pretend-collective NAME] (the check's own test: a
local call claimed collective must be reported)"""
import glob
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bindings"))
import capi_calls  # noqa: E402
import capi_entries  # noqa: E402
import fsdp_api  # noqa: E402

args = sys.argv[1:]
pretend = []
while "--pretend-collective" in args:
    i = args.index("--pretend-collective")
    pretend.append(args[i + 1])
    del args[i:i + 2]
header, capi = args[:2]

api = fsdp_api.parse(header)
missing = capi_entries.check(api, pretend)
# A body that opens a scope: the function it is in, from the nearest definition above.
for path in sorted(glob.glob(os.path.join(capi, "*.cpp"))):
    src = open(path).read()
    for m in re.finditer(r"\bbegin_call\(", src):
        defs = re.findall(r"^\w[\w:<>\*& ]*?\b(\w+)\(", src[:m.start()], re.M)
        where = defs[-1] if defs else "?"
        if where not in capi_calls.BODY_SCOPES:
            missing.append(f"{where} ({os.path.basename(path)}): opens a CallScope by hand; the "
                           "entry point records it (bindings/capi_calls.py SCOPES)")
checked = sum(1 for f in capi_entries.generated(api)
              if (capi_entries.collective(f) or f.name in pretend)
              and capi_entries.first_handle(f) is not None
              and capi_calls.HANDLES[capi_entries.first_handle(f).ctype.base][2] is not None)
for line in missing:
    print("MISSING:", line)
print(f"{checked} collective entry points of a context checked, {len(missing)} without a "
      f"recorded call; exempt: " + "; ".join(f"{k} ({v})" for k, v in capi_calls.EXEMPT.items()))
sys.exit(1 if missing else 0)
