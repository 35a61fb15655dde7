"""Tensors inside the structured values modules take and return: tuples (namedtuples too),
lists, dicts and dataclasses, at any depth."""
import dataclasses

import torch


def is_dataclass(value):
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def tensors(value):
    """The tensors in a module's output, at any depth of tuples (namedtuples too), lists, dicts
    and dataclasses."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from tensors(v)
    elif is_dataclass(value):
        for f in dataclasses.fields(value):
            yield from tensors(getattr(value, f.name))


def cast(value, dtype):
    """`value` with its floating tensors cast to dtype, at any depth of the containers tensors()
    walks; each container keeps its type (a namedtuple stays one, a dataclass is replaced)."""
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() and value.dtype != dtype else value
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple
        return type(value)(*(cast(v, dtype) for v in value))
    if isinstance(value, tuple):
        return tuple(cast(v, dtype) for v in value)
    if isinstance(value, list):
        return [cast(v, dtype) for v in value]
    if isinstance(value, dict):
        out = {k: cast(v, dtype) for k, v in value.items()}
        return out if type(value) is dict else type(value)(out)
    if is_dataclass(value):
        return dataclasses.replace(value, **{f.name: cast(getattr(value, f.name), dtype)
                                             for f in dataclasses.fields(value) if f.init})
    return value
