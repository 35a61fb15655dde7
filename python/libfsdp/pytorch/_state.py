"""The state of one sharded model (as FSDP2's FSDPState): its ParamGroups in unit order, which of
them are gathered, the reductions in flight, whether backward runs, and what every group shares
(the context, the root and its policy, the ignored parameters). Hooks and StateDicts act on it;
FullyShard composes the three."""
from .. import _refuse
from . import _device
from ._options import Options


class ShardState:
    """ctx: the context; root: the model (None once fully_shard merged this state into an outer
    one); root_policy: the root's MixedPrecisionPolicy; options: FullyShard's Options; ignored:
    ids of parameters left unsharded and unreduced. device: where every unit's memory is (the
    CPU, or the GPU of a CUDA context): the context's."""

    def __init__(self, ctx, root, root_policy, options=Options(), ignored=frozenset()):
        self.ctx, self.root, self.root_policy = ctx, root, root_policy
        self.options, self.ignored = options, ignored
        self.device = _device.device_of(ctx)
        self.groups = []           # ParamGroups, in unit order (the root's last)
        self.root_group = None     # the root's ParamGroup, if the root holds parameters
        self.gathered = []         # the gathered groups, in the order gathered
        self.requests = []         # the reductions in flight in this backward
        self.in_backward = False

    @property
    def find_unused_parameters(self):
        return self.options.find_unused_parameters

    def contexts(self):
        """Every context this state's units live in (begin_forward / begin_backward each)."""
        out = {id(self.ctx): self.ctx}
        for g in self.groups:
            out.setdefault(id(g.unit.context), g.unit.context)
        return list(out.values())

    def join_stream(self):
        """Where a step begins (a hook, an unshard or reshard asked by the user): on a GPU the
        library orders its work against torch's current stream, as FSDP2 records events between
        its all-gather stream and the current one (fsdp_set_stream: the library joins the
        streams on the GPU; the CPU never waits). Nothing on the host."""
        if self.device.type == "cuda":
            _device.join_stream(self.contexts(), self.device)

    def groups_under(self, module, recurse=True):
        """The groups of `module` (None: the root) and, with recurse, of every module under it."""
        module = self.root if module is None else module
        inside = {id(m) for m in module.modules()} if recurse else {id(module)}
        return [g for g in self.groups if any(id(m) in inside for m in g.modules)]

    def group_of(self, module, call, arg):
        """The group of `module` (None: the root), or libfsdp.Error naming argument `arg`."""
        module = self.root if module is None else module
        for g in self.groups:
            if any(m is module for m in g.modules):
                return g
        name = next((n for n, m in self.root.named_modules() if m is module), None)
        what = (f"module '{name or '<root>'}'" if name is not None
                else f"a {type(module).__name__} outside the model")
        _refuse(call, f"{arg}: {what} ({type(module).__name__}) has no unit of this FullyShard "
                "(a listed module, or the root when it holds parameters)")

    def release_prefetches(self):
        for g in self.groups:
            g.release_prefetch()

    def check_sharded(self, call, reading=False):
        """State dicts are taken outside backward; reading one also while units stay gathered
        after a forward (reshard_after_forward=False: the masters are read, not the gathered
        copies); loading one only when every unit is sharded (a gathered copy would not see
        it)."""
        if self.in_backward:
            _refuse(call, "inside backward; call it between steps")
        if self.gathered and not reading:
            names = ", ".join(f"'{g.where}'" for g in self.gathered)
            _refuse(call, f"units {names} are unsharded (after a forward, before its backward); "
                    "load it between steps")
        if not reading:
            self.release_prefetches()  # an all-gather started ahead would miss the new values
