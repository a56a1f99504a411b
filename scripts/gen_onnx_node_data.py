#!/usr/bin/env python3
"""Writes the ONNX backend node suite of the installed onnx package.

The onnx wheel ships the node tests as Python cases, not as data files
(Debian's libonnx-testdata holds onnx 1.12's). This writes them in the
layout tests/onnx/onnx_node_test.c reads: OUT/test_NAME/model.onnx and
OUT/test_NAME/test_data_set_N/{input,output}_K.pb, by handing the node
cases to onnx's own writer (onnx.backend.test.cmd_tools.generate_data).

  python3 scripts/gen_onnx_node_data.py OUT
"""
import argparse
import os
import sys
import types
import warnings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="directory to fill (node/ is made in it)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # the cases' own numpy warnings
    import onnx
    import onnx.backend.test.case.node as node
    import onnx.backend.test.cmd_tools as cmd_tools

    cases = node.collect_testcases(None)
    # generate_data writes what model_test.collect_testcases returns, under
    # OUT/<kind>/<name>; the node cases have kind "node".
    cmd_tools.model_test = types.SimpleNamespace(
        collect_testcases=lambda: cases)
    cmd_tools.generate_data(types.SimpleNamespace(output=args.out))
    print(f"onnx {onnx.__version__}: {len(cases)} node tests in "
          f"{os.path.join(args.out, 'node')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
