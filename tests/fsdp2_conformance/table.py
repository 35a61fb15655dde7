"""The conformance table of doc/pytorch.md from the rows the suite writes:

    rm -f /tmp/rows.jsonl
    FSDP_CONFORMANCE_TABLE=/tmp/rows.jsonl ctest -L fsdp2_conformance
    python3 tests/fsdp2_conformance/table.py /tmp/rows.jsonl

prints the count line and one table per FSDP2 test file (rows by FSDP2 test, then behaviour)."""
import json
import sys

# The FSDP2 test files in issue 32's order.
ORDER = ["training", "autograd", "frozen", "mixed_precision", "state_dict", "init", "grad_scaler",
         "clip_grad_norm_", "ignore_params", "shared_params", "memory"]


def main(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    passed = sum(r["lib"] for r in rows)
    dropin = sum(r.get("dropin", False) for r in rows)
    control = sum(r["control"] for r in rows)
    print(f"{len(rows)} behaviours; the control (PyTorch's `fully_shard`) passes {control} of "
          f"{len(rows)}; libfsdp's drop-in `fully_shard` passes {dropin} and differs in "
          f"{len(rows) - dropin}; FullyShard passes {passed} and differs in {len(rows) - passed}.")
    files = {}
    for r in rows:
        files.setdefault(r["source"].split("::")[0], []).append(r)
    rank = {f"test_fully_shard_{k}.py": n for n, k in enumerate(ORDER)}
    for name, group in sorted(files.items(), key=lambda kv: (rank.get(kv[0], len(ORDER)), kv[0])):
        print(f"\n**{name}**\n\n| behaviour | FSDP2 test | libfsdp `fully_shard` | FullyShard "
              "|\n|---|---|---|---|")
        for r in sorted(group, key=lambda r: (r["source"], r["name"])):
            test = r["source"].split("::", 1)[1]
            dropin = ("pass" if r.get("dropin") else
                      f"differs: {r.get('dropin_known') or 'FAILS (unmarked)'}")
            status = "pass" if r["lib"] else f"differs: {r['known'] or 'FAILS (unmarked)'}"
            print(f"| {r['name']} | `{test}` | {dropin} | {status} |")


if __name__ == "__main__":
    main(sys.argv[1])
