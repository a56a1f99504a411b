#!/usr/bin/env python3
"""Per-case kernel durations from ncu's raw CSV (ncu --csv --page raw
--metrics gpu__time_duration.sum,launch__grid_size ...) of
bench/cuda_wqgemm_variants.py --calls N, whose stderr lists the cases in
launch order ("# case ... : 1 + N calls", one kernel a call):

    python3 bench/ncu_durations.py ncu.csv variants.err

Prints each case's median duration in us over its N timed calls (the
first, cold call left out) and the launches' grid sizes.
"""

import csv
import statistics
import sys


def main():
    rows = []
    with open(sys.argv[1]) as f:
        lines = [ln for ln in f if ln.startswith('"')]
    reader = csv.DictReader(lines)
    for r in reader:
        try:
            d = float(r["gpu__time_duration.sum"].replace(",", ""))
        except (KeyError, ValueError):
            continue  # the units row
        rows.append((d, r.get("launch__grid_size", "?"),
                     r.get("Grid Size", "?")))
    cases = []
    with open(sys.argv[2]) as f:
        for ln in f:
            if ln.startswith("# case "):
                head, calls = ln[len("# case "):].rsplit(": 1 + ", 1)
                cases.append((head, int(calls.split()[0])))
    want = sum(1 + n for _, n in cases)
    print(f"# {len(rows)} launches, {want} expected for {len(cases)} cases")
    if len(rows) != want:
        for d, g, gs in rows:
            print(f"  {d / 1e3:8.2f} us grid {gs} ({g})")
        return
    at = 0
    for head, n in cases:
        ds = [d for d, _, _ in rows[at + 1:at + 1 + n]]
        print(f"{head:>36s}: {statistics.median(ds) / 1e3:7.2f} us "
              f"(min {min(ds) / 1e3:6.2f}, max {max(ds) / 1e3:6.2f}; cold "
              f"{rows[at][0] / 1e3:6.2f}) grid {rows[at][2]}")
        at += 1 + n


if __name__ == "__main__":
    main()
