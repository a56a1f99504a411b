#!/usr/bin/env python3
"""One line a profiled kernel from ncu's text report (the default --page
details of `ncu --section SpeedOfLight --section WarpStateStats --section
LaunchStats --section Occupancy --metrics ...`), for the RESULTS tables:

    python3 bench/ncu_summary.py ncu.txt [NAME_REGEX]

Columns: kernel (shortened), grid, duration us, SM cycles, warp
instructions (M), tensor pipe %, FMA pipe %, DRAM read MB, L2 MB, shared
bank conflicts (K), registers, achieved occupancy %, cycles between issues,
and the stall ncu's Warp State rule names first, with its share.
"""

import re
import sys

FIELDS = {
    "dram__bytes_read.sum": "dram",
    "lts__t_bytes.sum": "l2",
    "smsp__inst_executed.sum": "inst",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed":
        "tensor",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_elapsed": "fma",
    "sm__cycles_elapsed.max": "cycles",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum": "conflicts",
    "Duration": "us",
    "Registers Per Thread": "regs",
    "Achieved Occupancy": "occ",
    "Warp Cycles Per Issued Instruction": "cpi",
}
SCALE = {"Kbyte": 1e-3, "Mbyte": 1.0, "Gbyte": 1e3, "byte": 1e-6,
         "ms": 1e3, "us": 1.0, "ns": 1e-3}


def number(text):
    return float(text.replace(",", ""))


def parse(path):
    kernels, cur = [], None
    head = re.compile(r"^  (\S.*?) \((\d+), (\d+), (\d+)\)x\((\d+), \d+, \d+\)"
                      r", Context")
    stall = re.compile(r"spends ([\d.]+) cycles being stalled (.*?)\.")
    share = re.compile(r"represents about ([\d.]+)% of the total")
    for line in open(path, errors="replace").read().splitlines():
        m = head.match(line)
        if m:
            cur = {"name": m.group(1), "grid": "x".join(m.group(2, 3, 4)),
                   "block": m.group(5)}
            kernels.append(cur)
            continue
        if cur is None:
            continue
        parts = line.split()
        for key, short in FIELDS.items():
            if line.strip().startswith(key + " ") and short not in cur:
                unit = parts[-2] if len(parts) >= 2 else ""
                try:
                    v = number(parts[-1])
                except ValueError:
                    continue
                if short in ("dram", "l2", "us"):
                    v *= SCALE.get(unit, 1.0)
                cur[short] = v
        cur.setdefault("text", []).append(line.strip())
    for k in kernels:
        # ncu wraps its rules' text: search the kernel's lines joined.
        joined = re.sub(r"\s+", " ", " ".join(k.pop("text", [])))
        s = stall.search(joined)
        if s:
            sh = share.search(joined, s.end())
            k["stall"] = "%s cycles %s%s" % (
                s.group(1), s.group(2)[:70],
                " (%s%%)" % sh.group(1) if sh else "")
    return kernels


def short(name):
    name = re.sub(r"^void ", "", name)
    name = re.sub(r"\(.*$", "", name)
    return name[:58]


def main():
    ks = parse(sys.argv[1])
    pat = re.compile(sys.argv[2]) if len(sys.argv) > 2 else None
    print("| kernel | grid | us | cycles | warp inst M | tensor % | fma % | "
          "DRAM MB | L2 MB | bank conflicts K | regs | occupancy % | "
          "cycles/issue | first stall |")
    print("|" + "---|" * 14)
    for k in ks:
        if pat and not pat.search(k["name"]):
            continue
        g = k.get
        print("| %s | %s | %.1f | %.0fK | %.1f | %.1f | %.1f | %.1f | %.0f | "
              "%.0f | %.0f | %.1f | %.2f | %s |" % (
                  short(k["name"]), k["grid"], g("us", 0), g("cycles", 0) / 1e3,
                  g("inst", 0) / 1e6, g("tensor", 0), g("fma", 0),
                  g("dram", 0), g("l2", 0), g("conflicts", 0) / 1e3,
                  g("regs", 0), g("occ", 0), g("cpi", 0), g("stall", "")))


if __name__ == "__main__":
    main()
