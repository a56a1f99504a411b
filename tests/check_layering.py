"""Checks DESIGN.md's layering rules over the source tree.

- lib/ includes no LLVM, CUDA or libffi header (only jit/ and backends/ may).
- lib/, jit/ and backends/ never abort, exit or print to stdout: a library
  must not kill or talk over its host.
"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1])
problems = []
foreign = re.compile(r'#\s*include\s*[<"](llvm-c/|llvm/|cuda|ffi\.h)')
forbidden = re.compile(
    r'\b(abort|exit|_Exit|quick_exit)\s*\(|\bprintf\s*\(|\bputs\s*\(|'
    r'\bputchar\s*\(|fprintf\s*\(\s*stdout|\bstdout\b')
for top in ("lib", "kir", "jit", "backends"):
    for path in sorted((root / top).rglob("*")):
        if path.suffix not in (".c", ".h", ".def"):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("//")[0]
            if top in ("lib", "kir") and foreign.search(code):
                problems.append(f"{path}:{n}: {top}/ includes a backend header: {line.strip()}")
            if forbidden.search(code):
                problems.append(f"{path}:{n}: library code must not exit or print to stdout: {line.strip()}")
for p in problems:
    print(p)
print(f"layering: {len(problems)} problems")
sys.exit(1 if problems else 0)
