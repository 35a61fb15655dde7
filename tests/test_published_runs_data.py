"""The published runs' data (bench/data/published/runs.json): every job field is either quoted or
listed as assumed, every point has a quote, and each model file reads, through fsdp-plan, as the
parameter count the references state and, for the GPT models, with a decoder block of the AWS
note's "roughly 12H²". With REFERENCE_DIR, instead: every quote is in its reference at the cited
line.
    test_published_runs_data.py FSDP_PLAN DATA_DIR            (the data, from the repository)
    test_published_runs_data.py FSDP_PLAN DATA_DIR REFERENCE_DIR  (the quotes)
The references are not in the repository (the papers' and notes' text); the quotes mode exits 77
(skipped), saying why, when REFERENCE_DIR is empty or lacks one."""
import json
import os
import subprocess
import sys

SKIP = 77
# "175B", "1T", "11B" are rounded: the models read within this of them.
PARAM_TOLERANCE = 0.03
# 12H² leaves out the biases and norms (13H): far below this.
BLOCK_TOLERANCE = 0.001
JOB_FIELDS = ("gpu", "hbm_gib", "network", "machine", "ranks_per_node", "param_dtype",
              "reduce_dtype", "optimizer", "strategy", "seq", "activation_checkpointing",
              "cpu_offload", "activation_offload", "backward_prefetch")


def quotes(node, where):
    """Every {source, line, quote} in runs.json, with its path there."""
    if isinstance(node, dict):
        if "quote" in node:
            yield where, node
        for k, v in node.items():
            yield from quotes(v, f"{where}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from quotes(v, f"{where}[{i}]")


def check_quotes(runs, refdir):
    """Every quote at its reference's cited line; None (skipped) without the references."""
    if not refdir:
        print("SKIP: no reference directory given (configure with FSDP_REFERENCE_DIR=<dir> holding "
              f"{sorted(runs['sources'])})")
        return None
    if not all(os.path.exists(os.path.join(refdir, s)) for s in runs["sources"]):
        print(f"SKIP: the references {sorted(runs['sources'])} are not in {refdir}")
        return None
    refs = {}
    for s in runs["sources"]:
        with open(os.path.join(refdir, s), encoding="utf-8") as f:
            refs[s] = f.read().split("\n")
    failures = []
    for where, q in quotes(runs, "runs"):
        lines = refs.get(q["source"])
        if lines is None:
            failures.append(f"{where}: source {q['source']} is not one of runs.json's sources")
        elif not 1 <= q["line"] <= len(lines) or q["quote"] not in lines[q["line"] - 1]:
            failures.append(f"{where}: not at {q['source']}:{q['line']}: {q['quote']!r}")
    return failures


def check_data(runs, plan, data):
    """Everything that needs no reference text: job fields, points, the models through fsdp-plan."""
    failures = []
    n = sum(1 for _ in quotes(runs, "runs"))
    # Zero quotes would pass every check: the data must quote something.
    if n < len(runs["points"]):
        failures.append(f"only {n} quotes for {len(runs['points'])} points")

    for name, job in runs["jobs"].items():
        supported = {s for e in job["evidence"] for s in e["supports"]} | set(job["assumed"])
        for field in JOB_FIELDS:
            if field not in job:
                failures.append(f"jobs.{name}: no {field}")
            elif field not in supported:
                failures.append(f"jobs.{name}.{field}: neither quoted nor listed as assumed")
    for point in runs["points"]:
        if point["job"] not in runs["jobs"]:
            failures.append(f"points.{point['id']}: unknown job {point['job']}")
        if not point["evidence"]:
            failures.append(f"points.{point['id']}: no quote for the figure")

    # The planner stores every parameter in float32 (doc/planning.md): the unsharded model over 4.
    for name, model in runs["models"].items():
        cmd = [plan, os.path.join(data, model["file"]), "--format", model["format"],
               "--world", "1", "--ranks-per-node", "1", "--json"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            failures.append(f"models.{name}: {' '.join(cmd)}: {r.stderr.strip()}")
            continue
        plan_json = json.loads(r.stdout)
        params = plan_json["memory"]["unsharded_model_bytes"] // 4
        numel = sum(u["numel"] for u in plan_json["units"])
        stated = model["params_stated"]
        print(f"{name}: {params:,} parameters, stated {stated:.3g} ({params / stated - 1:+.2%})")
        if params != numel:
            failures.append(f"models.{name}: unsharded bytes / 4 = {params} but units sum {numel}")
        # The AWS note's decoder block is "roughly 12H²" for its H: the model file's block unit.
        if "block" in model:
            block, h = plan_json["units"][1]["numel"], model["block"]["hidden"]
            print(f"{name}: block unit {block:,} parameters, 12H² = {12 * h * h:,}")
            if abs(block / (12 * h * h) - 1) > BLOCK_TOLERANCE:
                failures.append(f"models.{name}: a block is {block:,} parameters, not about "
                                f"12H² = {12 * h * h:,}")
        if abs(params / stated - 1) > PARAM_TOLERANCE:
            failures.append(f"models.{name}: {params:,} parameters, the references state "
                            f"{stated:.3g} (more than {PARAM_TOLERANCE:.0%} apart)")
    return failures


def main():
    plan, data = sys.argv[1:3]
    refdir = sys.argv[3] if len(sys.argv) > 3 else None
    with open(os.path.join(data, "runs.json"), encoding="utf-8") as f:
        runs = json.load(f)
    n = sum(1 for _ in quotes(runs, "runs"))
    if refdir is None:
        failures, what = check_data(runs, plan, data), f"{len(runs['models'])} models"
    else:
        failures, what = check_quotes(runs, refdir), f"{n} quotes at their lines"
        if failures is None:
            return SKIP
    for f in failures:
        print("FAIL:", f)
    if failures:
        return 1
    print(f"PASS: published runs data ({what})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
