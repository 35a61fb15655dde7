"""What a job would hold and send per rank, and how long its step takes (fsdp_plan_*,
doc/planning.md): the planner of the C library, asked from Python. Nothing here restates its
rules."""
import ctypes
import json

from . import _capi
from . import _check, _choice, _config, _lib, _refuse
from .optimizer import _hyperparams, defaults

# fsdp_plan_machine_t's fields, as the header declares them.
_MACHINE_FIELDS = tuple(f for f, _ in _capi.PlanMachine._fields_ if f != "size")


def machine(name):
    """The preset `name` (fsdp_plan_machine_preset: "a100-40gb-efa", "a100-80gb-efa",
    "a100-40gb-roce", "a100-80gb-roce", "h100-80gb-efa") as a dict of fsdp_plan_machine_t's
    fields."""
    if not isinstance(name, str):
        _refuse("fsdp_plan_machine_preset", f"name: a str is needed, got {type(name).__name__}")
    m = _capi.initialized("FSDP_PLAN_MACHINE_INIT")
    _check(_lib.fsdp_plan_machine_preset(name.encode(), ctypes.byref(m)))
    return {f: getattr(m, f) for f in _MACHINE_FIELDS}


def _machine(call, value):
    """fsdp_plan_machine_t from a preset name or a dict with every field."""
    fields = machine(value) if isinstance(value, str) else value
    if not isinstance(fields, dict):
        _refuse(call, f"machine: a preset name or a dict is needed, got {type(value).__name__}")
    unknown = set(fields) - set(_MACHINE_FIELDS)
    missing = set(_MACHINE_FIELDS) - set(fields)
    if unknown or missing:
        _refuse(call, "machine: " + (f"unknown field(s) {sorted(unknown)}" if unknown
                                     else f"missing field(s) {sorted(missing)}"))
    m = _capi.initialized("FSDP_PLAN_MACHINE_INIT")
    for f in _MACHINE_FIELDS:
        v = fields[f]
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            _refuse(call, f"machine[{f!r}]: a number is needed, got {type(v).__name__}")
        if f == "hbm_bytes" and (not isinstance(v, int) or v < 0):
            _refuse(call, f"machine['hbm_bytes'] = {v}: a whole number >= 0 is needed")
        setattr(m, f, v)
    return m


def _job(call, world_size, ranks_per_node, optimizer, hyperparams, prefetch_forward,
         prefetch_backward, batch_size, sequence_length, activation_checkpointing,
         activation_bytes_per_layer, config, keep):
    """fsdp_plan_job_t for the keywords; `keep` holds what its pointers point at."""
    for arg, value in (("world_size", world_size), ("ranks_per_node", ranks_per_node),
                       ("batch_size", batch_size), ("sequence_length", sequence_length),
                       ("activation_bytes_per_layer", activation_bytes_per_layer)):
        if not isinstance(value, int) or isinstance(value, bool):
            _refuse(call, f"{arg}: an int is needed, got {type(value).__name__}")
    cfg = _config(call, **config)
    job = _capi.initialized("FSDP_PLAN_JOB_INIT")
    keep.append(cfg)
    job.config = ctypes.pointer(cfg)
    job.world_size, job.ranks_per_node = world_size, ranks_per_node
    if optimizer is None:
        if hyperparams:
            _refuse(call, "hyperparams: given without an optimizer")
        job.no_optimizer = 1
    else:
        job.optimizer = _choice(call, "optimizer", _capi.OPTIMIZERS, optimizer)
        hp = _hyperparams(call, optimizer, defaults(optimizer), dict(hyperparams or {}))
        keep.append(hp)
        job.hyperparams = ctypes.pointer(hp)
    job.prefetch_forward = 1 if prefetch_forward else 0
    job.prefetch_backward = 1 if prefetch_backward else 0
    job.batch_size, job.sequence_length = batch_size, sequence_length
    job.activation_checkpointing = 1 if activation_checkpointing else 0
    job.activation_bytes_per_layer = activation_bytes_per_layer
    return job


def _with_model(model, format, use):
    """use(handle) on a plan holding the model read from `model`."""
    fmt = _choice("fsdp_plan_read_model", "format", _capi.PLAN_FORMATS, format)
    handle = ctypes.c_void_p()
    _check(_lib.fsdp_plan_create(ctypes.byref(handle)))
    try:
        _check(_lib.fsdp_plan_read_model(handle, str(model).encode(), fmt))
        return use(handle)
    finally:
        _check(_lib.fsdp_plan_destroy(ctypes.byref(handle)))


def _text(call, *args):
    """The JSON text a describe-like call writes (asked its length first)."""
    length = ctypes.c_size_t()
    _check(call(*args, None, 0, ctypes.byref(length)))
    buf = ctypes.create_string_buffer(length.value + 1)
    _check(call(*args, buf, len(buf), None))
    return json.loads(buf.value.decode())


def plan(model, format, world_size, ranks_per_node=0, rank=0, optimizer="adamw",
         hyperparams=None, prefetch_forward=False, prefetch_backward=False, batch_size=1,
         sequence_length=0, activation_checkpointing=False, activation_bytes_per_layer=0,
         machine=None, **config):
    """The plan of one rank as a dict (fsdp_plan_describe's JSON: the job, each unit, "memory"
    by fsdp_memory_stats' names plus activation_bytes, device_total_bytes and host_total_bytes,
    "traffic" per training step); with `machine`, fsdp_plan_describe_on's: also "time"
    (fsdp_plan_time's fields) and "fits". Local; needs no MPI.

    model: a file; format: "layout" (the layout JSON of doc/planning.md), "hf" (a Hugging Face
    config.json) or "checkpoint" (a libfsdp checkpoint). world_size, ranks_per_node (0: one
    node), rank. optimizer: "sgd", "adamw" or None (no library optimizer), with `hyperparams` a
    dict of overrides (e.g. {"momentum": 0.9}, {"amsgrad": 1}). prefetch_forward/_backward as
    fsdp_set_prefetch. batch_size, sequence_length (0: the model's), activation_checkpointing,
    activation_bytes_per_layer (0: the estimate) as fsdp_plan_job_t's. machine: a preset name or
    a dict of fsdp_plan_machine_t's fields. Every other keyword is init's (strategy,
    sharding_factor, param_dtype, reduce_dtype, max_unsharded, memory_space, cpu_offload,
    transport, ...)."""
    call = "fsdp_plan_describe"
    if not isinstance(rank, int) or isinstance(rank, bool):
        _refuse(call, f"rank: an int is needed, got {type(rank).__name__}")
    keep = []
    job = _job(call, world_size, ranks_per_node, optimizer, hyperparams, prefetch_forward,
               prefetch_backward, batch_size, sequence_length, activation_checkpointing,
               activation_bytes_per_layer, config, keep)
    m = None if machine is None else _machine("fsdp_plan_describe_on", machine)

    def use(handle):
        if m is None:
            return _text(_lib.fsdp_plan_describe, handle, ctypes.byref(job), rank)
        return _text(_lib.fsdp_plan_describe_on, handle, ctypes.byref(job), ctypes.byref(m), rank)
    return _with_model(model, format, use)


def sweep(model, format, world_size, machine, ranks_per_node=0, budget_bytes=0,
          optimizer="adamw", hyperparams=None, prefetch_forward=False, prefetch_backward=False,
          sequence_length=0, activation_bytes_per_layer=0, **config):
    """The configurations that fit `budget_bytes` per rank (0: the machine's hbm_bytes), fastest
    first: fsdp_plan_sweep's "configurations", a list of dicts (strategy, sharding_factor,
    param_dtype, activation_checkpointing, cpu_offload, batch_size, sequence_length,
    tokens_per_s, memory, time). The arguments are plan()'s; the sweep varies the sharding, the
    param dtype, activation checkpointing, CPU offload (memory_space="cuda") and the batch."""
    call = "fsdp_plan_sweep"
    if not isinstance(budget_bytes, int) or isinstance(budget_bytes, bool) or budget_bytes < 0:
        _refuse(call, f"budget_bytes = {budget_bytes!r}: an int >= 0 is needed")
    keep = []
    job = _job(call, world_size, ranks_per_node, optimizer, hyperparams, prefetch_forward,
               prefetch_backward, 1, sequence_length, False, activation_bytes_per_layer, config,
               keep)
    m = _machine(call, machine)
    return _with_model(model, format, lambda handle: _text(
        _lib.fsdp_plan_sweep, handle, ctypes.byref(job), ctypes.byref(m),
        budget_bytes)["configurations"])
