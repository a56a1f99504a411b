"""The ctypes mirrors in python/tensorjit/_lib.py against the C structs.

Usage: test_layout.py LAYOUT_DUMP. LAYOUT_DUMP (layout_dump.c) prints the
size of each public struct the binding mirrors and the offset and size of
each of its fields (nested structs flattened as NAME.A.B); every one must
match the ctypes class, and neither side may have a field the other lacks.
"""

import ctypes
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                "python"))
from tensorjit import _lib  # noqa: E402
from tensorjit.custom_op import (  # noqa: E402
    CustomLaunch_t, CustomOpDesc_t, CustomType_t)

MIRRORS = {
    "tj_value_t": _lib.Value_t,
    "tj_tensor_t": _lib.Tensor_t,
    "tj_custom_attrs_t": _lib.CustomAttrs_t,
    "tj_quant_attrs_t": _lib.QuantAttrs_t,
    "tj_allocator_t": _lib.Allocator_t,
    "tj_context_options_t": _lib.ContextOptions_t,
    "tj_compile_options_t": _lib.CompileOptions_t,
    "tj_executable_stats_t": _lib.ExecutableStats_t,
    "tj_profile_entry_t": _lib.ProfileEntry_t,
    "tj_profile_report_t": _lib.ProfileReport_t,
    "tj_scoreboard_row_t": _lib.ScoreboardRow_t,
    "tj_scoreboard_t": _lib.Scoreboard_t,
    "tj_verify_options_t": _lib.VerifyOptions_t,
    "tj_verify_value_t": _lib.VerifyValue_t,
    "tj_verify_report_t": _lib.VerifyReport_t,
    "tj_ladder_rung_t": _lib.LadderRung_t,
    "tj_ladder_report_t": _lib.LadderReport_t,
    "tj_partition_options_t": _lib.PartitionOptions_t,
    "tj_partition_stats_t": _lib.PartitionStats_t,
    "tj_quantize_weights_options_t": _lib.QuantizeWeightsOptions_t,
    "tj_calibrate_options_t": _lib.CalibrateOptions_t,
    "tj_custom_type_t": CustomType_t,
    "tj_custom_op_desc_t": CustomOpDesc_t,
    "tj_custom_launch_t": CustomLaunch_t,
}


def ctypes_layout(name, cls, base=0, out=None):
    """{NAME.FIELD: (offset, size)} of |cls|, nested structs flattened."""
    out = {} if out is None else out
    for field in cls._fields_:
        fname, ftype = field[0], field[1]
        desc = getattr(cls, fname)
        key = f"{name}.{fname}"
        out[key] = (base + desc.offset, desc.size)
        if issubclass(ftype, ctypes.Structure):
            ctypes_layout(key, ftype, base + desc.offset, out)
    return out


def main():
    text = subprocess.run([sys.argv[1]], check=True, capture_output=True,
                          text=True).stdout
    c_sizes, c_fields = {}, {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            c_sizes[parts[0]] = int(parts[1])
        else:
            c_fields[parts[0]] = (int(parts[1]), int(parts[2]))
    errors = []
    if set(c_sizes) != set(MIRRORS):
        errors.append(f"structs: C {sorted(c_sizes)} vs the test's "
                      f"{sorted(MIRRORS)}")
    for name, cls in MIRRORS.items():
        if name not in c_sizes:
            continue
        if ctypes.sizeof(cls) != c_sizes[name]:
            errors.append(f"sizeof({name}): C {c_sizes[name]}, ctypes "
                          f"{cls.__name__} {ctypes.sizeof(cls)}")
        py = ctypes_layout(name, cls)
        c = {k: v for k, v in c_fields.items()
             if k.split(".", 1)[0] == name}
        for key in sorted(set(py) | set(c)):
            if key not in py:
                errors.append(f"{key}: in C, missing from {cls.__name__}")
            elif key not in c:
                errors.append(f"{key}: in {cls.__name__}, not in C (or not "
                              f"printed by layout_dump.c)")
            elif py[key] != c[key]:
                errors.append(f"{key}: C (offset, size) {c[key]}, ctypes "
                              f"{py[key]}")
    for e in errors:
        print("FAIL", e)
    if errors:
        sys.exit(1)
    print(f"ok: {len(MIRRORS)} structs, {len(c_fields)} fields")


if __name__ == "__main__":
    main()
