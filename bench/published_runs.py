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

    def command(self, job, model, gpus, batch, prefetch=None, checkpointing=None):
        per_node = job["ranks_per_node"]
        cmd = [self.binary, os.path.join(self.data, model["file"]), "--format", model["format"],
               "--world", str(gpus), "--ranks-per-node", str(per_node),
               "--strategy", job["strategy"], "--param-dtype", job["param_dtype"],
               "--reduce-dtype", job["reduce_dtype"], "--optimizer", job["optimizer"],
               "--batch", str(batch), "--seq", str(job["seq"]), "--machine", job["machine"],
               # The last rank of the first node: its ring neighbour is on the next node, so it
               # sends the most between nodes (doc/planning-model.md, Traffic).
               "--rank", str(min(per_node, gpus) - 1), "--json"]
        if job["activation_checkpointing"] if checkpointing is None else checkpointing:
            cmd.append("--activation-checkpointing")
        if job["cpu_offload"]:
            cmd.append("--cpu-offload")
        if job["backward_prefetch"] if prefetch is None else prefetch:
            cmd.append("--prefetch")
        return cmd

    def plan(self, job, model, gpus, batch, prefetch=None, checkpointing=None):
        cmd = self.command(job, model, gpus, batch, prefetch, checkpointing)
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
                raise PlanError(f"fsdp-plan's JSON has no '{path}', which the report needs "
                                f"(doc/planning.md: --machine, --batch): `{shlex.join(self.cmd)}`")
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

    def at(self, point, gpus, batch, prefetch=None, checkpointing=None):
        job, model = self.job(point)
        return self.planner.plan(job, model, gpus, batch, prefetch, checkpointing)

    def tflops(self, point, gpus, batch):
        """Planned TFLOPS per GPU in the published count of FLOPs (the published count over the
        plan's step time), or the plan's own where the model has no decoder shape."""
        job, _ = self.job(point)
        p = self.at(point, gpus, batch)
        f = published_flops(self.configs[job["model"]], job["seq"], batch)
        step = p["time.step_s"]
        return (f / step / 1e12 if f else p["time.tflops_per_gpu"]), p

    def published_tflops(self, point):
        """The TFLOPS per GPU the references give for the point's job, GPU count and batch."""
        for q in self.runs["points"]:
            if (q["metric"] == "tflops_per_gpu" and q["job"] == point["job"]
                    and q["gpus"] == point["gpus"] and q["batch"] == point["batch"]):
                return q["published"]
        for q in self.runs["points"]:  # "more than 173" holds from 128 to 512 GPUs
            if q["metric"] == "tflops_per_gpu" and q["job"] == point["job"] \
                    and q["batch"] == point["batch"]:
                return q["published"]
        return None

    def hbm(self, point):
        return self.job(point)[0]["hbm_gib"] * GIB

    def largest_batch(self, point, fits, limit=4096):
        """The largest batch for which fits(batch) (monotone in the batch): doubling, then
        bisection; 0 when not even 1 fits."""
        if not fits(1):
            return 0
        lo, hi = 1, 2
        while hi <= limit and fits(hi):
            lo, hi = hi, hi * 2
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fits(mid):
                lo = mid
            else:
                hi = mid
        return lo

    def plan_fits(self, point):
        return lambda batch: bool(self.at(point, point["gpus"], batch)["fits"])

    def as_run_fits(self, point):
        return lambda batch: self.as_run(point, batch)[0] <= self.hbm(point)

    def as_run(self, point, batch):
        """The plan's device bytes with the job as the reference ran it where the planner cannot
        express it (runs.json jobs[].as_run), computed from the plan's own figures: the bytes and
        what each change removed."""
        job, _ = self.job(point)
        p = self.at(point, point["gpus"], batch)
        m = lambda k: p["memory." + k]  # noqa: E731
        device = m("device_total_bytes")
        removed = []
        for change in job["as_run"]:
            kind = change["kind"]
            if kind == "storage_fraction":
                if job["cpu_offload"]:  # the shards and their state are in host memory
                    continue
                cut = (m("shard_bytes") + m("grad_shard_bytes") + m("optimizer_state_bytes")) \
                    * (1 - change["factor"])
            elif kind == "unit_fraction":
                cut = (m("peak_unsharded_bytes") + m("peak_full_grad_bytes")) * (1 - change["factor"])
            elif kind == "activation_offload":
                # What stays is one block's activations, recomputed: the plan without
                # checkpointing holds every block's, so one block's is that over the blocks.
                whole = self.at(point, point["gpus"], batch, checkpointing=False)
                one_block = whole["memory.activation_bytes"] / self.configs[job["model"]]["n_layer"]
                cut = m("activation_bytes") - one_block
            else:
                raise PlanError(f"runs.json: jobs[{point['job']}].as_run kind {kind}: unknown")
            device -= cut
            removed.append(f"{kind} -{gib(cut)}")
        return device, removed

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
                f"{t('reduce_scatter_s'):.3g} s"
                + (f", CPU offload copies {p.doc['time']['offload_copy_s']:.3g} s"
                   if p.doc["time"].get("offload_copy_s") else "") + ")")

    def references(self, point, topics):
        """The job's costs the references name and the plan does not have (runs.json
        jobs[].costs_not_planned), on the given topics."""
        job, _ = self.job(point)
        out = []
        for c in job.get("costs_not_planned", []):
            if c["topic"] in topics:
                out.append(f"{c['what']} ({self.quoted(c)})")
        return out

    @staticmethod
    def quoted(item):
        return "; ".join(f"{e['source']}:{e['line']}: \"{e['quote']}\"" for e in item["evidence"])

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
            detail += self.slower_than_run(point, p, t_pub)
        return short, detail

    def slower_than_run(self, point, p, t_pub):
        """Why the plan's step is longer than the run's: which of its terms alone already exceeds
        what the run took."""
        out = []
        comm = p["time.all_gather_s"] + p["time.reduce_scatter_s"] + p["time.all_reduce_s"]
        inter = p["traffic.inter_node_bytes"]
        if inter and comm > 0:
            planned_bw, needed_bw = inter / comm, inter / t_pub
            if needed_bw > planned_bw:
                out.append(
                    f"this rank sends {inter / 1e12:.3g} TB to the next node per step; the run "
                    f"did it within its {t_pub:.3g} s step, at {needed_bw / 1e9:.3g} GB/s or more, "
                    f"where the plan's collectives move it at {planned_bw / 1e9:.3g} GB/s "
                    f"({comm:.3g} s): the run's collectives crossed between nodes "
                    f"{needed_bw / planned_bw:.3g}x faster than the plan's one-GPU share of the "
                    "node's network allows")
        if p["time.compute_s"] > t_pub:
            out.append(f"the plan's computation alone ({p['time.compute_s']:.3g} s, at its machine's "
                       f"assumed efficiency) is longer than the run's whole step: the run computed "
                       f"{p['time.compute_s'] / t_pub:.3g}x faster or more")
            out += self.references(point, {"efficiency"})
        if not out:
            out.append("the plan's exposed communication makes its step longer than the run's")
        return out

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
        if job.get("as_run"):
            as_run = self.largest_batch(point, self.as_run_fits(point))
            device, removed = self.as_run(point, published)
            short += (f"; as the job ran ({', '.join(c['kind'] for c in job['as_run'])}, from the "
                      f"plan's figures) it holds {gib(device)} at batch {published}, largest "
                      f"batch {as_run}")
            detail.append(f"as the job ran, at batch {published}: {gib(device)} "
                          f"({', '.join(removed)})")
            detail += [f"{c['kind']}: {c['what']} ({self.quoted(c)})" for c in job["as_run"]]
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
            planned = self.largest_batch(point, self.plan_fits(point))
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
            # The same job planned with and without prefetch: the gain is the step time saved.
            on = self.at(point, point["gpus"], point["batch"], prefetch=True)
            off = self.at(point, point["gpus"], point["batch"], prefetch=False)
            planned = off["time.step_s"] / on["time.step_s"] - 1
            ratio = planned / published
            if outside(ratio):
                # fsdp-plan's --prefetch is forward and backward; the references toggled backward
                # only, with forward's all-gathers overlapped either way (runs.json baseline).
                # Forward's all-gathers are half the step's (the same units, the same bytes).
                backward = (off["time.step_s"] - on["time.step_s"]) / 2 / on["time.step_s"]
                short = (f"plan's exposed communication {off['time.exposed_comm_s']:.3g} s "
                         f"without prefetch, {on['time.exposed_comm_s']:.3g} s with it; the plan "
                         f"turns off forward's prefetch too: backward's half is about "
                         f"{backward:.2f}")
                detail = [f"plan without prefetch: {self.time_story(off)}",
                          f"with prefetch: {self.time_story(on)}",
                          f"{point['baseline']['what']} ({self.quoted(point['baseline'])})"]
                job, _ = self.job(point)
                f = published_flops(self.configs[job["model"]], job["seq"], point["batch"])
                tflops = self.published_tflops(point)
                t_pub = f / (1e12 * tflops) if f and tflops else None
                if t_pub and t_pub < on["time.step_s"]:
                    detail.append(f"and the run's step ({t_pub:.3g} s) is shorter than the plan's "
                                  f"with prefetch ({on['time.step_s']:.3g} s): the run had less "
                                  "exposed communication to hide")
        elif metric == "fits":
            p = self.at(point, point["gpus"], point["batch"])
            planned = bool(p["fits"])
            ratio = None
            short = "agrees" if planned == published else "DIFFERS"
            detail = [f"plan: {self.memory_story(point, p)}"]
            job, _ = self.job(point)
            if job.get("as_run"):
                device, removed = self.as_run(point, point["batch"])
                fits = device <= self.hbm(point)
                short += (f"; as the job ran (from the plan's figures) {gib(device)}: "
                          + ("fits, agrees" if fits == published else "does not fit"))
                detail.append(f"as the job ran: {gib(device)} ({', '.join(removed)})")
        else:
            raise PlanError(f"runs.json: points[{point['id']}].metric = {metric}: unknown")
        return planned, ratio, short, detail

    def as_run_row(self, point):
        """For a job the planner cannot express as it ran (runs.json jobs[].as_run): the figure
        from the plan's own numbers with the run's setup applied; None elsewhere."""
        job, _ = self.job(point)
        if not job.get("as_run") or point["metric"] not in ("largest_batch", "fits"):
            return None
        how = "the plan's figures with " + ", ".join(c["kind"] for c in job["as_run"])
        if point["metric"] == "largest_batch":
            value = self.largest_batch(point, self.as_run_fits(point))
            return value, value / point["published"], how
        value = self.as_run(point, point["batch"])[0] <= self.hbm(point)
        return value, None, how + (": agrees" if value == point["published"] else ": DIFFERS")

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
            extra = self.as_run_row(point)
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
            if extra:
                value, ratio, why = extra
                lines.append(f"| {point['id']}, as run | {gpus} | {point.get('batch', '')} | "
                             f"{point['metric']} | {pub} | {fmt(value)} | "
                             f"{fmt(ratio) if ratio is not None else ''} | "
                             f"{e['source']}:{e['line']} | {why} (note {len(notes)}) |")
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
    return f"`{binary}`" + (f", its checkout at commit {r.stdout.strip()}" if r.returncode == 0 else "")


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
