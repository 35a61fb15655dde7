"""libfsdp.plan (the planner asked from Python, fsdp_plan_*) against the fsdp-plan command line,
the other front end over the same C calls: for several jobs, the same memory, traffic and units as
`fsdp-plan --json` with the same options, so every keyword reaches the job it names; the
parameter count of GPT-2 small from its published value; bad input refused naming the argument.
Arguments: the fsdp-plan program, the folder of tests/data/plan. Needs no MPI."""
import json
import os
import subprocess
import sys

import libfsdp

failures = 0


def check(ok, what):
    global failures
    if not ok:
        failures += 1
        print("FAIL:", what)


tool, data = sys.argv[1], sys.argv[2]
gpt2 = os.path.join(data, "gpt2.json")
layout = os.path.join(data, "layout.json")

# (model, format, world, ranks per node, rank, plan's keywords, the same job as fsdp-plan options)
jobs = [
    (gpt2, "hf", 16, 8, 7, dict(param_dtype="bfloat16"),
     ["--param-dtype", "bfloat16"]),
    (gpt2, "hf", 8, 4, 5, dict(strategy="hybrid", sharding_factor=4, reduce_dtype="float32",
                               param_dtype="bfloat16", max_unsharded=1),
     ["--strategy", "hybrid", "--factor", "4", "--param-dtype", "bfloat16",
      "--reduce-dtype", "float32", "--max-unsharded", "1"]),
    (layout, "layout", 3, 3, 2, dict(optimizer="sgd", hyperparams={"momentum": 0.9}),
     ["--optimizer", "sgd", "--momentum", "0.9"]),
    (layout, "layout", 4, 2, 1, dict(hyperparams={"amsgrad": 1}), ["--amsgrad"]),
    (layout, "layout", 2, 0, 0, dict(optimizer=None, strategy="none"),
     ["--optimizer", "none", "--strategy", "none"]),
]
for model, fmt, world, per_node, rank, kwargs, options in jobs:
    what = f"{os.path.basename(model)} world {world} {options}"
    got = libfsdp.plan(model, fmt, world, per_node, rank=rank, transport="mpi", **kwargs)
    cli = subprocess.run([tool, model, "--format", fmt, "--world", str(world), "--ranks-per-node",
                          str(per_node or world), "--rank", str(rank), "--json", *options],
                         capture_output=True, text=True)
    check(cli.returncode == 0, f"{what}: fsdp-plan exit {cli.returncode}: {cli.stderr.strip()}")
    if cli.returncode == 0:
        want = json.loads(cli.stdout)
        for key in ("memory", "traffic", "units", "sharding_factor", "replicas"):
            check(got.get(key) == want.get(key),
                  f"{what}: {key}: plan {got.get(key)} != fsdp-plan {want.get(key)}")

# GPT-2 small: 124,439,808 parameters (the tied head counted once), in bytes of float32 unsharded.
got = libfsdp.plan(gpt2, "hf", 1, transport="mpi")
check(got["memory"]["unsharded_model_bytes"] == 4 * 124439808,
      f"gpt2 unsharded bytes {got['memory']['unsharded_model_bytes']} != 4 * 124439808")


def refused(what, fn, status, words):
    try:
        fn()
    except libfsdp.Error as e:
        text = str(e)
        check(e.status_name == status and all(w in text for w in words),
              f"{what}: status {e.status_name} message {text!r}")
        return
    check(False, f"{what}: not refused")


bad_arg = "FSDP_ERR_INVALID_ARGUMENT"
refused("format", lambda: libfsdp.plan(gpt2, "yaml", 2), bad_arg, ["format", "yaml"])
refused("world_size type", lambda: libfsdp.plan(gpt2, "hf", 2.0), bad_arg,
        ["world_size"])
refused("ranks_per_node", lambda: libfsdp.plan(gpt2, "hf", 16, 3), bad_arg,
        ["ranks_per_node"])
refused("sharding_factor", lambda: libfsdp.plan(gpt2, "hf", 8, strategy="hybrid",
                                                sharding_factor=3, transport="mpi"),
        bad_arg, ["sharding_factor"])
refused("hyperparam", lambda: libfsdp.plan(gpt2, "hf", 2, hyperparams={"gamma": 1}),
        bad_arg, ["gamma"])
refused("hyperparams without optimizer",
        lambda: libfsdp.plan(gpt2, "hf", 2, optimizer=None, hyperparams={"lr": 1}),
        bad_arg, ["hyperparams"])
refused("bad architecture", lambda: libfsdp.plan(os.path.join(data, "bad-arch.json"), "hf", 2),
        "FSDP_ERR_UNSUPPORTED", ["bad-arch.json"])
refused("missing file", lambda: libfsdp.plan(os.path.join(data, "nothing.json"), "hf", 2),
        "FSDP_ERR_IO", ["nothing.json"])

print("PASS: libfsdp.plan" if failures == 0 else f"{failures} failure(s)")
sys.exit(1 if failures else 0)
