"""FullyShard's choices beside its policies, gathered in one value: what the constructor's
keyword arguments ask, checked once and passed on as a whole."""
import dataclasses


@dataclasses.dataclass(frozen=True)
class Options:
    """reshard_after_forward: None (FSDP2's default: every unit but the root's resharded after
    forward), True (the root's too) or False (none). prefetch: the library all-gathers the next
    unit while one computes. find_unused_parameters: ranks may leave different parameters
    without gradient (every unit unsharded from forward to backward, every reduction at the end
    of backward, in unit order). sync_module_states: every rank starts from rank 0's values.
    frozen_may_train: frozen parameters get gradient memory, so unfreezing one later trains it.
    See FullyShard for each."""
    reshard_after_forward: object = None
    prefetch: bool = True
    find_unused_parameters: bool = False
    sync_module_states: bool = True
    frozen_may_train: bool = False

    def reshards(self, is_root):
        """Whether a unit (the root's when is_root) is resharded after forward. The root, and
        every unit under find_unused_parameters, stays gathered from forward to backward: an
        unshard in backward is collective, and ranks whose losses use different units would
        issue different ones."""
        return (self.reshard_after_forward is not False
                and (not is_root or self.reshard_after_forward is True)
                and not self.find_unused_parameters)
