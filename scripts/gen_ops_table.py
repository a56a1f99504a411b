"""Regenerates the supported-ops table in README.md from lib/ops.def.

The table sits between the markers <!-- ops:begin --> and <!-- ops:end -->.
Run with --check to exit non-zero when README.md is out of date (a test).
"""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
# TJ_OP(NAME, "text", ARITY, KIND, ATTRS, DTYPES, PATTERN, FORM, builder,
#       FLAGS)  // semantics
line_re = re.compile(
    r'^TJ_OP\(\s*(\w+),\s*"(\w+)",\s*(-?\d+),\s*(\w+),\s*(\w+),'
    r'\s*(\w+),\s*(\w+),\s*(\w+),\s*(\w+),\s*([\w|]+)\)\s*//\s*(.*)$')
kinds = {"LEAF": "leaf", "UNARY": "elementwise unary", "BINARY":
         "elementwise binary (broadcasting)", "TERNARY": "elementwise ternary",
         "REDUCTION": "reduction", "CONTRACTION": "contraction", "MOVEMENT":
         "data movement", "COMPOSITE": "composite (decomposed, then fused)",
         "CUSTOM": "custom (registered; a host call)"}


dtypes = {"ANY": "any", "NUMERIC": "numeric", "FLOAT": "float",
          "BOOL": "bool", "INT": "integer"}
flags = {"EXPENSIVE", "TRANSCENDENTAL", "BOOL_RESULT", "TYPED",
         "MEMORY_OPERANDS"}


def rows_of_ops_def():
    """Every TJ_OP row of lib/ops.def; a row that does not parse is an
    error, so that no op can drop out of the table unnoticed."""
    rows = []
    for number, line in enumerate(
            (root / "lib/ops.def").read_text().splitlines(), 1):
        if not line.startswith("TJ_OP("):
            continue
        m = line_re.match(line.strip())
        if not m:
            sys.exit(f"lib/ops.def:{number}: not a TJ_OP row of ten columns "
                     "and a // semantics comment")
        row = m.groups()
        names = set(row[9].split("|")) - {"0"}
        if row[3] not in kinds or row[5] not in dtypes or names - flags:
            sys.exit(f"lib/ops.def:{number}: unknown kind, dtypes or flag")
        rows.append(row)
    return rows


def table():
    rows = ["| op | kind | operands | pattern | properties | semantics |",
            "| --- | --- | --- | --- | --- | --- |"]
    for row in rows_of_ops_def():
        _, text, _, kind, _, dt, pattern, _, _, fl, doc = row
        doc = doc.replace("|", "\\|")
        props = ", ".join(f.lower() for f in fl.split("|") if f != "0")
        rows.append(f"| `{text}` | {kinds[kind]} | {dtypes[dt]} | "
                    f"{pattern.lower()} | {props} | {doc} |")
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
