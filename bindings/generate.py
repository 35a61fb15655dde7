#!/usr/bin/env python3
"""Generates the bindings of libfsdp from include/fsdp.h (read by fsdp_api.py) at build time
(bindings/CMakeLists.txt); nothing it writes is edited by hand.

  generate.py layout-c  fsdp.h OUT.c
      a C program that writes every public struct's size and field offsets, as the C compiler
      lays them out, to the file named by its argument (the other modes read that file)
  generate.py python    fsdp.h LAYOUT OUT.py [COPY.py]
      libfsdp/_abi.py: the enums, the constants, the structs as ctypes classes (checked against
      the C offsets when imported), the initializer macros' values, and the ctypes prototype
      (argtypes, restype) of every exported call; COPY: the same file written a second time
      (beside the library in the build tree, where the source tree's package finds it)
  generate.py fortran   fsdp.h LAYOUT OUT_DIR WRAPPERS...
      module fsdp_c (fsdp_c.f90): the constants, the handles and structs as bind(C) types whose
      `size` is the C compiler's sizeof, an abstract interface per callback type, a function per
      initializer macro, and a bind(C) interface per exported call; and fsdp_public.inc, the
      names module fsdp re-exports. WRAPPERS are the sources of module fsdp: a call they define
      under its C name (a Fortran form with strings, arrays, optional arguments) is bound here as
      c_<name> for them to wrap; every other call is bound and re-exported under its C name.
  generate.py capi      fsdp.h OUT_DIR
      the C entry points themselves: capi/entry_points.cpp and capi/entry_bodies.hpp under
      OUT_DIR (capi_entries.py, with what capi_calls.py adds to the header), laid out by
      clang-format where it is installed
  generate.py capi-check fsdp.h DIR
      fails unless DIR holds what `capi` writes, whitespace aside (src/capi/generated/, the copy
      a build without Python compiles)
A call that takes an MPI_Comm is bound through its _fcomm twin (a Fortran handle), which module
fsdp must wrap under the call's own name; tests/check_bindings.py checks that every exported
call reached both bindings."""
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import capi_entries  # noqa: E402
import fsdp_api  # noqa: E402
from fsdp_api import SCALARS  # noqa: E402

HEADER_NOTE = "Generated from include/fsdp.h by bindings/generate.py: do not edit."


def class_name(struct):
    """fsdp_checkpoint_options_t -> CheckpointOptions: the Python class of a struct."""
    return "".join(w.capitalize() for w in struct[len("fsdp_"):-len("_t")].split("_"))


def read_layout(path, api):
    sizes, offsets = {}, {}
    for line in open(path):
        key, value = line.split()
        if "." in key:
            offsets[key] = int(value)
        else:
            sizes[key] = int(value)
    for name, fields in api.structs:
        if name not in sizes or any(f"{name}.{f}" not in offsets for f, _ in fields):
            raise fsdp_api.ApiError(f"{path} lacks the layout of {name}: measured from another "
                                    "header?")
    return sizes, offsets


def layout_c(api, out):
    lines = ["/* " + HEADER_NOTE + " */", "#include <stddef.h>", "#include <stdio.h>",
             '#include "fsdp.h"', "int main(int argc, char** argv) {",
             "  FILE* f = argc > 1 ? fopen(argv[1], \"w\") : NULL;",
             "  if (!f) return 1;"]
    for name, fields in api.structs:
        lines.append(f'  fprintf(f, "{name} %zu\\n", sizeof({name}));')
        for field, _ in fields:
            lines.append(f'  fprintf(f, "{name}.{field} %zu\\n", offsetof({name}, {field}));')
    lines += ["  return fclose(f) == 0 ? 0 : 1;", "}"]
    open(out, "w").write("\n".join(lines) + "\n")


def initializer_values(api, macro, struct, values, sizes, where):
    """The initializer's values by field name: ints, floats, None (NULL) or an enumerator's
    name (kept for Fortran, whose constants carry the same names)."""
    fields = api.struct(struct)
    if len(values) > len(fields):
        raise fsdp_api.ApiError(f"{macro}: {len(values)} values for {len(fields)} fields")
    out = {}
    for (field, _), text in zip(fields, values):
        text = text.strip()
        if re.fullmatch(r"sizeof\(\w+\)", text):
            out[field] = ("int", sizes[text[7:-1]])
        elif text == "NULL":
            out[field] = ("null", None)
        elif re.fullmatch(r"-?\d+[uUlL]*", text):
            out[field] = ("int", int(text.rstrip("uUlL")))
        elif re.fullmatch(r"-?(\d+\.\d*|\d*\.\d+|\d+)([eE][-+]?\d+)?", text):
            out[field] = ("float", float(text))
        elif api.enum_value(text) is not None:
            out[field] = ("name", text, api.enum_value(text))
        elif text in api.defines:
            out[field] = ("name", text, api.defines[text])
        else:
            raise fsdp_api.ApiError(f"{where}: cannot evaluate '{text}' for field {field}")
    return out


# ---- Python ---------------------------------------------------------------------------------

def py_type(api, t):
    if t.stars == 0:
        if t.base in SCALARS:
            return SCALARS[t.base][0]
        if api.is_enum(t.base) or t.base == "fsdp_status_t":
            return "ctypes.c_int"
        if t.base in api.handles or t.base in dict((c[0], 1) for c in api.callbacks):
            return "ctypes.c_void_p"
        if api.struct(t.base) is not None:
            return class_name(t.base)
    if t.base == "char" and t.stars == 1:
        return "ctypes.c_char_p"
    if t.stars == 1 and (t.base == "void" or t.base in api.foreign):
        return "ctypes.c_void_p"
    inner = fsdp_api.CType(t.const, t.base, t.stars - 1, False)
    return f"ctypes.POINTER({py_type(api, inner)})"


def generate_python(api, layout, out, copy=None):
    sizes, offsets = read_layout(layout, api)
    o = [f'"""{HEADER_NOTE}', "The C ABI as ctypes declarations; libfsdp/_capi.py builds on it.\"\"\"",
         "import ctypes", "", f"VERSION = {api.version!r}", "",
         "# Every enum of the header: {typedef: {enumerator: value}}, *_COUNT sentinels aside.",
         "ENUMS = {"]
    for name, members in api.enums:
        body = ", ".join(f"{n!r}: {v}" for n, v in members if not n.endswith("_COUNT"))
        o.append(f"    {name!r}: {{{body}}},")
    o += ["}", "# The numeric #defines.", "DEFINES = {"]
    o += [f"    {n!r}: {v}," for n, v in sorted(api.defines.items())]
    o += ["}", ""]
    for name, fields in api.structs:
        o.append(f"\nclass {class_name(name)}(ctypes.Structure):")
        o.append(f'    """{name}"""')
        o.append("    _fields_ = [")
        for field, t in fields:
            o.append(f"        ({field!r}, {py_type(api, t)}),")
        o.append("    ]")
    o += ["", "", "# Each struct's size and field offsets as the C compiler laid them out.",
          "C_LAYOUT = {"]
    for name, fields in api.structs:
        o.append(f"    {class_name(name)!r}: ({sizes[name]}, {{"
                 + ", ".join(f"{f!r}: {offsets[name + '.' + f]}" for f, _ in fields) + "}),")
    o += ["}", "", "# The initializer macros: {macro: (class, {field: value})}; None is NULL.",
          "INITIALIZERS = {"]
    for macro, struct, values in api.initializers:
        vals = initializer_values(api, macro, struct, values, sizes, macro)
        body = ", ".join(f"{f!r}: {v[-1] if v[0] != 'null' else None!r}" for f, v in vals.items())
        o.append(f"    {macro!r}: ({class_name(struct)!r}, {{{body}}}),")
    o += ["}", "", "# Every exported call but those taking an MPI_Comm (bound through their _fcomm",
          "# twins): name: (argtypes, restype).", "PROTOTYPES = {"]
    for f in api.functions:
        if f.takes_comm:
            continue
        args = ", ".join(py_type(api, p.ctype) for p in f.params)
        ret = "ctypes.c_char_p" if f.ret.base == "char" else "ctypes.c_int"
        o.append(f"    {f.name!r}: ([{args}], {ret}),")
    o += ["}", "", "",
          "def _check_layout():",
          "    for cls, (size, fields) in C_LAYOUT.items():",
          "        c = globals()[cls]",
          "        got = {f: getattr(c, f).offset for f in fields}",
          "        if ctypes.sizeof(c) != size or got != fields:",
          "            raise ImportError(f\"libfsdp: ctypes lays {cls} out as {ctypes.sizeof(c)} \"",
          "                              f\"bytes {got}, the C compiler as {size} bytes {fields}\")",
          "", "", "_check_layout()", ""]
    text = "\n".join(o)
    for path in [out] + ([copy] if copy else []):
        write(path, text)


# ---- Fortran ----------------------------------------------------------------------------------

def f_scalar(api, base):
    if base in SCALARS:
        return SCALARS[base][1]
    if api.is_enum(base) or base == "fsdp_status_t":
        return "integer(c_int)"
    if base in api.handles or api.struct(base) is not None:
        return f"type({base})"
    raise fsdp_api.ApiError(f"no Fortran type for {base}")


def cb_dummy(api, p, where):
    """A callback's dummy argument: a C string the library passes arrives as its address
    (c_f_pointer or a loop to c_null_char reads it); the rest as for a call."""
    if p.ctype.base == "char" and p.ctype.stars == 1:
        return f"type(c_ptr), value :: {p.name}"
    return f_dummy(api, p, where)


def f_dummy(api, p, where):
    """The declaration of one dummy argument of a bind(C) interface."""
    t, opt = p.ctype, (", optional" if p.optional else "")
    if p.form == "value" and t.stars == 0:
        if t.base in [c[0] for c in api.callbacks]:
            return f"type(c_funptr), value :: {p.name}"
        return f"{f_scalar(api, t.base)}, value :: {p.name}"
    if p.form == "buffer":
        return f"type(c_ptr), value :: {p.name}"  # c_null_ptr for NULL (value cannot be optional)
    if p.form == "string":
        return f"character(kind=c_char), intent(in){opt} :: {p.name}(*)"
    intent = {"in": "in", "out": "out", "in,out": "inout"}[p.direction]
    if p.form == "array":
        element = "type(c_ptr)" if t.stars == 2 else f_scalar(api, t.base)
        return f"{element}, intent({intent}){opt} :: {p.name}(*)"
    if p.form == "struct":
        # A struct the call writes is read too (its `size`): inout, never out, which would
        # reset it to the type's defaults.
        return f"type({t.base}), intent({'in' if t.const else 'inout'}){opt} :: {p.name}"
    if p.form == "value" and t.stars == 2:
        return f"type(c_ptr), intent({intent}){opt} :: {p.name}"
    if p.form == "value" and t.stars == 1:
        return f"{f_scalar(api, t.base)}, intent({intent}){opt} :: {p.name}"
    raise fsdp_api.ApiError(f"{where}: no Fortran form for {t} ({p.form})")


def wrap(head, items, tail, indent):
    """Fortran free-form lines of at most 100 characters: head item, item, ... tail."""
    lines, line = [], head
    for i, item in enumerate(items):
        piece = item + (", " if i + 1 < len(items) else "")
        if len(line) + len(piece) + len(tail) > 98:
            lines.append(line.rstrip() + " &")
            line = indent + piece
        else:
            line += piece
    lines.append(line + tail)
    return lines


def f_literal(v, ftype):
    if v[0] == "null":
        return "c_null_funptr" if ftype == "type(c_funptr)" else "c_null_ptr"
    if v[0] == "name":
        return v[1]
    if v[0] == "float":
        text = repr(v[1]).replace("e", "d")
        return text if "d" in text else text + "d0"
    return str(v[1])


def f_field_type(api, t):
    if t.stars == 0 and t.base in [c[0] for c in api.callbacks]:
        return "type(c_funptr)"
    if t.stars > 0 or t.base in api.handles:
        return "type(c_ptr)"
    return f_scalar(api, t.base)


def wrapped_names(paths):
    """Names module fsdp defines itself (functions, subroutines, generic interfaces)."""
    names = set()
    for path in paths:
        for m in re.finditer(r"^\s*(?:(?:pure|elemental|recursive|module)\s+)*"
                             r"(?:function|subroutine|interface)\s+(fsdp_\w+)",
                             open(path).read(), re.M | re.I):
            names.add(m.group(1).lower())
    return names


def generate_fortran(api, layout, out_dir, wrappers):
    sizes, _ = read_layout(layout, api)
    wrapped = wrapped_names(wrappers)
    o = [f"! {HEADER_NOTE}",
         "! The C ABI of libfsdp (include/fsdp.h) as seen from Fortran: the constants, the",
         "! handles and structs as bind(C) types (`size` set to the C compiler's sizeof, the",
         "! other fields to the initializer macro's values), one function per initializer macro,",
         "! and a bind(C) interface to every exported call. A call module fsdp gives a Fortran",
         "! form of its own (strings, arrays, communicators, optional arguments) is c_<name> here;",
         "! the others keep their C names and module fsdp re-exports them. An output C accepts as",
         "! NULL (\"may be NULL\" in fsdp.h) is an `optional` dummy: left out, it reaches C as NULL.",
         "! Applications use module fsdp; this module is for those who want the raw calls.",
         "module fsdp_c", "  use, intrinsic :: iso_c_binding", "  implicit none", ""]
    public = []
    # Constants.
    o.append("  ! ---- Versions and #defines")
    for name, value in sorted(api.defines.items()):
        if name == "FSDP_VERSION":
            continue
        o.append(f"  integer(c_int), parameter :: {name} = {value}")
        public.append(name)
    o.append("  integer(c_int32_t), parameter :: FSDP_VERSION = FSDP_VERSION_MAJOR * 10000 &")
    o.append("                                                  + FSDP_VERSION_MINOR * 100 "
             "+ FSDP_VERSION_PATCH")
    public.append("FSDP_VERSION")
    for typename, members in api.enums:
        o.append(f"  ! ---- {typename}")
        for n, v in members:
            if not n.endswith("_COUNT"):  # sentinels: not part of the ABI
                o.append(f"  integer(c_int), parameter :: {n} = {v}")
                public.append(n)
    # Handles.
    o += ["", "  ! ---- Handles: one C pointer each, passed by value where C takes the handle and",
          "  ! by reference where C takes a pointer to it (creation, destruction)."]
    for h in api.handles:
        o += [f"  type, bind(C) :: {h}", "    type(c_ptr) :: ptr = c_null_ptr", "  end type"]
        public.append(h)
    # Structs.
    o += ["", "  ! ---- Structs. Those that grow at their end start with `size`: the C sizeof."]
    first_macro = {}
    for macro, struct, values in api.initializers:
        if struct not in first_macro or macro == struct.upper()[:-2] + "_INIT":
            first_macro[struct] = (macro, values)
    for name, fields in api.structs:
        vals = {}
        if name in first_macro:
            macro, values = first_macro[name]
            vals = initializer_values(api, macro, name, values, sizes, macro)
        o.append(f"  type, bind(C) :: {name}")
        for field, t in fields:
            ftype = f_field_type(api, t)
            if field in vals:
                init = f_literal(vals[field], ftype)
            elif field == "size" and t.base == "size_t":
                init = str(sizes[name])
            elif ftype == "type(c_ptr)":
                init = "c_null_ptr"
            elif ftype == "type(c_funptr)":
                init = "c_null_funptr"
            else:
                init = "0"
            o.append(f"    {ftype} :: {field} = {init}")
        o.append("  end type")
        public.append(name)
    # Callbacks.
    o += ["", "  ! ---- Callback types: a bind(C) procedure of this interface, passed with c_funloc.",
          "  abstract interface"]
    for name, ret, params in api.callbacks:
        if ret.stars != 0 or ret.base not in ("void", "int"):
            raise fsdp_api.ApiError(f"{name}: a callback returns int or nothing")
        kind, result = (("subroutine", "") if ret.base == "void" else ("function", " result(res)"))
        o += wrap(f"    {kind} {name}(", [p.name for p in params], f"){result} bind(C)",
                  "        ")
        o.append("      import")
        for p in params:
            o.append("      " + cb_dummy(api, p, name))
        if ret.base == "int":
            o.append("      integer(c_int) :: res")
        o.append(f"    end {kind}")
        public.append(name)
    o.append("  end interface")
    # Interfaces.
    o += ["", "  interface"]
    bound = []
    for f in api.functions:
        if f.takes_comm:
            continue  # bound through its _fcomm twin (fsdp_api.parse checked it has one)
        names = [p.name for p in f.params]
        if "res" in names:
            raise fsdp_api.ApiError(f"{f.name}: an argument named res (the result's name here)")
        raw = f.name.endswith("_fcomm") or f.name.lower() in wrapped
        fname = ("c_" if raw else "") + f.name
        o += wrap(f"    function {fname}(", names, ") result(res) &", "        ")
        o.append(f"        bind(C, name='{f.name}')")
        o.append("      import")
        for p in f.params:
            o.append("      " + f_dummy(api, p, f.name))
        o.append("      type(c_ptr) :: res" if f.ret.base == "char" else "      integer(c_int) :: res")
        o.append("    end function")
        if not raw:
            public.append(f.name)
        bound.append(f.name)
    o += ["  end interface", "", "contains", ""]
    # Initializer macros as functions.
    for macro, struct, values in api.initializers:
        vals = initializer_values(api, macro, struct, values, sizes, macro)
        fn = macro.lower()
        o += [f"  ! {macro} of fsdp.h.", f"  pure function {fn}() result(v)",
              f"    type({struct}) :: v"]
        for field, t in api.struct(struct):
            if field in vals:
                o.append(f"    v%{field} = {f_literal(vals[field], f_field_type(api, t))}")
        o += ["  end function", ""]
        public.append(fn)
    o.append("end module fsdp_c")
    write(os.path.join(out_dir, "fsdp_c.f90"), "\n".join(o) + "\n")
    pub = [f"! {HEADER_NOTE}", "! What module fsdp re-exports from module fsdp_c."]
    pub += wrap("  public :: ", public, "", "            ")
    write(os.path.join(out_dir, "fsdp_public.inc"), "\n".join(pub) + "\n")


def write(path, text):
    """Writes `path` (always: make compares its time with the inputs')."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def clang_formatted(text, path):
    """`text` as clang-format lays out a file at `path` (the repository's .clang-format), where
    clang-format is installed; as it is elsewhere (the build still compiles it)."""
    tool = shutil.which("clang-format")
    if not tool:
        return text
    done = subprocess.run([tool, "--style=file", f"--assume-filename={os.path.abspath(path)}"],
                          input=text, capture_output=True, text=True)
    return done.stdout if done.returncode == 0 and done.stdout else text


def tokens(text):
    """`text` without its whitespace: what a layout (clang-format's or none) leaves unchanged."""
    return "".join(text.split())


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    mode, header = argv[1], argv[2]
    try:
        api = fsdp_api.parse(header)
        fsdp_api.check_forms(api)
        if mode == "layout-c":
            layout_c(api, argv[3])
        elif mode == "python":
            generate_python(api, argv[3], argv[4], argv[5] if len(argv) > 5 else None)
        elif mode == "fortran":
            generate_fortran(api, argv[3], argv[4], argv[5:])
        elif mode in ("capi", "capi-check"):
            texts = dict(zip(("entry_bodies.hpp", "entry_points.cpp"), capi_entries.generate(api)))
            for name, text in texts.items():
                path = os.path.join(argv[3], "capi", name)
                if mode == "capi":
                    write(path, clang_formatted(text, path))
                elif not os.path.exists(path) or tokens(open(path).read()) != tokens(text):
                    sys.exit(f"generate.py: {path} is not what fsdp.h gives: run "
                             f"generate.py capi {header} {argv[3]}")
            if mode == "capi-check":
                print(f"{argv[3]}: the C entry points are current")
        else:
            sys.exit(f"generate.py: unknown mode {mode}\n{__doc__}")
    except fsdp_api.ApiError as e:
        sys.exit(f"generate.py: {header}: {e}")


if __name__ == "__main__":
    main(sys.argv)
