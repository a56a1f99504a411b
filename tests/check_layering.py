"""Checks the layering rules of docs/architecture.md ("Layers") over the tree.

Usage: check_layering.py SOURCE_ROOT [--nm NM] [--archive LAYER LIBRARY]...

The layers, lowest first, and what each may use:

    lib        (lib/, lib/passes/)  nothing but itself
    kir        (kir/)               lib
    jit        (jit/)               lib, kir
    reference  (backends/reference) lib
    runtime    (backends/runtime)   lib, kir, reference (the backend
                                    interface, the run plan, host tensors)
    x86        (backends/x86)       lib, kir, jit, reference, runtime
    cuda       (backends/cuda)      lib, kir, jit, reference, runtime
    driver     (backends/*.c, *.h)  all of the above
    onnx       (onnx/)              lib, and the public tj_reference_run
                                    (folding); no layer uses onnx

Every layer may include the public headers (include/). Forbidden arrows,
each checked by include graph and, given the layers' static libraries
(--archive, as meson's `layering` test passes them), by their undefined
symbols:

- lib -> {kir, jit, backends}; so also passes -> backends;
- kir -> {jit, backends}; jit -> backends;
- reference -> {kir, jit, runtime, x86, cuda}; runtime -> {jit, x86,
  cuda}; x86 <-> cuda; anything -> driver;
- anything outside jit/ -> llvm-c (also through a jit/ header that
  includes one, or by calling an LLVM function);
- anything outside backends/cuda -> CUDA types (<cuda*.h>,
  backends/cuda/cuda_abi.h, even through a header, or a tj_cu_*_t name);
- lib/ and kir/ -> libffi;
- python/tensorjit -> anything but the public API: every function the
  ctypes binding loads is a TJ_API function of include/.

And lib/, kir/, jit/ and backends/ never abort, exit or print to stdout: a
library must not kill or talk over its host.

Each problem is printed as `file:line: <arrow broken>: detail`.
"""
import ast
import pathlib
import re
import subprocess
import sys

# Arrows broken on purpose, as (file, arrow), each with the change that
# removes it. Empty: every arrow holds. (An entry that no longer matches a
# problem is itself reported, so the list cannot go stale.)
ALLOWLIST = set()

FORBIDDEN = {
    "lib": {"kir", "jit", "reference", "runtime", "x86", "cuda", "driver"},
    "kir": {"jit", "reference", "runtime", "x86", "cuda", "driver"},
    "jit": {"reference", "runtime", "x86", "cuda", "driver"},
    "reference": {"kir", "jit", "runtime", "x86", "cuda", "driver"},
    "runtime": {"jit", "x86", "cuda", "driver"},
    "x86": {"cuda", "driver"},
    "cuda": {"x86", "driver"},
    "driver": {"onnx"},
    "onnx": {"kir", "jit", "runtime", "x86", "cuda", "driver"},
}
# No layer below uses the importer.
for _layer in ("lib", "kir", "jit", "reference", "runtime", "x86", "cuda"):
    FORBIDDEN[_layer].add("onnx")
LIBRARY_TREES = ("lib", "kir", "jit", "backends", "onnx")
SOURCE_SUFFIXES = (".c", ".cc", ".h", ".def")

include_re = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
llvm_re = re.compile(r"^llvm(-c)?/")
cuda_header_re = re.compile(r"^cuda[A-Za-z_]*\.h$")
cuda_type_re = re.compile(r"\btj_cu_\w+_t\b")
exit_print_re = re.compile(
    r"\b(abort|exit|_Exit|quick_exit)\s*\(|\bprintf\s*\(|\bputs\s*\(|"
    r"\bputchar\s*\(|fprintf\s*\(\s*stdout|\bstdout\b")
CUDA_ABI = "backends/cuda/cuda_abi.h"


def layer_of(rel):
    """The layer of a path relative to the root, or None (not a layer)."""
    parts = pathlib.PurePosixPath(rel).parts
    if not parts:
        return None
    if parts[0] in ("lib", "kir", "jit", "onnx"):
        return parts[0]
    if parts[0] == "backends":
        if len(parts) == 2:
            return "driver"
        if parts[1] in ("reference", "runtime", "x86", "cuda"):
            return parts[1]
    return None


def strip_comments(text):
    """|text| with comments blanked, newlines kept (so lines still count)."""
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group(0))
    return re.sub(r"//[^\n]*|/\*.*?\*/|"
                  r"\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'",
                  lambda m: blank(m) if m.group(0)[0] == "/" else m.group(0),
                  text, flags=re.S)


class Tree:
    def __init__(self, root):
        self.root = root
        self.code = {}      # rel -> comment-free lines
        self.includes = {}  # rel -> [(line, kind, name, resolved rel|None)]
        for top in LIBRARY_TREES + ("tools",):
            for path in sorted((root / top).rglob("*")):
                if path.suffix in SOURCE_SUFFIXES and path.is_file():
                    self.load(path.relative_to(root).as_posix())

    def load(self, rel):
        if rel in self.code:
            return
        text = strip_comments((self.root / rel).read_text())
        self.code[rel] = text.splitlines()
        self.includes[rel] = []
        for n, line in enumerate(self.code[rel], 1):
            m = include_re.match(line)
            if not m:
                continue
            kind, name = m.groups()
            resolved = self.resolve(rel, kind, name)
            self.includes[rel].append((n, kind, name, resolved))
            if resolved:
                self.load(resolved)

    def resolve(self, rel, kind, name):
        here = pathlib.PurePosixPath(rel).parent
        for base in ((here, pathlib.PurePosixPath("."),
                      pathlib.PurePosixPath("include"))
                     if kind == '"' else (pathlib.PurePosixPath("include"),)):
            cand = (base / name).as_posix()
            if (self.root / cand).is_file():
                return cand
        return None

    def reaches(self, rel, pred, seen=None):
        """The include chain from |rel| to a header |pred| accepts, or None.
        pred(kind, name, resolved) is asked of every include on the way."""
        seen = set() if seen is None else seen
        if rel in seen:
            return None
        seen.add(rel)
        for _, kind, name, resolved in self.includes.get(rel, []):
            if pred(kind, name, resolved):
                return [name]
            if resolved:
                chain = self.reaches(resolved, pred, seen)
                if chain:
                    return [name] + chain
        return None


def is_llvm(kind, name, resolved):
    return kind == "<" and bool(llvm_re.match(name))


def is_cuda(kind, name, resolved):
    return resolved == CUDA_ABI or (resolved is None and
                                    bool(cuda_header_re.match(name)))


def include_problems(tree, problems):
    for rel, includes in tree.includes.items():
        layer = layer_of(rel)
        top = rel.split("/")[0]
        if top not in LIBRARY_TREES + ("tools",):
            continue
        who = layer or top
        for n, kind, name, resolved in includes:
            where = f"{rel}:{n}"
            target = layer_of(resolved) if resolved else None
            if layer and target in FORBIDDEN[layer]:
                problems.append((rel, f"{layer} -> {target}",
                                 f"{where}: {layer} -> {target}: "
                                 f"#include \"{name}\""))
            # LLVM: only jit/. Reported where the chain leaves jit/ (a
            # header of another layer that reaches LLVM is reported itself).
            if layer != "jit":
                chain = None
                if is_llvm(kind, name, resolved):
                    chain = [name]
                elif resolved and layer_of(resolved) == "jit":
                    sub = tree.reaches(resolved, is_llvm)
                    chain = [name] + sub if sub else None
                if chain:
                    problems.append((rel, f"{who} -> llvm-c",
                                     f"{where}: {who} -> llvm-c: "
                                     f"#include {' -> '.join(chain)}"))
            # CUDA types: only backends/cuda.
            if layer != "cuda":
                chain = None
                if is_cuda(kind, name, resolved):
                    chain = [name]
                elif resolved and layer_of(resolved) == "cuda":
                    sub = tree.reaches(resolved, is_cuda)
                    chain = [name] + sub if sub else None
                if chain:
                    problems.append((rel, f"{who} -> CUDA types",
                                     f"{where}: {who} -> CUDA types: "
                                     f"#include {' -> '.join(chain)}"))
            if top in ("lib", "kir") and kind == "<" and name == "ffi.h":
                problems.append((rel, f"{who} -> libffi",
                                 f"{where}: {who} -> libffi: "
                                 f"#include <{name}>"))
        if layer != "cuda":
            for n, line in enumerate(tree.code[rel], 1):
                m = cuda_type_re.search(line)
                if m:
                    problems.append((rel, f"{who} -> CUDA types",
                                     f"{rel}:{n}: {who} -> CUDA types: "
                                     f"uses {m.group(0)}"))


def exit_print_problems(tree, problems):
    for rel, lines in tree.code.items():
        if rel.split("/")[0] not in LIBRARY_TREES:
            continue
        for n, line in enumerate(lines, 1):
            if exit_print_re.search(line):
                problems.append((rel, "library -> exit/stdout",
                                 f"{rel}:{n}: library code must not exit or "
                                 f"print to stdout: {line.strip()}"))


def symbol_problems(tree, nm, archives, problems):
    """Arrows by symbol: each layer's undefined symbols against the global
    symbols the other layers' static libraries define."""
    defined = {}   # symbol -> layer
    undefined = []  # (layer, member, symbol)
    members = set()  # (layer, member)
    for layer, path in archives:
        run = subprocess.run([nm, "-A", path], capture_output=True,
                             text=True)
        if run.returncode != 0:
            sys.exit(f"check_layering.py: {nm} -A {path} failed: "
                     f"{run.stderr.strip()}")
        out = run.stdout
        for line in out.splitlines():
            # "ARCHIVE:MEMBER:[ADDRESS] KIND SYMBOL"
            if not line.startswith(path + ":"):
                continue
            member, _, rest = line[len(path) + 1:].partition(":")
            fields = rest.split()
            if len(fields) < 2:
                continue
            kind, sym = fields[-2], fields[-1]
            # A thin archive's member is a path; meson names the object
            # after its source, "lib/passes/fold.c" -> "lib_passes_fold.c.o".
            member = pathlib.PurePath(member).name
            members.add((layer, member))
            if kind == "U":
                undefined.append((layer, member, sym))
            elif kind.isupper():
                defined.setdefault(sym, layer)
    sources = [rel for rel in tree.code if rel.endswith((".c", ".cc"))]
    # Each library holds its own directory's files (the *_sources lists).
    for layer, member in sorted(members):
        # Code generated into the build directory (onnx/'s protobuf-c
        # code) belongs to the library that builds it.
        if member.startswith("meson-generated_"):
            continue
        rel, _ = source_line(tree, sources, member, None)
        if layer_of(rel) != layer:
            problems.append((rel, f"{layer} library",
                             f"{rel}:1: built into the {layer} library but "
                             f"belongs to {layer_of(rel) or 'no layer'}"))
    for layer, member, sym in undefined:
        if layer != "jit" and re.match(r"LLVM[A-Z]", sym):
            rel, n = source_line(tree, sources, member, sym)
            problems.append((rel, f"{layer} -> llvm-c",
                             f"{rel}:{n}: {layer} -> llvm-c: calls {sym}"))
            continue
        target = defined.get(sym)
        if target is None or target == layer or \
                target not in FORBIDDEN.get(layer, set()):
            continue
        rel, n = source_line(tree, sources, member, sym)
        problems.append((rel, f"{layer} -> {target}",
                         f"{rel}:{n}: {layer} -> {target}: calls or uses "
                         f"{sym} (defined in the {target} library)"))


def source_line(tree, candidates, member, sym):
    """The source of object |member| (meson names it after the path, '/'
    made '_') and the first line there that names |sym|."""
    stem = member[:-2] if member.endswith(".o") else member
    for rel in candidates:
        if rel.replace("/", "_") == stem:
            for n, line in enumerate(tree.code[rel] if sym else [], 1):
                if re.search(r"\b" + re.escape(sym) + r"\b", line):
                    return rel, n
            return rel, 1
    return member, 0


def python_problems(root, problems):
    """Every function python/tensorjit loads through ctypes must be a TJ_API
    function declared in include/ (the binding sees the public API only)."""
    api = set()
    for header in sorted((root / "include").rglob("*.h")):
        text = strip_comments(header.read_text())
        api.update(re.findall(r"\bTJ_API\b[^;{(]*?\b(tj_\w+)\s*\(", text))
    package = root / "python" / "tensorjit"
    for path in sorted(package.glob("*.py")):
        rel = path.relative_to(root).as_posix()
        text = path.read_text()
        for name, n in ctypes_names(text):
            if name not in api:
                problems.append((rel, "python -> internal",
                                 f"{rel}:{n}: python -> internal: {name} is "
                                 "not a TJ_API function of include/"))


def ctypes_names(text):
    """(name, line) of every C function the module loads: the keys of a
    _SIGNATURES dict (with its `for x in TUPLE: _SIGNATURES[prefix + x]`
    loops), getattr(lib, "tj_...") and lib.tj_...(...) calls."""
    tree = ast.parse(text)
    tuples = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], ast.Name):
            try:
                value = ast.literal_eval(node.value)
            except (ValueError, SyntaxError):
                continue
            if isinstance(value, tuple) and all(isinstance(v, str)
                                                for v in value):
                tuples[node.targets[0].id] = value
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key in node.keys:
                if isinstance(key, ast.Constant) and isinstance(key.value, str) \
                        and key.value.startswith("tj_"):
                    names.append((key.value, key.lineno))
        elif isinstance(node, ast.For) and isinstance(node.iter, ast.Name) \
                and node.iter.id in tuples and isinstance(node.target,
                                                          ast.Name):
            for sub in ast.walk(node):
                if isinstance(sub, ast.Subscript) and \
                        isinstance(sub.slice, ast.BinOp) and \
                        isinstance(sub.slice.left, ast.Constant) and \
                        isinstance(sub.slice.right, ast.Name) and \
                        sub.slice.right.id == node.target.id:
                    for suffix in tuples[node.iter.id]:
                        names.append((sub.slice.left.value + suffix,
                                      sub.lineno))
        elif isinstance(node, ast.Attribute) and node.attr.startswith("tj_"):
            names.append((node.attr, node.lineno))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "getattr" and len(node.args) >= 2 and \
                isinstance(node.args[1], ast.Constant) and \
                str(node.args[1].value).startswith("tj_"):
            names.append((node.args[1].value, node.lineno))
    return names


def main(argv):
    root = pathlib.Path(argv[1])
    nm, archives = "nm", []
    i = 2
    while i < len(argv):
        if argv[i] == "--nm":
            nm, i = argv[i + 1], i + 2
        elif argv[i] == "--archive":
            archives.append((argv[i + 1], argv[i + 2]))
            i += 3
        else:
            sys.exit(f"check_layering.py: unknown argument {argv[i]}")
    unknown = [layer for layer, _ in archives if layer not in FORBIDDEN]
    if unknown:
        sys.exit(f"check_layering.py: unknown layer {unknown[0]}")
    tree = Tree(root)
    found = []
    include_problems(tree, found)
    exit_print_problems(tree, found)
    if archives:
        symbol_problems(tree, nm, archives, found)
    python_problems(root, found)
    problems, allowed, seen = [], set(), set()
    for rel, arrow, text in found:
        if text in seen:
            continue
        seen.add(text)
        if (rel, arrow) in ALLOWLIST:
            allowed.add((rel, arrow))
        else:
            problems.append(text)
    # Without the libraries, an entry only the symbols show cannot match.
    for rel, arrow in sorted(ALLOWLIST - allowed if archives else ()):
        problems.append(f"{rel}: {arrow}: allowlisted in check_layering.py "
                        "but no longer broken: remove the entry")
    for p in problems:
        print(p)
    print(f"layering: {len(problems)} problems ({len(allowed)} allowlisted "
          f"arrows, {len(archives)} libraries checked by symbol)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
