"""The C entry points of libfsdp, generated from include/fsdp.h (fsdp_api.py) and
capi_calls.py (what the header does not say): generate.py's `capi` mode writes
  capi/entry_points.cpp   every exported call that returns a status: extern "C", its argument
                          checks, its CallScope, then its body, all inside capi::guard();
  capi/entry_bodies.hpp   the declaration of each body (fsdp::capi::body::<call>), which
                          src/capi/capi_*.cpp define.
The calls that return a string (fsdp_status_string, fsdp_last_error) cannot fail, and
capi_calls.HAND_WRITTEN names the others written by hand. check(api) is what the generator refuses: tests/check_call_scopes.py runs it."""
import re

import capi_calls
import fsdp_api
from fsdp_api import ApiError

NOTE = "Generated from include/fsdp.h by bindings/generate.py (capi_entries.py): do not edit."


def collective(f):
    return bool(re.search(r"\bCollective\b", f.doc))


def first_handle(f):
    """The first parameter when it is a handle passed by value, else None."""
    if f.params and f.params[0].ctype.stars == 0 and f.params[0].ctype.base in capi_calls.HANDLES:
        return f.params[0]
    return None


def optional_handle(f, p):
    """A handle argument its comment allows to be NULL ("or NULL for none"): the body receives a
    pointer to the object, nullptr for a NULL handle."""
    text = fsdp_api._doc_params(f.doc).get(p.name, ("", ""))[1]
    return "or NULL" in text or "may be NULL" in text


def handle_pointer(p):
    """A pointer to a handle that the call reads and writes (fsdp_unit_destroy's `unit`)."""
    return (p.ctype.stars == 1 and not p.ctype.const and p.ctype.base in capi_calls.HANDLES
            and p.direction == "in,out")


def required_outputs(f):
    return [p for p in f.params
            if p.direction == "out" and p.ctype.stars >= 1 and not p.optional]


def generated(api):
    return [f for f in api.functions if f.ret.base == "fsdp_status_t" and f.ret.stars == 0
            and f.name not in capi_calls.HAND_WRITTEN]


def check(api, pretend_collective=()):
    """The description's gaps, as messages: a collective call of a context that records no call,
    a collective call whose argument checks could fail one rank alone, a table entry naming no
    call (or a call the rule does not cover)."""
    problems = []
    names = {f.name for f in api.functions}
    for table in ("SCOPES", "EXEMPT", "JOINED", "ALONE", "LOOKUP", "HAND_WRITTEN", "BODY_SCOPES"):
        for name in getattr(capi_calls, table):
            if name not in names:
                problems.append(f"capi_calls.{table} names {name}, which fsdp.h does not export")
    for f in generated(api):
        is_collective = collective(f) or f.name in pretend_collective
        h = first_handle(f)
        in_context = h is not None and capi_calls.HANDLES[h.ctype.base][2] is not None
        if h is not None and optional_handle(f, h) and (is_collective
                                                          or f.name in capi_calls.SCOPES):
            problems.append(f"{f.name}: a collective call whose handle may be NULL")
        if f.name in capi_calls.SCOPES and not in_context:
            problems.append(f"{f.name}: in SCOPES, but its first argument is not a handle of a "
                            "context")
        if (is_collective and in_context and f.name not in capi_calls.SCOPES
                and f.name not in capi_calls.EXEMPT):
            problems.append(f"{f.name}: documented collective, but records no call (add it to "
                            "bindings/capi_calls.py SCOPES, or to EXEMPT with the reason)")
        outs = required_outputs(f)
        if ((is_collective or f.name in capi_calls.SCOPES) and outs
                and f.name not in capi_calls.JOINED and f.name not in capi_calls.ALONE):
            problems.append(f"{f.name}: collective with a required output "
                            f"({', '.join(p.name for p in outs)}): list it in JOINED (its body "
                            "joins the argument errors into its agreement) or ALONE")
        if f.name in capi_calls.JOINED and not outs:
            problems.append(f"{f.name}: in JOINED, but has no required output to check")
    return problems


def _param(p):
    t = str(p.ctype)
    return f"{t} {p.name}"


def _body_params(api, f):
    """The body's parameters: `local` for JOINED calls, the first handle as its object, an enum
    by const reference (the entry point's own argument object: a C caller may store any int in it,
    and copying it as the enum type would read an enum outside its range, undefined behaviour in
    C++; the body reads it with capi::enum_int, range-checks it, and only then converts it)."""
    out = []
    if f.name in capi_calls.JOINED:
        out.append("std::optional<fsdp::Error> local")
    h = first_handle(f)
    for p in f.params:
        if p is h:
            ref = "*" if optional_handle(f, p) else "&"
            out.append(f"{capi_calls.HANDLES[p.ctype.base][0]}{ref} {p.name}")
        elif p.ctype.stars == 0 and api.is_enum(p.ctype.base):
            out.append(f"const {p.ctype.base}& {p.name}")
        else:
            out.append(_param(p))
    return out


def entry(f):
    h = first_handle(f)
    params = ", ".join(_param(p) for p in f.params) or "void"
    lines = [f'extern "C" fsdp_status_t {f.name}({params}) {{',
             f'  return guard("{f.name}", [&] {{']
    args = [p.name for p in f.params]
    if h is not None:
        cxx, lookup, context, _ = capi_calls.HANDLES[h.ctype.base]
        lookup = capi_calls.LOOKUP.get(f.name, lookup)
        if optional_handle(f, h):
            lines.append(f'    {cxx}* self = {h.name} ? &{lookup}({h.name}, "{h.name}") : nullptr;')
        else:
            lines.append(f'    {cxx}& self = {lookup}({h.name}, "{h.name}");')
        args[0] = "self"
    for p in f.params:
        if handle_pointer(p):
            noun = capi_calls.HANDLES[p.ctype.base][3]
            lines.append(f'    if (!{p.name}) fail(Errc::InvalidArgument, "{p.name}: NULL pointer '
                         f'to {noun} handle");')
    outs = required_outputs(f)
    scope = capi_calls.SCOPES.get(f.name)
    if f.name in capi_calls.JOINED:
        checks = " ".join(f'require_output({p.name}, "{p.name}");' for p in outs)
        lines.append(f"    std::optional<fsdp::Error> local = fsdp::attempt([&] {{ {checks} }});")
        args.insert(0, "std::move(local)")
    else:
        lines += [f'    require_output({p.name}, "{p.name}");' for p in outs]
    call = f"    body::{f.name}({', '.join(args)});"
    if scope is None:
        lines.append(call)
    else:
        info, when = scope if isinstance(scope, tuple) else (scope, None)
        context = capi_calls.HANDLES[h.ctype.base][2].format(h="self")
        begin = f"const CallScope scope = {context}.begin_call({info.format(h='self')});"
        if when is None:
            lines += [f"    {begin}", call]
        else:
            lines += [f"    const auto run = [&] {{ {call.strip()} }};",
                      f"    if (!({when.format(h='self')})) return run();",
                      f"    {begin}", "    run();"]
    lines += ["  });", "}"]
    return "\n".join(lines)


def generate(api):
    problems = check(api)
    if problems:
        raise ApiError("the C entry points:\n  " + "\n  ".join(problems))
    decls = [f"void {f.name}({', '.join(_body_params(api, f))});" for f in generated(api)]
    header = ["// " + NOTE,
              "// The body of each C entry point: what the call does, after the generated entry",
              "// point (capi/entry_points.cpp) has checked its arguments and recorded the call.",
              "#pragma once", "", "#include <optional>", "", '#include "base/error.hpp"',
              '#include "capi/handles.hpp"', '#include "fsdp.h"', "",
              "namespace fsdp::capi::body {", ""] + decls + ["", "}  // namespace fsdp::capi::body",
                                                              ""]
    source = ["// " + NOTE, "#include <cstdint>", "#include <optional>", "",
              '#include "base/agreement.hpp"', '#include "capi/arguments.hpp"',
              '#include "capi/calls.hpp"', '#include "capi/entry_bodies.hpp"',
              '#include "capi/guard.hpp"', '#include "capi/handles.hpp"', "",
              "using namespace fsdp;", "using namespace fsdp::capi;", ""]
    source += [entry(f) + "\n" for f in generated(api)]
    return "\n".join(header), "\n".join(source)
