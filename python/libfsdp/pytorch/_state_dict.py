"""FullyShard's state dicts, acting on a ShardState: full master values gathered from the
shards (fsdp_gather_params) or this rank's parts, loaded into the shards (from every rank's dict,
or rank 0's through fsdp_broadcast), and the same through the module's own state_dict() /
load_state_dict() by state-dict hooks."""
import numpy as np
import torch

from .. import _refuse
from . import _device
from ._materialize import broadcast_from_rank0
from ._param import TORCH_OF


def error_of(call, message):
    """The libfsdp.Error that _refuse(call, message) raises, as a value (for an agreement)."""
    try:
        _refuse(call, message)
    except Exception as e:  # noqa: BLE001
        return e


class StateDicts:
    """The state dicts of the groups of `state` (a ShardState)."""

    def __init__(self, state):
        self.state = state

    def _names(self):
        """Every name under which root.state_dict() lists each parameter (tied ones twice), and
        its persistent buffers, with the ignored parameters (plain tensors, as buffers are)."""
        params, buffers = {}, {}
        ignored = self.state.ignored

        def walk(module, prefix, seen):
            if id(module) in seen:
                return
            seen = seen | {id(module)}
            for n, p in module._parameters.items():
                if p is not None and id(p) in ignored:
                    buffers[prefix + n] = p
                elif p is not None:
                    params.setdefault(id(p), []).append(prefix + n)
            for n, b in module._buffers.items():
                if b is not None and n not in module._non_persistent_buffers_set:
                    buffers[prefix + n] = b
            for n, child in module._modules.items():
                if child is not None:
                    walk(child, prefix + n + ".", seen)
        walk(self.state.root, "", frozenset())
        return params, buffers

    def _params(self):
        """(group, ShardedParam) of every parameter, in unit order."""
        return [(g, fp) for g in self.state.groups for fp in g.fsdp_params]

    def state_dict(self, full=True):
        """The model's state as plain tensors, under root.state_dict()'s names (tied parameters
        under each of theirs). full=True: full float32 (or float64) master values on every rank
        (collective); full=False: this rank's own part, {name: (values, param_offset)} where
        values are the parameter's flattened elements [param_offset, param_offset + len). Buffers
        are included as they are. Keys in root.state_dict()'s order."""
        self.state.check_sharded("FullyShard.state_dict", reading=True)
        names, buffers = self._names()
        out = {}
        for group in self.state.groups:
            if full:
                values = group.unit.gather()
            for fp in group.fsdp_params:
                if full:
                    tensor = torch.from_numpy(values[fp.index])
                else:
                    shard_off, param_off, length = group.unit.shard_range(fp.index)
                    shard = _device.tensor(group.unit.shard())
                    tensor = (shard[shard_off:shard_off + length].clone(), param_off)
                for name in names[id(fp.param)]:
                    out[name] = tensor
        for name, b in buffers.items():
            out[name] = b.detach().clone()
        # In root.state_dict()'s order, as nn.Module gives its keys (FSDP2 keeps it too).
        order = {k: n for n, k in enumerate(self.state.root.state_dict(keep_vars=True))}
        return dict(sorted(out.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])))

    def _agree_with_rank0(self, error):
        """Collective: every rank learns whether rank 0 found `error` (a libfsdp.Error or None)."""
        refused = self.state.ctx.broadcast(np.array([0 if error is None else 1], np.int32))[0]
        if error is not None:
            raise error
        if refused:
            _refuse("FullyShard.load_state_dict", "rank 0 refused its state_dict (see its error)")

    def load_state_dict(self, state_dict, strict=True, from_rank0=False):
        """Loads full tensors (as nn.Module.state_dict() gives them, any floating dtype) into the
        shards: each rank keeps its part; local. from_rank0=True: only rank 0's dict is read (the
        others may pass {}) and must hold every parameter; collective. Every name and shape is
        checked before anything is written: a refused dict changes nothing (with from_rank0, on
        every rank)."""
        call = "FullyShard.load_state_dict"
        ctx = self.state.ctx
        self.state.check_sharded(call)
        reads = not from_rank0 or ctx.group()[0] == 0
        if reads and not isinstance(state_dict, dict):  # (the others' is not read)
            error = error_of(call, f"state_dict: a dict is needed, got "
                             f"{type(state_dict).__name__}")
            if from_rank0:
                self._agree_with_rank0(error)
            raise error
        names, buffers = self._names()
        entries = [(fp, names[id(fp.param)]) for _, fp in self._params()]
        error = None
        if reads:
            try:
                self._check_state_dict(call, state_dict, entries, buffers,
                                       strict or from_rank0)
            except Exception as e:  # noqa: BLE001 - a libfsdp.Error, given to the agreement
                error = e
        if from_rank0:
            self._agree_with_rank0(error)
        elif error is not None:
            raise error
        key_of = {}
        if reads:
            for fp, aliases in entries:
                key_of[id(fp)] = next((a for a in aliases if a in state_dict), None)
        for group in self.state.groups:
            dtype = TORCH_OF[group.unit.dtype]
            full = []
            for fp in group.fsdp_params:
                key = key_of.get(id(fp))
                full.append(None if key is None else
                            state_dict[key].detach().to(dtype).contiguous().numpy())
            for fp, v in zip(group.fsdp_params, full):
                if from_rank0:  # rank 0's values, one parameter at a time (fsdp_broadcast)
                    v = ctx.broadcast(np.ascontiguousarray(v) if reads else
                                      np.zeros(fp.shape, group.unit.dtype))
                if v is not None:
                    fp.write_part(v)
        with torch.no_grad():
            for name, b in buffers.items():  # buffers and ignored parameters
                if reads and name in state_dict:
                    b.copy_(state_dict[name])
                if from_rank0:  # rank 0's (the check made sure it has every one)
                    broadcast_from_rank0(ctx, b)

    def state_dict_hook(self, module, state_dict, prefix, local_metadata):
        """model.state_dict(): each parameter's full master values at its original shape, in
        place of this rank's part (FSDP1's full state dict). Collective over the shard group:
        every rank calls it. keep_vars=True gives the Parameters themselves, gathering nothing."""
        names, _ = self._names()
        keys = [(group, fp, prefix + name) for group, fp in self._params()
                for name in names[id(fp.param)]]
        if not any(k in state_dict and not isinstance(state_dict[k], torch.nn.Parameter)
                   for _, _, k in keys):
            return
        self.state.check_sharded("FullyShard: model.state_dict()", reading=True)
        full = {id(group): group.unit.gather() for group in self.state.groups}
        for group, fp, key in keys:
            if key in state_dict and not isinstance(state_dict[key], torch.nn.Parameter):
                state_dict[key] = torch.from_numpy(full[id(group)][fp.index])

    def load_state_dict_hook(self, module, state_dict, prefix, local_metadata, strict,
                             missing_keys, unexpected_keys, error_msgs):
        """model.load_state_dict(): full tensors of the original shapes (model.state_dict()'s)
        are cut to this rank's part, which nn.Module then copies into the shard. Local. Every
        entry is checked before any is cut: a wrong shape changes nothing."""
        call = "FullyShard: model.load_state_dict()"
        if local_metadata.get("assign_to_params_buffers"):
            _refuse(call, "assign=True would replace the shard views; load without assign")
        self.state.check_sharded(call)
        names, _ = self._names()
        cut = {}
        for _, fp in self._params():
            for name in names[id(fp.param)]:
                v = state_dict.get(prefix + name)
                if not isinstance(v, torch.Tensor):
                    continue  # absent or not a tensor: nn.Module reports it
                if tuple(v.shape) != fp.shape:
                    _refuse(call, f"state_dict[\"{prefix + name}\"]: shape "
                            f"{tuple(v.shape)}, but the parameter has shape {fp.shape}")
                cut[prefix + name] = fp.part_of(v.detach())
        state_dict.update(cut)

    @staticmethod
    def _check_state_dict(call, state_dict, entries, buffers, strict):
        known = {a for _, aliases in entries for a in aliases} | set(buffers)
        missing = [aliases[0] for _, aliases in entries
                   if not any(a in state_dict for a in aliases)]
        missing += [n for n in buffers if n not in state_dict]
        unexpected = [n for n in state_dict if n not in known]
        if strict and (missing or unexpected):
            _refuse(call, f"state_dict: missing keys {missing[:5]}, unexpected keys "
                    f"{unexpected[:5]}")
        for fp, aliases in entries:
            for key in aliases:
                if key not in state_dict:
                    continue
                v = state_dict[key]
                if not isinstance(v, torch.Tensor) or not v.is_floating_point():
                    _refuse(call, f"state_dict[\"{key}\"]: a floating-point tensor is needed, "
                            f"got {getattr(v, 'dtype', type(v).__name__)}")
                if tuple(v.shape) != fp.shape:
                    _refuse(call, f"state_dict[\"{key}\"]: shape {tuple(v.shape)}, but the "
                            f"parameter has shape {fp.shape}")
        for name, b in buffers.items():
            if name in state_dict and tuple(state_dict[name].shape) != tuple(b.shape):
                _refuse(call, f"state_dict[\"{name}\"]: shape {tuple(state_dict[name].shape)}, "
                        f"but the buffer has shape {tuple(b.shape)}")
