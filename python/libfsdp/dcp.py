"""Conversion between PyTorch Distributed Checkpoint (torch.distributed.checkpoint, "DCP")
directories and libfsdp checkpoints, model and optimizer state, through PyTorch's own DCP reader
and writer and libfsdp's own checkpoint save and load.

    mpiexec -n N python -m libfsdp.dcp to-libfsdp DCP_DIR OUT.h5 [--group-patterns P1,P2...]
    python -m libfsdp.dcp to-dcp IN.h5 DCP_DIR
    (also as fsdp-ckpt spells its conversions: import DCP_DIR --to OUT.h5, export IN.h5 --to DIR)

The DCP side is what FSDP2 writes with
`dcp.save({"model": model_sd, "optim": optim_sd})`, where model_sd, optim_sd =
`torch.distributed.checkpoint.state_dict.get_state_dict(model, optimizer)`: keys
`model.<fqn>`, `optim.state.<fqn>.<exp_avg|exp_avg_sq|step|momentum_buffer>` and
`optim.param_groups.<g>.<field>` (the top-level names are --model-key and --optim-key). Parameters
keep their FQNs as libfsdp parameter names. AdamW (exp_avg, exp_avg_sq, step) and SGD
(momentum_buffer) map to libfsdp's AdamW and SGD, which compute PyTorch's updates.

to-libfsdp runs on any number of ranks: each keeps 1/N of the model and optimizer state while the
library writes the checkpoint (every rank reads the DCP tensors of one unit at a time). Before
anything is created it checks that every file the DCP metadata names exists and is long enough,
that every optimizer state has its parameter's shape, and that the optimizer is one libfsdp
computes; the checkpoint is written by fsdp_checkpoint_save (temporary file, rename), so a refused
conversion leaves an existing OUT.h5 untouched. to-dcp runs on one rank and holds the whole state
in memory (DCP writes one state dict in one call); the directory is written beside the target and
renamed over it.

PyTorch's param_groups become libfsdp hyperparameter groups: the first is group 0 (the
defaults); every other takes the parameters matching its --group-patterns glob, or, without one,
one exact-name group per parameter. libfsdp groups become PyTorch groups in order.
"""
import argparse
import os
import shutil
import sys
import warnings

import numpy as np

try:  # before libfsdp.so is loaded, so PyTorch's CUDA libraries are the ones loaded (LazyLibrary)
    import torch
    import torch.distributed.checkpoint as dcp
except ImportError:  # reported when a conversion is asked for
    torch = dcp = None

import libfsdp
from libfsdp import _capi
from libfsdp.optimizer import defaults, group_of as _group_of, kind_info

# PyTorch's names where they differ from libfsdp's (fsdp_optimizer_state_name); PyTorch's
# optimizers that count updates keep the count as one more state entry, "step".
_TORCH_STATE = {"momentum": "momentum_buffer"}
_TORCH_OPTIMIZER = {"adamw": "AdamW", "sgd": "SGD"}
_UNIT_BYTES = 256 << 20  # units of at most this many parameter bytes (one is read at a time)


class ConversionError(Exception):
    """A DCP directory or checkpoint that cannot be converted; the message names the file and
    the tensor."""


def _require_torch():
    if torch is None:
        raise ConversionError("libfsdp.dcp needs PyTorch >= 2.6, which is not installed")


def _quiet(fn, *args, **kwargs):
    """DCP warns that it runs without a process group, which is what no_dist asks for."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
        warnings.filterwarnings("ignore", message=".*assuming the intent is to.*")
        return fn(*args, **kwargs)


def _exact(name):
    """A glob matching exactly `name`: every special character of fnmatch(3) quoted."""
    return "".join(f"\\{c}" if c in "*?[\\" else c for c in name)


def _states(kind, groups=(), optional=False):
    """{libfsdp state name: PyTorch's} of the buffers the library's optimizer `kind` keeps under
    hyperparameter `groups` (dicts): those kept_when a field is on count when a group has it on
    (AdamW's max_exp_avg_sq under amsgrad), or always with `optional`."""
    info = kind_info(kind)
    return {n: _TORCH_STATE.get(n, n) for n in info.states
            if optional or info.kept_when[n] is None
            or any(g.get(info.kept_when[n]) for g in groups)}


# ---- DCP -> libfsdp ------------------------------------------------------------------------------

class _DcpCatalog:
    """What a DCP directory holds, sorted into model parameters, optimizer state and param
    groups, checked against its files before anything is read."""

    def __init__(self, directory, model_key, optim_key):
        self.directory = str(directory)
        if not os.path.isdir(self.directory):
            raise ConversionError(f"{self.directory}: not a directory")
        if not os.path.isfile(os.path.join(self.directory, ".metadata")):
            raise ConversionError(f"{self.directory}: no .metadata file: not a "
                                  "torch.distributed.checkpoint directory")
        self.reader = dcp.FileSystemReader(self.directory)
        try:
            self.metadata = self.reader.read_metadata()
        except Exception as e:  # noqa: BLE001 - DCP's unpickling errors are of any type
            raise ConversionError(f"{os.path.join(self.directory, '.metadata')}: unreadable "
                                  f"({type(e).__name__}: {e})") from None
        self._check_files()
        mapping = self.metadata.planner_data or {}
        self.params, self.state, self.groups = {}, {}, {}  # other keys are left out
        for key, meta in self.metadata.state_dict_metadata.items():
            path = tuple(mapping.get(key, ())) or self._split(key, model_key, optim_key)
            tensor = hasattr(meta, "size")
            if len(path) == 2 and path[0] == model_key and tensor:
                self.params[path[1]] = (key, meta)
            elif len(path) == 4 and path[:2] == (optim_key, "state") and tensor:
                self.state.setdefault(path[2], {})[path[3]] = (key, meta)
            elif len(path) == 4 and path[:2] == (optim_key, "param_groups") and not tensor:
                self.groups.setdefault(int(path[2]), {})[path[3]] = key
        if not self.params:
            raise ConversionError(f"{self.directory}: no tensor under '{model_key}.' (the model's "
                                  "state dict; see --model-key)")
        for fqn in self.state:
            if fqn not in self.params:
                raise ConversionError(f"{self.directory}: optimizer state for '{fqn}', which is "
                                      f"not a parameter under '{model_key}.'")

    @staticmethod
    def _split(key, model_key, optim_key):
        """A key's path when the metadata has no planner mapping: '<model>.<fqn>',
        '<optim>.state.<fqn>.<state>', '<optim>.param_groups.<g>.<field>'."""
        if key.startswith(optim_key + ".state."):
            fqn, _, name = key[len(optim_key) + 7:].rpartition(".")
            return (optim_key, "state", fqn, name)
        if key.startswith(optim_key + ".param_groups."):
            g, _, field = key[len(optim_key) + 14:].partition(".")
            return (optim_key, "param_groups", g, field) if g.isdigit() else (key,)
        if key.startswith(model_key + "."):
            return (model_key, key[len(model_key) + 1:])
        return (key,)

    def _check_files(self):
        """Every byte range the metadata names lies in an existing file."""
        sizes = {}
        for index, info in sorted(self.metadata.storage_data.items(),
                                  key=lambda kv: (kv[1].relative_path, kv[1].offset)):
            path = os.path.join(self.directory, info.relative_path)
            if path not in sizes:
                sizes[path] = os.path.getsize(path) if os.path.isfile(path) else None
            if sizes[path] is None:
                raise ConversionError(f"{path}: missing (it holds tensor '{index.fqn}')")
            if info.offset + info.length > sizes[path]:
                raise ConversionError(
                    f"{path}: {sizes[path]} bytes, but tensor '{index.fqn}' lies at bytes "
                    f"[{info.offset}, {info.offset + info.length}): truncated")

    def read(self, keys_and_metas):
        """Full tensors (or objects, for bytes entries) of the given keys, read by DCP."""
        sd = {}
        for key, meta in keys_and_metas:
            sd[key] = (torch.empty(tuple(meta.size), dtype=meta.properties.dtype)
                       if hasattr(meta, "size") else None)
        try:
            _quiet(dcp.load, sd, storage_reader=self.reader, no_dist=True)
        except Exception as e:  # noqa: BLE001 - DCP wraps reader errors in its own types
            names = ", ".join(f"'{k}'" for k, _ in keys_and_metas[:3])
            raise ConversionError(f"{self.directory}: reading {names}: "
                                  f"{type(e).__name__}: {str(e).strip()[:400]}") from None
        return sd


def _optimizer_plan(cat, group_patterns):
    """(kind, [(pattern, hyperparameters)], {fqn: step}) from the DCP optimizer state."""
    names = {n for states in cat.state.values() for n in states}
    if not cat.state:
        return None, [], {}
    fits = [k for k in _capi.OPTIMIZERS
            if names - {"step"} <= set(_states(k, optional=True).values()) and
            ("step" not in names or kind_info(k).step_count)]
    if not fits:
        known = "; ".join(f"{k}: {', '.join(_states(k, optional=True).values())}"
                          f"{', step' if kind_info(k).step_count else ''}"
                          for k in _capi.OPTIMIZERS)
        raise ConversionError(f"{cat.directory}: optimizer state {sorted(names)}: libfsdp "
                              f"converts the states of its optimizers ({known})")
    kind = fits[0]
    counted = kind_info(kind).step_count
    required = set(_states(kind).values())  # the others exist under a hyperparameter (amsgrad)
    for fqn, states in cat.state.items():
        (pkey, pmeta) = cat.params[fqn]
        for n in _states(kind, optional=True).values():
            if n not in states:
                if n not in required:
                    continue
                raise ConversionError(f"{cat.directory}: '{fqn}' has optimizer state "
                                      f"{sorted(states)} without '{n}'")
            key, meta = states[n]
            if tuple(meta.size) != tuple(pmeta.size):
                raise ConversionError(
                    f"{cat.directory}: tensor '{key}' has shape {list(meta.size)}, its parameter "
                    f"'{pkey}' {list(pmeta.size)}")
        if counted:
            if "step" not in states:
                raise ConversionError(f"{cat.directory}: '{fqn}' has {kind} state without "
                                      "'step'")
            if tuple(states["step"][1].size) not in ((), (1,)):
                raise ConversionError(f"{cat.directory}: tensor '{states['step'][0]}' has shape "
                                      f"{list(states['step'][1].size)}; a step is a scalar")
    steps = {}
    if counted:
        read = cat.read([states["step"] for states in cat.state.values()])
        for fqn, states in cat.state.items():
            value = float(read[states["step"][0]].reshape(()).item())
            if value != int(value) or value < 0:
                raise ConversionError(f"{cat.directory}: tensor '{states['step'][0]}' = {value}: "
                                      "not an update count")
            steps[fqn] = int(value)
    else:  # its update reads only whether the count is 0: any other continues the state
        steps = {fqn: 1 for fqn in cat.state}
    groups = []
    if cat.groups:
        fields = cat.read([(key, None) for g in sorted(cat.groups)
                           for key in cat.groups[g].values()])
        for g in sorted(cat.groups):
            groups.append({field: fields[key] for field, key in cat.groups[g].items()})
    return kind, _libfsdp_groups(cat, kind, groups, group_patterns), steps


def _libfsdp_groups(cat, kind, groups, group_patterns):
    """PyTorch's param_groups as libfsdp (pattern, hyperparameters) groups, checked: a group the
    library's update would not reproduce is refused."""
    reads, base = kind_info(kind).hyperparams, defaults(kind)
    out = []
    for g, group in enumerate(groups):
        where = f"{cat.directory}: param_groups[{g}]"
        for flag in ("amsgrad", "maximize", "differentiable"):
            if group.get(flag) and flag not in reads:
                raise ConversionError(f"{where}: {flag}=True has no libfsdp equivalent")
        fields = dict(group)
        if "betas" in group:
            fields["beta1"], fields["beta2"] = group["betas"]
        # A field the group lacks takes the library's default (PyTorch's).
        hp = {f: fields.get(f, getattr(base, f)) for f in reads}
        if (kind == "adamw" and group.get("decoupled_weight_decay") is False
                and float(group.get("weight_decay", 0.0)) != 0):
            raise ConversionError(f"{where}: torch.optim.Adam's L2 weight decay "
                                  f"(weight_decay={group['weight_decay']}) is not AdamW's "
                                  "decoupled decay, the one libfsdp computes")
        out.append((list(group.get("params", [])), hp))
    if not out:
        return [("", {})]
    if group_patterns is not None and len(group_patterns) != len(out) - 1:
        raise ConversionError(f"--group-patterns: {len(group_patterns)} given for the "
                              f"{len(out) - 1} param_groups after the first")
    result, owner = [("", out[0][1])], [0]  # libfsdp groups, and the PyTorch group of each
    for g, (params, hp) in enumerate(out[1:], start=1):
        mine = [group_patterns[g - 1]] if group_patterns is not None else [_exact(p)
                                                                            for p in params]
        result += [(pattern, hp) for pattern in mine]
        owner += [g] * len(mine)
    patterns = [pattern for pattern, _ in result]
    expected = {p: g for g, (params, _) in enumerate(out) for p in params}
    for fqn in cat.params:
        want, got = expected.get(fqn, 0), owner[_group_of(patterns, fqn)]
        if got != want:
            raise ConversionError(f"--group-patterns: '{fqn}' is in param_groups[{want}] but the "
                                  f"patterns put it in param_groups[{got}]")
    return result


# torch dtype -> the library's name, for the dtypes a parameter may have.
_LIB_DTYPE = {} if torch is None else {torch.float32: "float32", torch.float64: "float64",
                                       torch.bfloat16: "bfloat16", torch.float16: "float16"}


def _storage_dtype(dtype):
    """The numpy dtype the library stores a parameter of torch `dtype` in (fsdp_storage_dtype),
    or None for a dtype that is not one of the library's."""
    return np.dtype(libfsdp.unit.storage_dtype(_LIB_DTYPE[dtype])) if dtype in _LIB_DTYPE else None


def to_libfsdp(dcp_dir, out, ctx=None, model_key="model", optim_key="optim",
               group_patterns=None, metadata=None):
    """Converts a DCP directory into the libfsdp checkpoint `out`. Collective over `ctx` (None:
    a context over MPI_COMM_WORLD, finalized here). Returns {"params": count, "optimizer": kind or
    None, "rank": this rank}."""
    _require_torch()
    cat = _DcpCatalog(dcp_dir, model_key, optim_key)
    for fqn, (key, meta) in cat.params.items():
        if _storage_dtype(meta.properties.dtype) is None:
            raise ConversionError(f"{cat.directory}: tensor '{key}' is {meta.properties.dtype}; "
                                  "libfsdp parameters are floating point")
    kind, groups, steps = _optimizer_plan(cat, group_patterns)
    own = ctx is None
    if own:
        ctx = libfsdp.init()
    rank = ctx.group()[0]
    try:
        units = _fill_units(ctx, cat, kind, groups, steps)
        opts = [units[1]] if units[1] is not None else []
        meta = {"converted_from": "torch.distributed.checkpoint",
                "source": os.path.abspath(cat.directory)}
        meta.update(metadata or {})
        ctx.save(str(out), optimizers=opts, metadata=meta)
        for opt in opts:
            opt.destroy()
        for unit in units[0]:
            unit.destroy()
    finally:
        if own:
            ctx.finalize()
    return {"params": len(cat.params), "optimizer": kind, "rank": rank}


def _fill_units(ctx, cat, kind, groups, steps):
    """Units of one storage dtype each, with or without optimizer state (so that parameters
    without state get none), at most _UNIT_BYTES each, filled from the DCP tensors one unit at a
    time; the optimizer over them, its state and each parameter's update count restored."""
    buckets = {}
    for fqn, (key, meta) in cat.params.items():
        dtype = _storage_dtype(meta.properties.dtype)
        buckets.setdefault((fqn in steps, dtype), []).append(fqn)
    plan = []
    for (stateful, dtype), fqns in buckets.items():
        current, size = [], 0
        for fqn in fqns:
            nbytes = int(np.prod(cat.params[fqn][1].size, dtype=np.int64)) * dtype.itemsize
            if current and size + nbytes > _UNIT_BYTES:
                plan.append((stateful, dtype, current))
                current, size = [], 0
            current.append(fqn)
            size += nbytes
        plan.append((stateful, dtype, current))
    units = [ctx.unit([(fqn, tuple(cat.params[fqn][1].size), np.dtype(dtype)) for fqn in fqns],
                      name=f"dcp {i}") for i, (_, dtype, fqns) in enumerate(plan)]
    opt = _optimizer(ctx, kind, units, groups) if kind is not None else None
    states = _states(kind, [hp for _, hp in groups]) if kind is not None else {}
    for fqn in steps:
        missing = [n for n in states.values() if n not in cat.state[fqn]]
        if missing:
            raise ConversionError(f"{cat.directory}: '{fqn}' has optimizer state "
                                  f"{sorted(cat.state[fqn])} without {missing} (its param_group "
                                  "keeps them)")
    for unit, (stateful, dtype, fqns) in zip(units, plan):
        keys = [cat.params[f] for f in fqns]
        if stateful:
            keys += [cat.state[f][n] for f in fqns for n in states.values()]
        values = cat.read(keys)
        shard = unit.shard()
        buffers = {n: opt.state(unit, lib) for lib, n in states.items()} if stateful else {}
        for i, fqn in enumerate(fqns):
            shard_off, param_off, length = unit.shard_range(i)
            part = slice(param_off, param_off + length)
            shard[shard_off:shard_off + length] = _flat(values[cat.params[fqn][0]], dtype)[part]
            for n, buf in buffers.items():
                buf[shard_off:shard_off + length] = _flat(values[cat.state[fqn][n][0]],
                                                          dtype)[part]
            if stateful:
                opt.set_param_steps(unit, i, steps[fqn])
        del values
    return units, opt


def _flat(tensor, dtype):
    return tensor.detach().reshape(-1).to(dtype=_torch_dtype(dtype)).numpy()


def _torch_dtype(dtype):
    return torch.float64 if np.dtype(dtype) == np.float64 else torch.float32


# ---- libfsdp -> DCP ------------------------------------------------------------------------------

def _torch_group_fields(kind, hp):
    """This PyTorch's param_group fields for the optimizer (every key its own optimizer has, so
    FSDP2's load finds them all), from a throwaway optimizer built with the hyperparameters."""
    p = [torch.nn.Parameter(torch.zeros(1))]
    args = _hyper(kind, hp)
    if "betas" in args:
        args["betas"] = tuple(args["betas"])
    if "nesterov" in args:
        args["nesterov"] = bool(args["nesterov"])
    o = getattr(torch.optim, _TORCH_OPTIMIZER[kind])(p, **args)
    fields = dict(o.param_groups[0])
    del fields["params"]
    return fields


def to_dcp(path, dcp_dir, model_key="model", optim_key="optim"):
    """Converts the libfsdp checkpoint `path` (verified while it is loaded) into a DCP directory
    that FSDP2 loads with dcp.load + set_state_dict. Runs on one rank. Returns {"params": count,
    "optimizer": kind or None, "rank": 0}."""
    _require_torch()
    info = libfsdp.describe_checkpoint(path)
    if len(info["optimizers"]) > 1:
        raise ConversionError(f"{path}: {len(info['optimizers'])} optimizers; a DCP state dict "
                              "holds one")
    target = os.path.abspath(str(dcp_dir))
    if os.path.exists(target) and (not os.path.isdir(target) or (
            os.listdir(target) and not os.path.isfile(os.path.join(target, ".metadata")))):
        raise ConversionError(f"{target}: exists and is not a DCP checkpoint directory; "
                              "not replaced")
    oinfo = info["optimizers"][0] if info["optimizers"] else None
    step_of = {}
    if oinfo:
        for states in oinfo["state"].values():
            for name, s in states.items():
                step_of[name] = s["step"]
    ctx = libfsdp.init()
    try:
        size = ctx.group()[1]
        if size != 1:  # the whole state in one process, or the directory written N times
            raise ConversionError(f"to-dcp runs on one rank (launched on {size}): DCP writes "
                                  "one state dict from one process here")
        sd = _load_full(ctx, path, info, oinfo, step_of, model_key, optim_key)
    finally:
        ctx.finalize()
    tmp = f"{target}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    _quiet(dcp.save, sd, storage_writer=dcp.FileSystemWriter(tmp), no_dist=True)
    if os.path.exists(target):
        old = f"{target}.prev-{os.getpid()}"
        os.rename(target, old)
        os.rename(tmp, target)
        shutil.rmtree(old)
    else:
        os.rename(tmp, target)
    return {"params": len(info["params"]), "optimizer": oinfo["kind"] if oinfo else None,
            "rank": 0}


def _load_full(ctx, path, info, oinfo, step_of, model_key, optim_key):
    """The checkpoint's parameters and optimizer state as full tensors, loaded by libfsdp (every
    checksum verified) into units grouped by dtype and by whether they have optimizer state."""
    buckets = {}
    for p in info["params"]:
        buckets.setdefault((p["name"] in step_of, p["dtype"]), []).append(p)
    plan = list(buckets.items())
    units = [ctx.unit([(p["name"], tuple(p["shape"]), np.dtype(dtype)) for p in params],
                      name=f"checkpoint {i}") for i, ((_, dtype), params) in enumerate(plan)]
    opt = None
    if oinfo is not None:
        opt = _optimizer(ctx, oinfo["kind"], units,
                         [(g["pattern"], _hyper(oinfo["kind"], g)) for g in oinfo["groups"]])
    ctx.load(str(path), optimizers=[opt] if opt else [])
    model, state = {}, {}
    states = _states(oinfo["kind"], oinfo["groups"]) if oinfo else {}
    counted = oinfo is not None and kind_info(oinfo["kind"]).step_count
    for unit, ((stateful, _), params) in zip(units, plan):
        shard = unit.shard()
        buffers = {n: opt.state(unit, lib) for lib, n in states.items()} if stateful else {}
        for i, p in enumerate(params):
            shard_off, _, length = unit.shard_range(i)
            part = slice(shard_off, shard_off + length)
            model[p["name"]] = torch.from_numpy(shard[part].copy()).reshape(p["shape"])
            if not buffers:
                continue
            entry = {n: torch.from_numpy(buf[part].copy()).reshape(p["shape"])
                     for n, buf in buffers.items()}
            if counted:
                entry["step"] = torch.tensor(float(opt.param_steps(unit, i)),
                                             dtype=torch.float32)
            state[p["name"]] = entry
    sd = {model_key: model}
    if oinfo is not None:
        groups = [dict(_torch_group_fields(oinfo["kind"], g), params=[])
                  for g in oinfo["groups"]]
        patterns = [g["pattern"] for g in oinfo["groups"]]
        for p in info["params"]:
            groups[_group_of(patterns, p["name"])]["params"].append(p["name"])
        sd[optim_key] = {"state": state, "param_groups": groups}
    if opt:
        opt.destroy()
    for u in units:
        u.destroy()
    return sd


def _optimizer(ctx, kind, units, groups):
    """A libfsdp optimizer over `units` with groups [(pattern, hyperparameters)], the first the
    defaults."""
    opt = ctx.optimizer(kind, units, **groups[0][1])
    for pattern, hp in groups[1:]:
        opt.add_group(pattern, **hp)
    return opt


def _hyper(kind, g):
    """The hyperparameters the kind reads (fsdp_optimizer_hyperparam_name) of a described group,
    with (beta1, beta2) as torch.optim's betas."""
    hp = {f: g[f] for f in kind_info(kind).hyperparams}
    if "beta1" in hp:
        hp["betas"] = (hp.pop("beta1"), hp.pop("beta2"))
    return hp


# ---- Command line --------------------------------------------------------------------------------

def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m libfsdp.dcp", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    a = sub.add_parser("to-libfsdp", aliases=["import"],
                       help="DCP directory -> libfsdp checkpoint (any rank count)")
    a.add_argument("source", metavar="dcp_dir")
    a.add_argument("target", metavar="out.h5", nargs="?")
    a.add_argument("--group-patterns", default=None,
                   help="comma-separated globs for param_groups[1], [2]... (default: one "
                        "exact-name group per parameter)")
    b = sub.add_parser("to-dcp", aliases=["export"],
                       help="libfsdp checkpoint -> DCP directory (one rank)")
    b.add_argument("source", metavar="checkpoint.h5")
    b.add_argument("target", metavar="dcp_dir", nargs="?")
    for p in (a, b):
        p.add_argument("--to", default=None, help="the target, as fsdp-ckpt import/export take it")
        p.add_argument("--model-key", default="model")
        p.add_argument("--optim-key", default="optim")
    args = parser.parse_args(argv)
    if (args.target is None) == (args.to is None):
        parser.error(f"{args.command}: give the target either as the second argument or --to")
    target = args.target if args.target is not None else args.to
    try:
        if args.command in ("to-libfsdp", "import"):
            patterns = None if args.group_patterns is None else args.group_patterns.split(",")
            done = to_libfsdp(args.source, target, model_key=args.model_key,
                              optim_key=args.optim_key, group_patterns=patterns)
        else:
            done = to_dcp(args.source, target, model_key=args.model_key, optim_key=args.optim_key)
    except ConversionError as e:
        print(f"libfsdp.dcp {args.command}: {e}", file=sys.stderr)
        return 2
    except libfsdp.Error as e:
        print(f"libfsdp.dcp {args.command}: {e.status_name}: {e}", file=sys.stderr)
        return 2
    if done["rank"] == 0:
        print(f"libfsdp.dcp {args.command}: {args.source} -> {target}: {done['params']} "
              f"parameters, optimizer {done['optimizer'] or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
