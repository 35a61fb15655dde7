#!/usr/bin/env python3
"""The GPU run's verdict (share/scripts/gpu_verdict.py) on runs made up here, each against the
verdict its inputs call for: PASS only when every GPU test passed, NCCL ran between ranks, the
ratios were met and no cudaMalloc was made; a skip, an NCCL run on one GPU, a CUDA runtime error
behind a listed GPU, a missed ratio or a missing benchmark each FAIL and are named."""
import importlib.util
import json
import sys

spec = importlib.util.spec_from_file_location("gpu_verdict", sys.argv[1])
v = importlib.util.module_from_spec(spec)
spec.loader.exec_module(v)

OK_PROBE = "devices=2 driver=13000 runtime=13000 error=none"


def ctest(results):
    out = ["Test project /x/build"]
    for i, (name, r) in enumerate(results):
        mark = "" if r == "Passed" else "***"
        out.append(f"{i + 1:>2}/{len(results)} Test #{300 + i}: {name} .......{mark}{r}    0.50 sec")
    skipped = sum(r == "Skipped" for _, r in results)
    out.append(f"\n100% tests passed, 0 tests failed out of {len(results)}")  # ctest counts skips
    if skipped:
        out.append("The following tests did not run:")
    return "\n".join(out)


GOOD_TESTS = [("test_gpu_training.auto.np2", "Passed"), ("test_gpu_training.nccl.np1", "Passed"),
              ("test_gpu_training.nccl.np2", "Passed"), ("test_gpu_races.mpi.np2", "Passed")]
GOOD_BENCH = [json.dumps({"MiB": 4, "ratio": 1.01, "ratio_rs": 1.03}),
              json.dumps({"cudaMalloc_per_step": 0.0}),
              json.dumps({"copy_GBps": 2500, "cast_fraction_of_copy_bw": 0.9,
                          "adamw_fraction_of_copy_bw": 0.95})]

failures = 0


def expect(label, args, passed, needles):
    global failures
    lines, ok = v.verdict(*args)
    text = "\n".join(lines)
    missing = [n for n in needles if n not in text]
    if ok != passed or missing or (passed != text.endswith("gpu-check: PASS")):
        failures += 1
        print(f"FAILED {label}: passed={ok} (want {passed}), missing {missing}\n{text}\n")


expect("everything ran and met its target", (OK_PROBE, 2, ctest(GOOD_TESTS), GOOD_BENCH), True,
       ["NCCL: exercised between ranks", "gpu-check: PASS"])
one_gpu = [("test_gpu_training.auto.np2", "Passed"), ("test_gpu_training.nccl.np1", "Passed"),
           ("test_gpu_training.nccl.np2", "Skipped")]
expect("one GPU: NCCL never ran between ranks (np1 passes take no collective)",
       ("devices=1 driver=13000 runtime=13000 error=none", 1, ctest(one_gpu),
        [json.dumps({"nccl": "not measured: needs >= 2 ranks on >= 2 GPUs"})] + GOOD_BENCH[1:]),
       False, ["NCCL not exercised: needs >= 2 GPUs", "test_gpu_training.nccl.np2", "FAIL"])
expect("one GPU: the 2-GPU fault tests skip, named, and only NCCL's absence fails",
       ("devices=1 driver=13000 runtime=13000 error=none", 1,
        ctest(one_gpu + [("test_gpu_faults.abort.np2", "Skipped"),
                         ("test_gpu_training.hybrid.np4", "Passed")]),
        [json.dumps({"nccl": "not measured"})] + GOOD_BENCH[1:]),
       False, ["needs >= 2 GPUs, skipped: test_gpu_faults.abort.np2 test_gpu_training.nccl.np2",
               "gpu-check: FAIL: NCCL not exercised: needs >= 2 GPUs"])
expect("two GPUs: a fault test that skips is a failure",
       (OK_PROBE, 2, ctest(GOOD_TESTS + [("test_gpu_faults.timeout.np2", "Skipped")]), GOOD_BENCH),
       False, ["tests skipped while a GPU is visible: test_gpu_faults.timeout.np2"])
expect("a skip while a GPU is visible is no pass",
       (OK_PROBE, 2, ctest(GOOD_TESTS + [("test_gpu_races.auto.np2", "Skipped")]), GOOD_BENCH),
       False, ["tests skipped while a GPU is visible: test_gpu_races.auto.np2"])
expect("a driver too old for the runtime is an error, not 'no device'",
       ("devices=0 driver=12020 runtime=13000 error=cudaErrorInsufficientDriver", 1,
        ctest([("test_gpu_training.auto.np1", "Skipped")]), []),
       False, ["CUDA runtime: cudaErrorInsufficientDriver (nvidia-smi lists 1 GPU(s))",
               "the CUDA runtime failed: cudaErrorInsufficientDriver"])
expect("a failed test", (OK_PROBE, 2, ctest(GOOD_TESTS + [("test_gpu_training.mpi.np3", "Failed")]),
                         GOOD_BENCH), False, ["tests failed: test_gpu_training.mpi.np3"])
expect("a timeout", (OK_PROBE, 2, ctest(GOOD_TESTS + [("test_gpu_races.nccl.np2", "Timeout")]),
                     GOOD_BENCH), False, ["tests failed: test_gpu_races.nccl.np2"])
expect("a missed collective ratio",
       (OK_PROBE, 2, ctest(GOOD_TESTS),
        [json.dumps({"MiB": 4, "ratio": 1.2, "ratio_rs": 1.0})] + GOOD_BENCH[1:]),
       False, ["MISSED", "collective ratio missed at 4 MiB"])
expect("a missed bandwidth fraction",
       (OK_PROBE, 2, ctest(GOOD_TESTS),
        GOOD_BENCH[:2] + [json.dumps({"copy_GBps": 2500, "cast_fraction_of_copy_bw": 0.5,
                                      "adamw_fraction_of_copy_bw": 0.95})]),
       False, ["kernel bandwidth fraction missed"])
expect("cudaMalloc in steady state",
       (OK_PROBE, 2, ctest(GOOD_TESTS),
        [GOOD_BENCH[0], json.dumps({"cudaMalloc_per_step": 1.0}), GOOD_BENCH[2]]),
       False, ["steady-state steps call cudaMalloc"])
expect("the benchmark did not run", (OK_PROBE, 2, ctest(GOOD_TESTS), []), False,
       ["bench_gpu did not run"])
expect("no test ran", (OK_PROBE, 2, "", GOOD_BENCH), False, ["no GPU test ran"])
print(f"{'FAIL' if failures else 'PASS'}: gpu verdict, {failures} case(s) wrong")
sys.exit(1 if failures else 0)
