#!/usr/bin/env python3
"""Where one kernel launch's warps spend their time, by region of its SASS.

Reads the source page of an ncu report exported as CSV with the SASS
(`ncu --import R.ncu-rep --page source --csv --print-source sass > R.csv`; the report taken
with `--set full --import-source yes`) and prints, for the code before the kernel's main loop,
the loop and the code after it, the share of the warp stall samples, the share of the executed
instructions and the leading stall reasons; then the instructions with the most samples.

The main loop is the conditional backward branch spanning the most instructions (a loop's back
edge is conditional; the unconditional backward branches ptxas places after the exit are the
shuffles' divergent fallbacks jumping back into the loop). Offsets are from the kernel's first
instruction, as cuobjdump -sass prints them, so a region can be read beside a local disassembly.

Usage: ncu_regions.py R.csv [--hot N] [NAME:START-END ...]   (START, END: hex offsets)
"""

import csv
import re
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def load(path):
    """The kernel's instructions: (offset, SASS, samples, executed, {stall reason: samples})."""
    with open(path, errors="replace") as f:
        rows = list(csv.reader(f))
    at = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    header = rows[at]
    body = [r for r in rows[at + 1 :] if r and r[0].startswith("0x")]
    base = int(body[0][0], 16)
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    column = {h: i for i, h in enumerate(header)}
    out = []
    for r in body:
        # ncu prints absolute addresses, branch targets too: both become offsets here.
        text = re.sub(
            r"(BRA\b[^;]*?)0x([0-9a-f]+)", lambda m: m.group(1) + hex(int(m.group(2), 16) - base), r[1].strip()
        )
        stalls = {h[len("stall_") :]: number(r[column[h]]) for h in reasons}
        out.append((int(r[0], 16) - base, text, number(r[column[SAMPLES]]), number(r[column[EXECUTED]]), stalls))
    return out


def main_loop(code):
    """(first, last) offsets of the main loop, or None."""
    best = None
    for offset, text, *_ in code:
        m = re.match(r"@!?U?P\w+\s+BRA\s+0x([0-9a-f]+)", text)
        if not m:
            continue
        target = int(m.group(1), 16)
        if target < offset and (best is None or offset - target > best[1] - best[0]):
            best = (target, offset)
    return best


def summary(name, part, total_samples, total_executed):
    samples = sum(x[2] for x in part)
    executed = sum(x[3] for x in part)
    reasons = {}
    for x in part:
        for k, v in x[4].items():
            reasons[k] = reasons.get(k, 0.0) + v
    top = sorted(reasons.items(), key=lambda kv: -kv[1])[:3]
    lead = ", ".join(f"{k} {100 * v / max(samples, 1):.0f}%" for k, v in top if v)
    print(f"| {name} | {100 * samples / total_samples:.1f}% | {100 * executed / total_executed:.1f}% | {lead} |")


def main(argv):
    path, rest = argv[1], argv[2:]
    hot = 25
    if "--hot" in rest:
        i = rest.index("--hot")
        hot = int(rest[i + 1])
        del rest[i : i + 2]
    code = load(path)
    total_samples = sum(x[2] for x in code) or 1.0
    total_executed = sum(x[3] for x in code) or 1.0
    print(f"{len(code)} instructions, {total_samples:.0f} stall samples, {total_executed:.0f} warp instructions executed")
    regions = []
    loop = main_loop(code)
    if loop:
        start, end = loop
        print(f"main loop: {start:#x} to {end:#x}")
        regions += [("before the loop", 0, start - 1), ("the loop", start, end), ("after the loop", end + 1, 1 << 40)]
    for spec in rest:
        name, span = spec.split(":")
        lo, hi = (int(x, 16) for x in span.split("-"))
        regions.append((name, lo, hi))
    print("| region | stall samples | instructions | leading stall reasons |")
    print("|---|---|---|---|")
    for name, lo, hi in regions:
        summary(name, [x for x in code if lo <= x[0] <= hi], total_samples, total_executed)
    print(f"the {hot} instructions with the most samples:")
    for offset, text, samples, executed, stalls in sorted(code, key=lambda x: -x[2])[:hot]:
        top = sorted(stalls.items(), key=lambda kv: -kv[1])[:2]
        why = ", ".join(f"{k} {v:.0f}" for k, v in top if v)
        print(f"{offset:#07x} {100 * samples / total_samples:5.2f}% executed {executed:9.0f}  {text[:60]:60s} {why}")


if __name__ == "__main__":
    main(sys.argv)
