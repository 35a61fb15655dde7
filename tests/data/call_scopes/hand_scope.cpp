// test_call_scopes_reports_hand_scope: a body that records its call itself, which only the
// generated entry point may do (bindings/capi_calls.py SCOPES); tests/check_call_scopes.py must
// report it. Not compiled.
void fsdp_reduce_grads(fsdp::Unit& u) {
  const fsdp::CallScope call =
      u.context().begin_call(fsdp::capi::reduce_call("fsdp_reduce_grads", u));
  u.reduce_grads();
}
