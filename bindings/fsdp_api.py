"""include/fsdp.h read as the one description of the C ABI that every binding is generated from
(bindings/generate.py) and checked against (tests/check_bindings.py).

The reader is strict: every exported declaration, typedef and initializer macro must be one of
the forms below, every type one it knows, and every pointer argument a function writes through
(a non-const pointer) documented with its direction (@param[out] or @param[in,out]); anything
else stops the build with the declaration named, rather than leaving a call out of a binding.

What C does not say, the comments do: "may be NULL" / "NULL for ..." make an argument optional
(a NULL pointer), [out] / [in,out] its direction. What neither says is in ARGUMENT_FORMS: the
pointer arguments that address many elements (an array) or a caller's buffer rather than one
value."""
import re

# Pointer arguments that are not one value: "array" (many elements of their type, count given
# by another argument or by the doc comment) or "buffer" (memory the caller passes by address,
# a type(c_ptr) in Fortran). Every other pointer to a number is one value.
ARGUMENT_FORMS = {
    ("fsdp_grad_none", "none"): "array",
    ("fsdp_param_info", "shape"): "array",
    ("fsdp_allreduce", "data"): "buffer",
    ("fsdp_unit_create", "descs"): "array",
    ("fsdp_unit_create_ex", "descs"): "array",
}

# C types by value, as (ctypes name, Fortran declaration).
SCALARS = {
    "int": ("ctypes.c_int", "integer(c_int)"),
    "unsigned": ("ctypes.c_uint", "integer(c_int)"),
    "size_t": ("ctypes.c_size_t", "integer(c_size_t)"),
    "int64_t": ("ctypes.c_int64", "integer(c_int64_t)"),
    "uint32_t": ("ctypes.c_uint32", "integer(c_int32_t)"),
    "uint64_t": ("ctypes.c_uint64", "integer(c_int64_t)"),
    "double": ("ctypes.c_double", "real(c_double)"),
}


class ApiError(Exception):
    pass


class CType:
    """A parsed C type: [const] base [*] [const] [*]."""

    def __init__(self, const, base, stars, inner_const):
        self.const, self.base, self.stars, self.inner_const = const, base, stars, inner_const

    def __str__(self):
        s = ("const " if self.const else "") + self.base
        if self.stars >= 1:
            s += "*"
        if self.inner_const:
            s += " const"
        if self.stars == 2:
            s += "*"
        return s


class Param:
    def __init__(self, name, ctype, direction="in", optional=False, form="value"):
        self.name, self.ctype = name, ctype
        self.direction, self.optional, self.form = direction, optional, form


class Function:
    def __init__(self, name, ret, params, doc):
        self.name, self.ret, self.params, self.doc = name, ret, params, doc

    @property
    def takes_comm(self):
        return any(p.ctype.base == "MPI_Comm" for p in self.params)


class Api:
    def __init__(self):
        self.version = None
        self.enums = []        # (typedef name, [(enumerator, value)]), sentinels included
        self.defines = {}      # NAME: integer value, for the simple numeric #defines
        self.handles = []      # typedef names of opaque handles
        # Structs of another header the calls pass by address only (`struct DLManagedTensor;`):
        # a binding sees an address (void*), never a field.
        self.foreign = []
        self.callbacks = []    # (typedef name, return CType, [Param])
        self.structs = []      # (typedef name, [(field, CType)])
        self.initializers = []  # (macro, struct typedef, [values as text])
        self.functions = []

    def enum_value(self, name):
        for _, members in self.enums:
            for n, v in members:
                if n == name:
                    return v
        return None

    def is_enum(self, t):
        return any(name == t for name, _ in self.enums)

    def struct(self, name):
        return dict(self.structs).get(name)

    def function(self, name):
        for f in self.functions:
            if f.name == name:
                return f
        return None


_TYPE = re.compile(r"(const\s+)?(?:struct\s+)?(\w+)\s*(\*?)\s*(const\s*)?(\*?)")


def _ctype(text, where):
    m = _TYPE.fullmatch(text.strip())
    if not m or (m.group(4) and not m.group(3)):
        raise ApiError(f"{where}: cannot read the type '{text.strip()}'")
    return CType(bool(m.group(1)), m.group(2), len(m.group(3)) + len(m.group(5)),
                 bool(m.group(4)))


def _split_decl(text, where):
    """'const char* name' -> (CType, 'name')."""
    m = re.fullmatch(r"(.*?[\s*])(\w+)", text.strip(), re.S)
    if not m:
        raise ApiError(f"{where}: cannot read the declaration '{text.strip()}'")
    return _ctype(m.group(1), where), m.group(2)


def _check_known(api, t, where):
    known = (set(SCALARS) | {"void", "char", "MPI_Comm", "fsdp_status_t"} | set(api.handles)
             | set(api.foreign)
             | {n for n, _ in api.enums} | {n for n, _ in api.structs}
             | {n for n, _, _ in api.callbacks})
    if t.base not in known:
        raise ApiError(f"{where}: unknown type '{t.base}'")
    if t.base == "void" and t.stars == 0:
        raise ApiError(f"{where}: a void argument")


def _doc_params(doc):
    out = {}
    doc = re.sub(r"\n\s*\*(?!/)", " ", doc)  # the comment's line-leading asterisks
    for m in re.finditer(r"@param\[(in|out|in,\s*out)\]\s+(\w+)(.*?)(?=@param|@return|\*/|$)",
                         doc, re.S):
        out[m.group(2)] = (m.group(1).replace(" ", ""), " ".join(m.group(3).split()))
    return out


def _classify(api, fname, p, doc):
    """Direction, optionality and form of argument p of function fname, from its type, its
    @param line and ARGUMENT_FORMS."""
    t = p.ctype
    where = f"{fname}({p.name})"
    documented = _doc_params(doc).get(p.name)
    text = documented[1] if documented else ""
    p.optional = t.stars > 0 and ("may be NULL" in text or "NULL for" in text
                                   or text.startswith("NULL"))
    form = ARGUMENT_FORMS.get((fname, p.name))
    if t.stars == 0:
        p.direction, p.form = "in", "value"
        return
    if t.base in api.foreign:
        if t.stars == 1:  # an address the caller hands in
            p.direction, p.form = "in", "buffer"
            return
        if t.inner_const:
            raise ApiError(f"{where}: a foreign struct {t.base} passes by address only")
    # T*: the call writes the T; T**: the pointer (const T** included); T* const*: neither.
    writes = ((t.stars == 2 and not t.inner_const)
              or (t.stars == 1 and not t.const and t.base not in ("void", "char")))
    if writes:
        if not documented or documented[0] == "in":
            raise ApiError(f"{where}: a pointer the call may write through needs "
                           "@param[out] or @param[in,out] in its comment")
        p.direction = documented[0]
    else:
        p.direction = "in"
    if form:
        p.form = form
    elif t.stars == 2 and not t.inner_const:
        p.form = "value"  # an output pointer (void** data, const char** name)
    elif t.base == "void" and t.stars == 1:
        p.form = "buffer"
    elif t.base == "char" and t.stars == 1:
        p.form = "string" if t.const else "buffer"  # char*: a buffer of `capacity` bytes
    elif t.stars == 2 and t.inner_const:
        p.form = "array"  # const T* const*: one pointer per element
    elif t.stars == 1 and t.const and t.base in api.handles:
        p.form = "array"  # const handle*: nunits handles
    elif t.stars == 1 and t.const and api.struct(t.base) is not None:
        p.form = "struct"
    elif t.stars == 1 and t.const:
        raise ApiError(f"{where}: a const pointer to {t.base}: an array or one value? "
                       "Say so in bindings/fsdp_api.py ARGUMENT_FORMS")
    else:
        p.form = "struct" if api.struct(t.base) is not None else "value"
        # A pointer its comment sizes by another argument or calls room or an array is many
        # values: it must be in ARGUMENT_FORMS rather than bound as one.
        counts = set(re.findall(r"`(\w+)`\s+(?:values|elements|flags|extents|entries)", text))
        if t.stars == 1 and (counts & set(_doc_params(doc)) - {p.name}
                             or re.search(r"room for|\barray\b", text)):
            raise ApiError(f"{where}: its comment ('{text}') reads as many values: list it in "
                           "bindings/fsdp_api.py ARGUMENT_FORMS as an array or a buffer")


def _statements(text):
    """(doc comment before it or "", statement) for the header's preprocessor lines and C
    statements, in order: comments blanked first (a field's comment may hold a ';'), code meant
    for C++ only (#ifdef __cplusplus ... #endif) dropped."""
    comments = list(re.finditer(r"/\*.*?\*/|//[^\n]*", text, re.S))
    code = re.sub(r"/\*.*?\*/|//[^\n]*", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text,
                  flags=re.S)
    code = re.sub(r"^#ifdef __cplusplus\n.*?^#endif", lambda m: re.sub(r"[^\n]", " ", m.group(0)),
                  code, flags=re.S | re.M)
    i, previous_end = 0, 0
    while True:
        while i < len(code) and code[i].isspace():
            i += 1
        if i >= len(code):
            return
        start = i
        if code[i] == "#":
            while True:
                nl = code.find("\n", i)
                nl = len(code) if nl < 0 else nl
                if code[i:nl].rstrip().endswith("\\"):
                    i = nl + 1
                    continue
                i = nl
                break
            # a macro's own comment is the one before it, kept in its text for _preprocessor
            yield "", text[start:i]
        else:
            depth = 0
            while i < len(code) and not (code[i] == ";" and depth == 0):
                depth += {"{": 1, "}": -1}.get(code[i], 0)
                i += 1
            if i >= len(code):
                raise ApiError(f"unterminated declaration: '{code[start:start + 80].strip()}'")
            i += 1
            docs = [c.group(0) for c in comments
                    if c.group(0).startswith("/**") and previous_end <= c.start()
                    and c.end() <= start]
            yield (docs[-1] if docs else ""), code[start:i]
        previous_end = i


def parse(path):
    api = Api()
    text = open(path).read()
    for doc, stmt in _statements(text):
        if stmt.startswith("#"):
            _preprocessor(api, stmt)
        elif stmt.lstrip().startswith("typedef"):
            _typedef(api, stmt)
        elif stmt.lstrip().startswith("FSDP_EXPORT"):
            _function(api, stmt, doc)
        elif re.fullmatch(r"\s*struct (\w+);\s*", stmt):
            api.foreign.append(re.fullmatch(r"\s*struct (\w+);\s*", stmt).group(1))
        else:
            raise ApiError(f"cannot read this declaration of {path}: '{stmt.strip()[:80]}'")
    for name, typename, _ in api.initializers:
        if api.struct(typename) is None:
            raise ApiError(f"{name}: sizeof({typename}) is not a struct of the header")
    for f in api.functions:
        if f.takes_comm and twin(api, f) is None:
            raise ApiError(f"{f.name} takes an MPI_Comm and has no _fcomm twin (a Fortran "
                           "handle, int, first): Fortran and Python cannot call it")
    if not api.functions or not api.structs or not api.enums:
        raise ApiError(f"{path}: no functions, structs or enums found")
    major, minor, patch = (api.defines[f"FSDP_VERSION_{p}"] for p in ("MAJOR", "MINOR", "PATCH"))
    api.version = (major, minor, patch)
    api.defines["FSDP_VERSION"] = major * 10000 + minor * 100 + patch
    return api


def _preprocessor(api, line):
    line = re.sub(r"\\\n", " ", line)
    line = re.sub(r"/\*.*?\*/", "", line, flags=re.S).strip()
    m = re.fullmatch(r"#\s*define\s+(\w+)\s+(.*)", line, re.S)
    if not m:
        return  # include guards, #if, #include, macros with arguments
    name, body = m.group(1), m.group(2).strip()
    if body.startswith("{"):
        inner = body.strip()
        if not inner.endswith("}"):
            raise ApiError(f"{name}: cannot read the initializer '{body}'")
        values = [v.strip() for v in inner[1:-1].split(",")]
        first = re.fullmatch(r"sizeof\((\w+)\)", values[0])
        if not first:
            raise ApiError(f"{name}: an initializer must start with sizeof(<struct>)")
        api.initializers.append((name, first.group(1), values))
    elif re.fullmatch(r"-?(0x[0-9A-Fa-f]+|\d+)[uUlL]*", body):
        api.defines[name] = int(body.rstrip("uUlL"), 0)


def _typedef(api, code):
    code = " ".join(code.split())
    m = re.fullmatch(r"typedef enum (\w+) \{(.*)\} (\w+);", code)
    if m:
        members, value = [], -1
        for item in (i.strip() for i in m.group(2).split(",")):
            if not item:
                continue
            e = re.fullmatch(r"(FSDP_\w+)(?: = (-?\d+))?", item)
            if not e:
                raise ApiError(f"{m.group(3)}: cannot read enumerator '{item}'")
            value = int(e.group(2)) if e.group(2) is not None else value + 1
            members.append((e.group(1), value))
        api.enums.append((m.group(3), members))
        return
    m = re.fullmatch(r"typedef struct (\w+) ?\{(.*)\} (\w+);", code)
    if m:
        fields = []
        for f in (x.strip() for x in m.group(2).split(";")):
            if f:
                t, n = _split_decl(f, f"{m.group(3)}.{f}")
                _check_known(api, t, f"{m.group(3)}.{n}")
                fields.append((n, t))
        api.structs.append((m.group(3), fields))
        return
    m = re.fullmatch(r"typedef struct \w+ ?\* ?(\w+);", code)
    if m:
        api.handles.append(m.group(1))
        return
    m = re.fullmatch(r"typedef (.+?) ?\(\*(\w+)\)\((.*)\);", code)
    if m:
        ret = _ctype(m.group(1), m.group(2))
        params = []
        for a in m.group(3).split(","):
            t, n = _split_decl(a, m.group(2))
            _check_known(api, t, f"{m.group(2)}({n})")
            p = Param(n, t)
            if t.stars and not t.const and t.base != "void":
                raise ApiError(f"{m.group(2)}({n}): a callback's output pointer")
            p.form = ("buffer" if t.base == "void" and t.stars else
                      "struct" if t.stars else "value")
            params.append(p)
        api.callbacks.append((m.group(2), ret, params))
        return
    raise ApiError(f"cannot read the typedef '{code[:100]}'")


def _function(api, code, doc):
    code = " ".join(code.split())
    m = re.fullmatch(r"FSDP_EXPORT (.+?) ?\b(fsdp_\w+) ?\((.*)\);", code)
    if not m or "(" in m.group(3):
        raise ApiError(f"cannot read the exported declaration '{code[:100]}'")
    name = m.group(2)
    ret = _ctype(m.group(1), name)
    if not ((ret.base == "fsdp_status_t" and ret.stars == 0)
            or (ret.base == "char" and ret.const and ret.stars == 1)):
        raise ApiError(f"{name}: returns {ret}; bindings know fsdp_status_t and const char*")
    params = []
    if m.group(3).strip() != "void":
        for a in m.group(3).split(","):
            t, n = _split_decl(a, name)
            _check_known(api, t, f"{name}({n})")
            p = Param(n, t)
            _classify(api, name, p, doc)
            params.append(p)
    if name.endswith("_fcomm") and (not params or params[0].ctype.base != "int"):
        raise ApiError(f"{name}: an _fcomm twin takes the Fortran handle (int) first")
    if any(f.name == name for f in api.functions):
        raise ApiError(f"{name}: declared twice")
    api.functions.append(Function(name, ret, params, doc))


def check_forms(api):
    """Every ARGUMENT_FORMS entry names an argument of the header (the table cannot drift)."""
    for (fname, pname) in ARGUMENT_FORMS:
        f = api.function(fname)
        if f is None or pname not in [p.name for p in f.params]:
            raise ApiError(f"ARGUMENT_FORMS names {fname}({pname}), which fsdp.h does not have")


def twin(api, f):
    """The _fcomm twin of a function that takes an MPI_Comm, or None."""
    return api.function(f.name + "_fcomm")
