"""What the C entry points need beyond what include/fsdp.h says (fsdp_api.py reads the rest: each
argument's type, direction, "may be NULL", and whether the call's comment says "Collective").
generate.py's `capi` mode writes every exported call's C entry point from the two together
(capi_entries.py); the hand-written bodies in src/capi/ keep only what the call does.

An entry point, as generated, in this order:
  1. its first argument, when it is a library handle (HANDLES), looked up and checked (a NULL,
     foreign, destroyed or finalized handle is reported naming the argument); the body receives
     the object;
  2. a pointer to a handle that the call reads and clears (fsdp_unit_destroy's `unit`) checked
     non-NULL; every [out] argument not documented "may be NULL" checked non-NULL;
  3. the call recorded in its context's call log for its whole duration (a CallScope, SCOPES):
     debug mode compares it across ranks before it communicates, the watchdog names it;
  4. the body, fsdp::capi::body::<call>, declared in the generated capi/entry_bodies.hpp.
A collective call's argument errors of step 2 must not fail one rank alone while the others wait
in the collective: for the calls in JOINED, they are handed to the body (its first parameter,
`std::optional<fsdp::Error> local`) which joins them into the call's agreement, so that every rank
fails together."""

# Handle types: (C++ type, the lookup of capi/handles.hpp, the context of the object or None,
# the noun of "NULL pointer to <noun> handle").
HANDLES = {
    "fsdp_context_t": ("fsdp::Context", "context_from", "{h}", "a context"),
    "fsdp_unit_t": ("fsdp::Unit", "unit_from", "{h}.context()", "a unit"),
    "fsdp_optimizer_t": ("fsdp::Optimizer", "optimizer_from", "{h}.context()", "an optimizer"),
    "fsdp_grad_scaler_t": ("fsdp::GradScaler", "grad_scaler_from", "{h}.context()",
                           "a grad scaler"),
    "fsdp_request_t": ("fsdp::Request", "request_from", "*{h}.context", "a request"),
    "fsdp_plan_t": ("fsdp::plan::PlanModel", "plan_from", None, "a plan"),
}

# A lookup other than the handle kind's own.
LOOKUP = {
    "fsdp_abort": "context_for_abort",  # an aborted context is what it acts on
}

# The calls recorded in their context's call log, with the CallInfo (capi/calls.hpp) each records:
# `{h}` is the object its first argument names, the other arguments are in scope by their names.
# Every call fsdp.h documents as "Collective" whose first argument is a handle of a context must
# be here or in EXEMPT (the generator refuses otherwise); a few that are not documented
# collective are logged too (a wait, for the watchdog; the steps and phases debug mode compares).
# ("info", "when"): the call is recorded only when `when` holds.
SCOPES = {
    "fsdp_unit_create": 'context_call("fsdp_unit_create")',
    # the same call as fsdp_unit_create, as debug mode compares them
    "fsdp_unit_create_ex": 'context_call("fsdp_unit_create")',
    "fsdp_unit_tie": 'context_call("fsdp_unit_tie", {h}.id())',
    "fsdp_unshard": 'checked_unshard_call("fsdp_unshard", {h}, /*async=*/false)',
    "fsdp_unshard_async": 'checked_unshard_call("fsdp_unshard_async", {h}, /*async=*/true)',
    "fsdp_reduce_grads": 'checked_reduce_call("fsdp_reduce_grads", {h})',
    "fsdp_reduce_grads_async": 'checked_reduce_call("fsdp_reduce_grads_async", {h})',
    "fsdp_gather_params": 'gather_call("fsdp_gather_params", {h})',
    "fsdp_unit_wait": 'wait_call("fsdp_unit_wait")',
    "fsdp_begin_forward": 'context_call("fsdp_begin_forward")',
    "fsdp_begin_backward": 'context_call("fsdp_begin_backward")',
    "fsdp_broadcast": 'context_call("fsdp_broadcast", arguments_fingerprint('
                      '{{static_cast<uint64_t>(enum_int(group)), '
                      'static_cast<uint64_t>(static_cast<int64_t>(root)), bytes}}))',
    "fsdp_allreduce": 'context_call("fsdp_allreduce", arguments_fingerprint('
                      '{{static_cast<uint64_t>(enum_int(group)), '
                      'static_cast<uint64_t>(enum_int(op)), count}}))',
    "fsdp_optimizer_create": 'context_call("fsdp_optimizer_create")',
    "fsdp_optimizer_add_group": 'context_call("fsdp_optimizer_add_group", {h}.id())',
    # HFSDP: the step gathers across replicas; otherwise it is local
    "fsdp_optimizer_step": ('update_call("fsdp_optimizer_step", CallInfo::Phase::Continues, '
                            '{h}.id())',
                            "{h}.context().options().hfsdp"),
    "fsdp_clip_grad_norm": 'update_call("fsdp_clip_grad_norm", CallInfo::Phase::Restarts)',
    "fsdp_grad_scaler_create": 'context_call("fsdp_grad_scaler_create")',
    "fsdp_grad_scaler_unscale": 'update_call("fsdp_grad_scaler_unscale", '
                                'CallInfo::Phase::Restarts)',
    "fsdp_grad_scaler_step": 'update_call("fsdp_grad_scaler_step", CallInfo::Phase::Restarts)',
    "fsdp_step_boundary": 'context_call("fsdp_step_boundary")',
    "fsdp_checkpoint_save": 'context_call("fsdp_checkpoint_save")',
    "fsdp_checkpoint_save_async": 'context_call("fsdp_checkpoint_save_async")',
    "fsdp_checkpoint_load": 'context_call("fsdp_checkpoint_load")',
}

# Exported calls that return a status but are written by hand, and why.
HAND_WRITTEN = {
    "fsdp_record_error": "records the error a binding found: it returns that status, not its own",
}

# Calls whose body records the call itself, and why the entry point cannot.
BODY_SCOPES = {
    "fsdp_wait": "a local wait: its context is the request's, read through the pointer the call "
                 "clears, and the request is retired before the wait",
}

# Collective calls on a handle that record no call, and why.
EXEMPT = {
    "fsdp_finalize": "ends the context: its call log is freed inside the call",
}

# Collective calls whose argument errors of step 2 their bodies join into the call's agreement.
JOINED = {
    "fsdp_init", "fsdp_init_fcomm", "fsdp_unit_create", "fsdp_unit_create_ex",
    "fsdp_optimizer_create", "fsdp_grad_scaler_create", "fsdp_checkpoint_save_async",
    "fsdp_checkpoint_verify", "fsdp_checkpoint_verify_fcomm", "fsdp_checkpoint_diff",
    "fsdp_checkpoint_diff_fcomm",
}

# Collective calls whose argument errors fail the calling rank alone, and why that is safe.
ALONE = {
    "fsdp_mpi_init": "checked before MPI is started: there is no collective to join yet",
}
