"""Reads the timelines test_trace wrote (FSDP_TRACE=<dir>) with Python's own JSON parser and
checks them: one valid Chrome trace per rank, complete ("X") spans of every kind the library
records, unit names (escaped quotes included) and byte counts matching what test_trace did, and
each unit's all-gather inside its unshard-to-wait window, and the checkpoint load's six phases
once each, one after another, naming the file.

usage: check_trace.py <dir> <ranks> <float32 bytes of each unit, padded, in order>..."""
import json
import os
import sys


def main():
    directory, ranks = sys.argv[1], int(sys.argv[2])
    expected = {"embed": int(sys.argv[3]), 'head "quoted"': int(sys.argv[4])}
    failures = []
    for rank in range(ranks):
        path = os.path.join(directory, f"fsdp-trace-rank{rank}.json")
        with open(path) as f:
            trace = json.load(f)
        spans = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
        names = {e["name"] for e in spans}
        for want in ("unshard", "all_gather", "wait", "reshard", "reduce", "reduce_scatter",
                     "clip_grad_norm", "optimizer_step"):
            if want not in names:
                failures.append(f"rank {rank}: no '{want}' span")
        for e in spans:
            if e["pid"] != rank or e["dur"] < 0 or e["ts"] < 0:
                failures.append(f"rank {rank}: bad span {e}")
            unit = e["args"]["unit"]
            if e["name"] in ("unshard", "all_gather", "reshard", "reduce", "reduce_scatter"):
                if unit not in expected:
                    failures.append(f"rank {rank}: span {e['name']} of unknown unit {unit!r}")
                elif e["args"]["bytes"] != expected[unit]:
                    failures.append(f"rank {rank}: {e['name']} of {unit} has "
                                    f"{e['args']['bytes']} bytes, want {expected[unit]}")
        for unit in expected:
            starts = [e["ts"] for e in spans if e["name"] == "unshard" and e["args"]["unit"] == unit]
            gathers = [e for e in spans if e["name"] == "all_gather" and e["args"]["unit"] == unit]
            if len(starts) != 1 or len(gathers) != 1:
                failures.append(f"rank {rank}: {unit}: {len(starts)} unshard and "
                                f"{len(gathers)} all_gather spans, want 1 and 1")
            elif gathers[0]["ts"] < starts[0]:
                failures.append(f"rank {rank}: {unit}: all_gather starts before its unshard")
        phases = [e for e in spans if e["name"].startswith("checkpoint_load_")]
        want = ["checkpoint_load_" + p
                for p in ("prepare", "catalog", "match", "verify", "place", "apply")]
        if [e["name"] for e in sorted(phases, key=lambda e: e["ts"])] != want:
            failures.append(f"rank {rank}: load phases {[e['name'] for e in phases]}, want {want}")
        else:
            for a, b in zip(phases, phases[1:]):
                if b["ts"] < a["ts"] + a["dur"]:
                    failures.append(f"rank {rank}: {b['name']} starts inside {a['name']}")
            for e in phases:
                if not e["args"]["unit"].endswith("/ckpt.h5"):
                    failures.append(f"rank {rank}: {e['name']} names {e['args']['unit']!r}")
    for f in failures:
        print("FAILED", f)
    print(f"check_trace: {ranks} rank file(s), {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
