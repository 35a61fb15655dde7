"""Planned against published: fsdp-plan for every figure of the seeds' published runs
(bench/data/published/runs.json: the FSDP paper's GPT-175B and T5-11B, the AWS note's 175B and 1T)
and a markdown report of planned, published and their ratio, with, for every ratio outside
[0.85, 1.15], the reason argued from the plan's own figures and the references' text.
    published_runs.py [--plan build/src/fsdp-plan] [--data bench/data/published] [--out FILE]
Stdlib only. A plan that lacks a key a figure needs (the planner's activation and step-time model)
stops the report with the key and the command, never a table with holes."""
import argparse
import json
import os
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BAND = (0.85, 1.15)
GIB = float(1 << 30)


class PlanError(Exception):
    pass


class Planner:
    """fsdp-plan --json for one point of a job, each command run once."""

    def __init__(self, binary, data):
        self.binary = binary
        self.data = data
        self.cache = {}

    def command(self, job, model, gpus, batch):
        per_node = job["ranks_per_node"]
        cmd = [self.binary, os.path.join(self.data, model["file"]), "--format", model["format"],
               "--world", str(gpus), "--ranks-per-node", str(per_node),
               "--strategy", job["strategy"], "--param-dtype", job["param_dtype"],
               "--reduce-dtype", job["reduce_dtype"], "--optimizer", job["optimizer"],
               "--batch", str(batch), "--seq", str(job["seq"]), "--machine", job["machine"],
               # The last rank of the first node: its ring neighbour is on the next node, so it
               # sends the most between nodes (doc/planning-model.md, Traffic).
               "--rank", str(min(per_node, gpus) - 1), "--json"]
        if job["activation_checkpointing"]:
            cmd.append("--activation-checkpointing")
        if job["cpu_offload"]:
            cmd.append("--cpu-offload")
        return cmd

    def plan(self, job, model, gpus, batch):
        cmd = self.command(job, model, gpus, batch)
        key = tuple(cmd)
        if key not in self.cache:
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                raise PlanError(f"`{shlex.join(cmd)}` exited with {r.returncode}: "
                                f"{r.stderr.strip()}")
            self.cache[key] = Plan(json.loads(r.stdout), cmd)
        return self.cache[key]


class Plan:
    def __init__(self, doc, cmd):
        self.doc = doc
        self.cmd = cmd

    def __getitem__(self, path):
        """A key of the plan's JSON by its dotted path; missing: a PlanError naming it."""
        v = self.doc
        for part in path.split("."):
            if not isinstance(v, dict) or part not in v:
                raise PlanError(f"fsdp-plan's JSON has no '{path}' (the planner's activation and "
                                f"step-time model, doc/planning.md): `{shlex.join(self.cmd)}`")
            v = v[part]
        return v


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def published_flops(config, seq, batch):
    """FLOPs per GPU per step as the AWS note counts them (Megatron-2's formula, with the
    recomputed forward: runs.json flops_formula), for a decoder config.json; None for a layout."""
    if config is None:
        return None
    l, h, v = config["n_layer"], config["n_embd"], config["vocab_size"]
    return 96.0 * batch * seq * l * h * h * (1 + seq / (6.0 * h) + v / (16.0 * l * h))


def gib(b):
    return f"{b / GIB:.1f} GiB"


def fmt(x):
    if x is None:
        return "not stated"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    return f"{x:.3g}"


class Report:
    def __init__(self, runs, planner, data):
        self.runs = runs
        self.planner = planner
        self.configs = {}
        for name, m in runs["models"].items():
            self.configs[name] = read_json(os.path.join(data, m["file"])) \
                if m["format"] == "hf" else None

    def job(self, point):
        job = self.runs["jobs"][point["job"]]
        return job, self.runs["models"][job["model"]]

    def at(self, point, gpus, batch):
        job, model = self.job(point)
        return self.planner.plan(job, model, gpus, batch)

    def tflops(self, point, gpus, batch):
        """Planned TFLOPS per GPU in the published count of FLOPs (the published count over the
        plan's step time), or the plan's own where the model has no decoder shape."""
        job, _ = self.job(point)
        p = self.at(point, gpus, batch)
        f = published_flops(self.configs[job["model"]], job["seq"], batch)
        step = p["time.step_s"]
        return (f / step / 1e12 if f else p["time.tflops_per_gpu"]), p

    def hbm(self, point):
        return self.job(point)[0]["hbm_gib"] * GIB

    def largest_batch(self, point, limit=4096):
        """The largest batch whose plan fits (fits is monotone in the batch): doubling, then
        bisection."""
        gpus = point["gpus"]
        if not self.at(point, gpus, 1)["fits"]:
            return 0
        lo, hi = 1, 2
        while hi <= limit and self.at(point, gpus, hi)["fits"]:
            lo, hi = hi, hi * 2
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.at(point, gpus, mid)["fits"]:
                lo = mid
            else:
                hi = mid
        return lo

    # ---- the reasons, from the plan's figures -----------------------------------------------

    def memory_story(self, point, p):
        hbm = self.hbm(point)
        m = lambda k: p["memory." + k]  # noqa: E731
        return (f"{gib(m('device_total_bytes'))} of the {gib(hbm)} HBM "
                f"({m('device_total_bytes') / hbm:.0%}): activations {gib(m('activation_bytes'))}, "
                f"peak parameters (shards + unsharded) {gib(m('peak_parameter_bytes'))}, "
                f"peak full gradients {gib(m('peak_full_grad_bytes'))}, gradient shards "
                f"{gib(m('grad_shard_bytes'))}, optimizer state {gib(m('optimizer_state_bytes'))}; "
                f"host {gib(m('host_total_bytes'))}")

    def time_story(self, p):
        t = lambda k: p["time." + k]  # noqa: E731
        return (f"step {t('step_s'):.3g} s = compute {t('compute_s'):.3g} s + exposed "
                f"communication {t('exposed_comm_s'):.3g} s ({t('exposed_comm_s') / t('step_s'):.0%}"
                f"; all-gather {t('all_gather_s'):.3g} s, reduce-scatter "
                f"{t('reduce_scatter_s'):.3g} s)")

    def references(self, point, topics):
        """The job's costs the references name and the plan does not have (runs.json
        jobs[].costs_not_planned), on the given topics."""
        job, _ = self.job(point)
        out = []
        for c in job.get("costs_not_planned", []):
            if c["topic"] in topics:
                quoted = "; ".join(f"{e['source']}:{e['line']}: \"{e['quote']}\""
                                   for e in c["evidence"])
                out.append(f"{c['what']} ({quoted})")
        return out

    def why_tflops(self, point, published, p):
        job, _ = self.job(point)
        f = published_flops(self.configs[job["model"]], job["seq"], point["batch"])
        step = p["time.step_s"]
        frac = p["memory.device_total_bytes"] / self.hbm(point)
        t_pub = f / (published * 1e12) if f else None
        short = f"planned step {step:.3g} s" + (f", published {t_pub:.3g} s" if t_pub else "") \
            + f"; plan's exposed communication {p['time.exposed_comm_s'] / step:.0%} of its step" \
            + f"; device memory {frac:.0%} of HBM"
        detail = [f"plan: {self.time_story(p)}; memory {self.memory_story(point, p)}"]
        if t_pub and t_pub > step:
            topics = {"offload", "efficiency", "network"} | ({"allocator"} if frac >= 0.85 else set())
            detail.append(f"the run took {t_pub - step:.3g} s per step more than the plan; the "
                          "references name where time went that the plan does not model")
            detail += self.references(point, topics)
        elif t_pub:
            detail.append("the plan is slower than the run: its compute rate or its exposed "
                          "communication is pessimistic for this machine")
        return short, detail

    def why_scaling(self, point, small, large):
        e = [p["time.exposed_comm_s"] / p["time.step_s"] for p in (small, large)]
        short = (f"plan's exposed communication {e[0]:.0%} of the step at {point['gpus'][0]} GPUs, "
                 f"{e[1]:.0%} at {point['gpus'][1]}")
        detail = [f"plan at {g} GPUs: {self.time_story(p)}"
                  for g, p in zip(point["gpus"], (small, large))]
        return short, detail + self.references(point, {"network"})

    def why_batch(self, point, planned):
        published = point["published"]
        p = self.at(point, point["gpus"], published)
        short = (f"at batch {published} the plan holds {gib(p['memory.device_total_bytes'])} of "
                 f"{gib(self.hbm(point))}, activations {gib(p['memory.activation_bytes'])}")
        detail = [f"plan at the published batch {published}: {self.memory_story(point, p)}"]
        if planned:
            q = self.at(point, point["gpus"], planned)
            detail.append(f"plan at its largest batch {planned}: {self.memory_story(point, q)}")
        job, _ = self.job(point)
        detail += [f"{k}: {job['assumed'][k]}" for k in ("wrapping", "param_dtype",
                                                          "activation_offload")
                   if k in job["assumed"]]
        return short, detail + self.references(point, {"allocator"})

    # ---- the rows -------------------------------------------------------------------------------

    def row(self, point):
        """planned, ratio (None where there is none), the short reason and the detailed one."""
        metric = point["metric"]
        published = point["published"]
        short, detail = "", []
        outside = lambda r: not BAND[0] <= r <= BAND[1]  # noqa: E731
        if metric == "tflops_per_gpu":
            planned, p = self.tflops(point, point["gpus"], point["batch"])
            ratio = planned / published
            if outside(ratio):
                short, detail = self.why_tflops(point, published, p)
        elif metric == "scaling":
            a, b = point["gpus"]
            ta, pa = self.tflops(point, a, point["batch"])
            tb, pb = self.tflops(point, b, point["batch"])
            planned = tb / ta
            ratio = planned / published if published else None
            if ratio is None or outside(ratio):
                short, detail = self.why_scaling(point, pa, pb)
            if ratio is None:
                short = ("the text gives no figure, only that it is below 1: the plan's is "
                         + ("below 1 too; " if planned < 1 else "NOT below 1; ") + short)
        elif metric == "largest_batch":
            planned = self.largest_batch(point)
            ratio = planned / published
            if outside(ratio):
                short, detail = self.why_batch(point, planned)
        elif metric == "memory_fraction":
            p = self.at(point, point["gpus"], point["batch"])
            planned = p["memory.device_total_bytes"] / self.hbm(point)
            ratio = planned / published
            if point["relation"] == "below":
                short = "below capacity, as published" if planned < 1 else "NOT below capacity"
                detail = [f"plan: {self.memory_story(point, p)}"]
            elif outside(ratio):
                short = (f"the plan holds {planned:.0%} of the HBM; the published figure is what "
                         "the caching allocator reserved")
                detail = [f"plan: {self.memory_story(point, p)}"] + \
                    self.references(point, {"allocator"})
        elif metric == "prefetch_gain":
            p = self.at(point, point["gpus"], point["batch"])
            # Without backward prefetch each of backward's all-gathers (half the step's, the
            # other half being forward's) waits on the critical path: added to the plan's step.
            planned = p["time.all_gather_s"] / 2 / p["time.step_s"]
            ratio = planned / published
            if outside(ratio):
                short = (f"backward's all-gathers {p['time.all_gather_s'] / 2:.3g} s over a "
                         f"{p['time.step_s']:.3g} s planned step")
                detail = ["estimate: without prefetch, backward's all-gathers (half of "
                          "all_gather_s) are exposed; " + self.time_story(p)]
        elif metric == "fits":
            p = self.at(point, point["gpus"], point["batch"])
            planned = bool(p["fits"])
            ratio = None
            short = "agrees" if planned == published else "DIFFERS"
            detail = [f"plan: {self.memory_story(point, p)}"]
        else:
            raise PlanError(f"runs.json: points[{point['id']}].metric = {metric}: unknown")
        return planned, ratio, short, detail

    def write(self, out, plan_label):
        lines = ["# Planned against published: the FSDP paper and the AWS note", "",
                 f"fsdp-plan: {plan_label}. Regenerate with `python3 bench/published_runs.py "
                 f"--plan PATH --out FILE`; the figures, their quotes and the jobs are in "
                 f"bench/data/published/runs.json (what the references do not state is listed "
                 f"there as assumed, and below).", "",
                 "Ratio = planned / published. TFLOPS per GPU are the published count of FLOPs "
                 "(Megatron-2's formula, with the recomputed forward) over the plan's step time, "
                 "so the ratio is published step time / planned step time; T5's, a layout without "
                 "a decoder shape, are the plan's own (only compared as a ratio). Scaling is "
                 "TFLOPS per GPU at the larger GPU count over the smaller. "
                 f"Outside [{BAND[0]}, {BAND[1]}] the last column says why.", "",
                 "| point | GPUs | batch | figure | published | planned | ratio | source | why |",
                 "|---|---|---|---|---:|---:|---:|---|---|"]
        notes = []
        for point in self.runs["points"]:
            planned, ratio, why, detail = self.row(point)
            if detail:
                notes.append((point["id"], detail))
                why += f" (note {len(notes)})"
            e = point["evidence"][0]
            gpus = point["gpus"]
            gpus = "→".join(map(str, gpus)) if isinstance(gpus, list) else str(gpus)
            pub = fmt(point["published"])
            if point["relation"] not in ("about", "equal") and point["published"] is not None:
                pub = f"{point['relation']} {pub}"
            elif point["published"] is None:
                pub = point["relation"]
            lines.append(f"| {point['id']} | {gpus} | {point.get('batch', '')} | "
                         f"{point['metric']} | {pub} | {fmt(planned)} | "
                         f"{fmt(ratio) if ratio is not None else ''} | "
                         f"{e['source']}:{e['line']} | {why} |")
        lines += ["", "## Notes", ""]
        for i, (pid, detail) in enumerate(notes, 1):
            lines.append(f"{i}. {pid}: " + "; ".join(detail) + ".")
        lines += ["", "## The jobs", "",
                  "| job | model | GPU | network | machine preset | per node | dtypes | "
                  "optimizer | seq | checkpointing | CPU offload | activation offload |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for name, j in self.runs["jobs"].items():
            lines.append(f"| {name} | {j['model']} | {j['gpu']} | {j['network']} | "
                         f"{j['machine']} | {j['ranks_per_node']} | {j['param_dtype']}/"
                         f"{j['reduce_dtype']} | {j['optimizer']} | {j['seq']} | "
                         f"{fmt(j['activation_checkpointing'])} | {fmt(j['cpu_offload'])} | "
                         f"{fmt(j['activation_offload'])} |")
        lines += ["", "Assumed where the references are silent:", ""]
        for name, j in self.runs["jobs"].items():
            for k, v in j["assumed"].items():
                lines.append(f"- {name}, {k}: {v}")
        for name, m in self.runs["models"].items():
            lines.append(f"- model {name}: {m['assumed']}")
        lines.append("")
        text = "\n".join(lines)
        if out:
            with open(out, "w", encoding="utf-8") as f:
                f.write(text)
        print(text)


def plan_label(binary):
    """The planner by path and, where it is in a git checkout, its commit."""
    where = os.path.dirname(os.path.abspath(binary))
    r = subprocess.run(["git", "-C", where, "describe", "--always", "--dirty"],
                       capture_output=True, text=True)
    return f"`{binary}`" + (f" built from commit {r.stdout.strip()}" if r.returncode == 0 else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan", default=os.path.join(ROOT, "build", "src", "fsdp-plan"),
                    help="the fsdp-plan program (default: build/src/fsdp-plan)")
    ap.add_argument("--data", default=os.path.join(HERE, "data", "published"),
                    help="runs.json and the model files")
    ap.add_argument("--out", help="also write the report here")
    a = ap.parse_args()
    if not os.access(a.plan, os.X_OK):
        sys.exit(f"published_runs.py: --plan {a.plan}: no such program (build fsdp-plan first)")
    runs = read_json(os.path.join(a.data, "runs.json"))
    try:
        Report(runs, Planner(a.plan, a.data), a.data).write(a.out, plan_label(a.plan))
    except PlanError as e:
        sys.exit(f"published_runs.py: {e}")


if __name__ == "__main__":
    main()
