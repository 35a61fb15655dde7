"""The planner's units for Hugging Face config.json files (plan/model_sources.cpp, printed by
test_plan_inputs) against transformers' own model built from the same config on the meta
device: every parameter's name and shape, in transformers' order inside each unit; each decoder
block one unit, everything else the root unit; a head tied by the config is the embedding itself.
Exits 77 (skipped) without transformers.
Usage: check_plan_hf.py TEST_PLAN_INPUTS CONFIG.json...
"""
import json
import re
import subprocess
import sys

try:
    import torch
    import transformers
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)


def planned(program, config):
    """[(unit index, unit name, param name, shape)] as the planner reads `config`."""
    out = subprocess.run([program, "units", config], check=True, capture_output=True, text=True)
    rows = []
    for line in out.stdout.splitlines():
        kind, *f = line.split("\t")
        if kind != "param":
            raise SystemExit(f"FAIL: {config}: the planner made a tie: {line}")
        shape = tuple(int(x) for x in f[3].split(",")) if f[3] else ()
        rows.append((int(f[0]), f[1], f[2], shape))
    return rows


def reference(config):
    """transformers' parameters [(name, shape)] and whether its head is its embedding."""
    with open(config) as f:
        cfg = transformers.AutoConfig.for_model(**json.load(f))
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    params = [(n, tuple(p.shape)) for n, p in model.named_parameters()]
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    return params, tied


def block_of(name):
    m = re.match(r"^(transformer\.h|model\.layers)\.(\d+)\.", name)
    return f"{m.group(1)}.{m.group(2)}" if m else None


def main():
    program, configs = sys.argv[1], sys.argv[2:]
    fails = 0
    for config in configs:
        rows = planned(program, config)
        params, tied = reference(config)
        with open(config) as f:
            fields = json.load(f)
        # tie_word_embeddings' default: true for GPT-2, false for the Llama family.
        want_tied = fields.get("tie_word_embeddings", fields["model_type"] == "gpt2")
        problems = []
        if tied != want_tied:
            problems.append(f"transformers ties the head: {tied}, the config says {want_tied}")
        # Each unit's parameters are transformers' parameters of that block (or of no block, for
        # the root), in transformers' order.
        units = {}
        for u, unit, name, shape in rows:
            units.setdefault((u, unit), []).append((name, shape))
        for (u, unit), mine in sorted(units.items()):
            theirs = [(n, s) for n, s in params if (block_of(n) or "root") == unit]
            if mine != theirs:
                k = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b),
                         min(len(mine), len(theirs)))
                problems.append(f"unit {u} '{unit}': parameter {k} planned "
                                f"{mine[k] if k < len(mine) else None}, transformers "
                                f"{theirs[k] if k < len(theirs) else None} ({len(mine)} and "
                                f"{len(theirs)} parameters)")
        planned_names = {name for _, _, name, _ in rows}
        missing = [n for n, _ in params if n not in planned_names]
        if missing:
            problems.append(f"not planned: {missing[:5]}")
        total = sum(torch.Size(s).numel() for _, _, _, s in rows)
        theirs_total = sum(torch.Size(s).numel() for _, s in params)
        if total != theirs_total:
            problems.append(f"{total} parameters planned, transformers has {theirs_total}")
        for p in problems:
            print(f"FAIL: {config}: {p}")
        fails += len(problems)
        if not problems:
            print(f"ok: {config}: {len(units)} units, {total:,} parameters as transformers "
                  f"{transformers.__version__} builds them (head tied: {tied})")
    if fails:
        sys.exit(1)
    print("PASS: planned models match transformers")


if __name__ == "__main__":
    main()
