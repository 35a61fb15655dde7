#!/usr/bin/env python3
"""Every call libfsdp exports reaches both bindings. The exported calls are the library's dynamic
symbols (nm -D) and the names src/fsdp.map lists; for each one:
  - fsdp.h declares it (else no binding can have it);
  - Python: the generated description (_abi.py) has its ctypes prototype, or, for a call taking
    an MPI_Comm, its _fcomm twin's;
  - Fortran: the generated module fsdp_c binds it (bind(C, name=...)), or its _fcomm twin, and
    module fsdp makes it public under its C name (a twin under the name of the call it twins):
    a program that uses each name from module fsdp is compiled to prove it.
Any call missing from a binding fails the check, named with the binding that lacks it.
Usage: check_bindings.py LIBRARY FSDP_MAP FSDP_H BINDINGS_DIR ABI_PY [FSDP_C_F90 FC MOD_DIR WORK]
       [--pretend-exported NAME] [--without NAME] (the check's own tests: a call exported but
       not declared, a call a generator left out of both bindings)"""
import os
import re
import subprocess
import sys
import types

args = sys.argv[1:]
options = {"--pretend-exported": [], "--without": []}
for option, values in options.items():
    while option in args:
        i = args.index(option)
        values.append(args[i + 1])
        del args[i:i + 2]
pretend, without = options["--pretend-exported"], options["--without"]
library, mapfile, header, bindings, abi_path = args[:5]
fortran = args[5:9] if len(args) >= 9 else None
sys.path.insert(0, bindings)
import fsdp_api  # noqa: E402

nm = subprocess.run([os.environ.get("NM", "nm"), "-D", "--defined-only", library], capture_output=True, text=True)
if nm.returncode != 0:
    sys.exit(f"nm -D {library} failed: {nm.stderr}")
exported = {m.group(1) for m in re.finditer(r"\s[TW]\s+(fsdp_\w+)", nm.stdout)}
mapped = set(re.findall(r"^\s*(fsdp_\w+);", open(mapfile).read(), re.M))
problems = [f"{n}: listed in src/fsdp.map but not exported by {library}"
            for n in sorted(mapped - exported)]
exported |= mapped | set(pretend)

api = fsdp_api.parse(header)
abi = types.ModuleType("_abi")
exec(compile(open(abi_path).read(), abi_path, "exec"), abi.__dict__)
for name in without:
    del abi.PROTOTYPES[name]

public_fortran = {}  # name module fsdp must make public: the exported call it stands for
bound_fortran = set()
if fortran:
    fsdp_c, fc, moddir, work = fortran
    bound_fortran = set(re.findall(r"bind\(C, name='(\w+)'\)", open(fsdp_c).read())) - set(without)
for name in sorted(exported):
    f = api.function(name)
    if f is None:
        problems.append(f"{name}: exported but not declared in fsdp.h: no binding has it")
        continue
    via = fsdp_api.twin(api, f) if f.takes_comm else f
    if via is None:
        problems.append(f"{name}: takes an MPI_Comm and has no _fcomm twin: "
                        "the Python and Fortran bindings lack it")
        continue
    if via.name not in abi.PROTOTYPES:
        problems.append(f"{name}: the Python binding lacks it (no prototype for {via.name})")
    if fortran:
        if via.name not in bound_fortran:
            problems.append(f"{name}: the Fortran binding lacks it (module fsdp_c does not "
                            f"bind {via.name})")
        public_fortran[name[:-len("_fcomm")] if name.endswith("_fcomm") else name] = name


def compiles(names, tag):
    src = os.path.join(work, f"uses_{tag}.f90")
    body = ["program uses_every_call", "  use fsdp, only: &"]
    body += [f"    {n}, &" for n in names[:-1]] + [f"    {names[-1]}", "end program"]
    open(src, "w").write("\n".join(body) + "\n")
    r = subprocess.run([fc, "-I", moddir, "-c", src, "-o", os.path.join(work, f"{tag}.o")],
                       capture_output=True, text=True)
    return r.returncode == 0


if fortran and public_fortran:
    os.makedirs(work, exist_ok=True)
    names = sorted(n for n in public_fortran if public_fortran[n] not in without)
    if not compiles(names, "all"):
        for i, n in enumerate(names):
            if not compiles([n], str(i)):
                problems.append(f"{public_fortran[n]}: the Fortran binding lacks it (module fsdp "
                                f"has no public {n})")
        if len(problems) == 0:
            problems.append("module fsdp: a program using every call's name does not compile")
for p in problems:
    print("MISSING:", p)
print(f"{'FAILED' if problems else 'PASS'}: {len(exported)} exported calls against the Python "
      f"binding{' and the Fortran binding' if fortran else ' (no Fortran module built)'}")
sys.exit(1 if problems else 0)
