"""Regenerates the supported-ops table in README.md from lib/ops.def.

The table sits between the markers <!-- ops:begin --> and <!-- ops:end -->.
Run with --check to exit non-zero when README.md is out of date (a test).
"""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
line_re = re.compile(
    r'^TJ_OP\(\s*(\w+),\s*"(\w+)",\s*(-?\d+),\s*(\w+),\s*(\w+)\)\s*//\s*(.*)$')
kinds = {"LEAF": "leaf", "UNARY": "elementwise unary", "BINARY":
         "elementwise binary (broadcasting)", "TERNARY": "elementwise ternary",
         "REDUCTION": "reduction", "CONTRACTION": "contraction", "MOVEMENT":
         "data movement", "COMPOSITE": "composite (decomposed, then fused)"}


def table():
    rows = ["| op | kind | semantics |", "| --- | --- | --- |"]
    for line in (root / "lib/ops.def").read_text().splitlines():
        m = line_re.match(line.strip())
        if m:
            _, text, _, kind, _, doc = m.groups()
            doc = doc.replace("|", "\\|")
            rows.append(f"| `{text}` | {kinds[kind]} | {doc} |")
    return "\n".join(rows)


def main():
    readme = root / "README.md"
    text = readme.read_text()
    begin, end = "<!-- ops:begin -->\n", "\n<!-- ops:end -->"
    i, j = text.index(begin) + len(begin), text.index(end)
    new = text[:i] + table() + text[j:]
    if "--check" in sys.argv:
        if new != text:
            print("README.md's op table is out of date: "
                  "run python3 scripts/gen_ops_table.py")
            return 1
        print("README.md's op table matches lib/ops.def")
        return 0
    readme.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
