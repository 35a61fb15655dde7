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
from pychecks import check, finish

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
    # HFSDP and hpZ reach the planner through init's keywords as through fsdp-plan's options.
    (gpt2, "hf", 8, 2, 3, dict(strategy="hybrid", sharding_factor=2, hfsdp=True),
     ["--strategy", "hybrid", "--factor", "2", "--hfsdp"]),
    (gpt2, "hf", 8, 2, 1, dict(hpz=True, param_dtype="bfloat16"),
     ["--hpz", "--param-dtype", "bfloat16"]),
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

hf = libfsdp.plan(gpt2, "hf", 8, 2, strategy="hybrid", sharding_factor=2, hfsdp=True,
                  transport="mpi")
check(hf["traffic"]["replica_all_gather_calls"] > 0 and hf["traffic"]["all_reduce_calls"] == 0,
      f"HFSDP's traffic {hf['traffic']}")
hz = libfsdp.plan(gpt2, "hf", 8, 2, hpz=True, transport="mpi")
check(hz["traffic"]["node_all_gather_calls"] > 0 and hz["memory"]["peak_secondary_bytes"] > 0,
      f"hpZ's traffic {hz['traffic']}")

# GPT-2 small: 124,439,808 parameters (the tied head counted once), in bytes of float32 unsharded.
got = libfsdp.plan(gpt2, "hf", 1, transport="mpi")
check(got["memory"]["unsharded_model_bytes"] == 4 * 124439808,
      f"gpt2 unsharded bytes {got['memory']['unsharded_model_bytes']} != 4 * 124439808")

# Activations, step time and sweep against fsdp-plan for the same job (both over fsdp_plan_*),
# and the activations of GPT-2 small in bfloat16 from Korthikanti et al.'s closed form.
got = libfsdp.plan(gpt2, "hf", 16, 8, param_dtype="bfloat16", batch_size=2, sequence_length=512,
                   machine="a100-80gb-roce", memory_space="cuda", transport="nccl")
cli = subprocess.run([tool, gpt2, "--world", "16", "--ranks-per-node", "8", "--param-dtype",
                      "bfloat16", "--batch", "2", "--seq", "512", "--machine", "a100-80gb-roce",
                      "--json"], capture_output=True, text=True)
check(cli.returncode == 0, f"fsdp-plan --machine: {cli.stderr.strip()}")
if cli.returncode == 0:
    want = json.loads(cli.stdout)
    for key in ("memory", "traffic", "time", "fits"):
        check(got.get(key) == want.get(key), f"machine: {key}: {got.get(key)} != {want.get(key)}")
s, b, h, a = 512, 2, 768, 12
check(got["memory"]["activation_bytes"] == 12 * s * b * h * (34 + 5 * a * s // h),
      f"activation bytes {got['memory']['activation_bytes']}")
check(got["fits"] is True and got["time"]["step_s"] > got["time"]["compute_s"] > 0,
      f"time {got['time']}")
m = libfsdp.plan_machine("h100-80gb-efa")
check(m["peak_flops_16bit"] == 989e12 and m["hbm_bytes"] == 80 << 30, f"h100 preset {m}")
m["hbm_bytes"] = 1 << 30
got = libfsdp.plan(gpt2, "hf", 16, 8, batch_size=8, machine=m, memory_space="cuda",
                   transport="nccl")
check(got["fits"] is False, "GPT-2 at batch 8 in float32 does not fit 1 GiB")
configs = libfsdp.plan_sweep(gpt2, "hf", 16, "a100-40gb-efa", 8, sequence_length=1024,
                             memory_space="cuda", transport="nccl")
cli = subprocess.run([tool, gpt2, "--world", "16", "--ranks-per-node", "8", "--seq", "1024",
                      "--machine", "a100-40gb-efa", "--sweep", "--json"],
                     capture_output=True, text=True)
check(cli.returncode == 0 and json.loads(cli.stdout)["configurations"] == configs,
      "plan_sweep == fsdp-plan --sweep --json")
check(configs and all(c["memory"]["device_total_bytes"] <= 40 << 30 for c in configs),
      "the sweep's configurations fit")
check(libfsdp.plan_sweep(gpt2, "hf", 16, "a100-40gb-efa", 8, budget_bytes=1000,
                         memory_space="cuda", transport="nccl") == [], "nothing fits 1000 bytes")


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

refused("unknown preset", lambda: libfsdp.plan(gpt2, "hf", 2, machine="tpu"), bad_arg,
        ["fsdp_plan_machine_preset", "'tpu'"])
refused("machine field missing", lambda: libfsdp.plan(gpt2, "hf", 2, machine={"hbm_bytes": 1}),
        bad_arg, ["machine", "missing"])
zero = libfsdp.plan_machine("a100-40gb-efa")
zero["intra_node_bandwidth"] = 0
refused("zero bandwidth", lambda: libfsdp.plan(gpt2, "hf", 2, machine=zero), bad_arg,
        ["fsdp_plan_describe_on", "machine->intra_node_bandwidth"])
refused("batch 0", lambda: libfsdp.plan(gpt2, "hf", 2, batch_size=0), bad_arg,
        ["job->batch_size"])
refused("negative activation bytes",
        lambda: libfsdp.plan(gpt2, "hf", 2, activation_bytes_per_layer=-1), bad_arg,
        ["job->activation_bytes_per_layer"])
refused("sequence type", lambda: libfsdp.plan(gpt2, "hf", 2, sequence_length=1.5), bad_arg,
        ["sequence_length"])
refused("budget", lambda: libfsdp.plan_sweep(gpt2, "hf", 2, "a100-40gb-efa", budget_bytes=-1),
        bad_arg, ["budget_bytes"])

finish("libfsdp.plan")
