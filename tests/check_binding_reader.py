"""The binding generator's reader of fsdp.h (bindings/fsdp_api.py) fails, naming the declaration,
on what it cannot bind, instead of leaving a call out: each case below is the real header with
one declaration added, and must stop generate.py with the given words; the real header must read.
Usage: check_binding_reader.py BINDINGS_DIR FSDP_H WORK_DIR"""
import os
import subprocess
import sys

bindings, header, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
text = open(header).read()
end = text.rindex("#ifdef __cplusplus")
cases = [
    ("a type it does not know", "FSDP_EXPORT fsdp_status_t fsdp_new_call(struct timespec* t);",
     "fsdp_new_call"),
    ("an unknown typedef'd type", "FSDP_EXPORT fsdp_status_t fsdp_new_call(float x);",
     "unknown type 'float'"),
    ("an output pointer without @param[out]",
     "/** No directions. */\nFSDP_EXPORT fsdp_status_t fsdp_new_call(fsdp_unit_t unit, int* n);",
     "fsdp_new_call(n): a pointer the call may write through"),
    ("a function pointer argument",
     "FSDP_EXPORT fsdp_status_t fsdp_new_call(int (*fn)(void));", "fsdp_new_call"),
    ("a const pointer to a number (array or value?)",
     "FSDP_EXPORT fsdp_status_t fsdp_new_call(const double* x);", "ARGUMENT_FORMS"),
    ("an output array bound as one value",
     "/** @param[in] n how many\n *  @param[out] x `n` values */\n"
     "FSDP_EXPORT fsdp_status_t fsdp_new_call(int n, double* x);", "reads as many values"),
    ("a declaration it cannot read", "FSDP_EXPORT fsdp_status_t fsdp_new_call(int x[3]);",
     "fsdp_new_call"),
    ("a typedef it cannot read", "typedef union fsdp_u { int a; double b; } fsdp_u_t;",
     "typedef union"),
    ("an initializer not starting with sizeof", "#define FSDP_NEW_INIT \\\n  { 0, 1 }",
     "FSDP_NEW_INIT"),
    ("a call on an MPI_Comm without an _fcomm twin",
     "FSDP_EXPORT fsdp_status_t fsdp_new_call(MPI_Comm comm);", "no _fcomm twin"),
]
failures = 0
generate = [sys.executable, os.path.join(bindings, "generate.py")]
ok = subprocess.run(generate + ["layout-c", header, os.path.join(work, "layout.c")],
                    capture_output=True, text=True)
if ok.returncode != 0:
    print("FAIL: the real header does not read:", ok.stderr)
    sys.exit(1)
for what, decl, words in cases:
    path = os.path.join(work, "fsdp.h")
    open(path, "w").write(text[:end] + decl + "\n\n" + text[end:])
    r = subprocess.run(generate + ["layout-c", path, os.path.join(work, "x.c")],
                       capture_output=True, text=True)
    if r.returncode == 0 or words not in r.stderr:
        failures += 1
        print(f"FAIL: {what}: exit {r.returncode}, stderr: {r.stderr.strip()}")
    else:
        print(f"ok: {what}: {r.stderr.strip()}")
print(f"{'FAILED' if failures else 'PASS'}: {len(cases)} declarations the reader refuses")
sys.exit(1 if failures else 0)
