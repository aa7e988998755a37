#!/usr/bin/env python3
"""Each kernel family's share of a decode step (issue 9), from Nsight Compute's CSV of the
kernels `asynct bench --profile-steps N` runs between cuProfilerStart and cuProfilerStop.

Collect (on the GPU machine; one batch per run, so the CSV holds that batch's steps alone):
  ncu --csv --log-file ncu-b1.csv --profile-from-start off --graph-profiling node \\
      --metrics gpu__time_duration.sum --print-units base --clock-control none --cache-control none \\
      device-bin/asynct bench --model /tmp/m05 --decode-batch 1 --context 1024 --profile-steps 1
  python3 scripts/step_profile.py ncu-b1.csv --steps 1 [--bench bench-decode.json --batch 1] [--json OUT]

--profile-from-start off leaves the load, the graph capture, the prefill and the warm-up out;
--graph-profiling node profiles each kernel of a whole-step CUDA graph's replay, so graph and eager
(--enforce-eager) steps are profiled alike. --clock-control none and --cache-control none keep
the GPU's own clocks and leave L2 as the previous kernel left it, as in a real step (ncu still
runs the kernels one at a time, so the sum has no overlap and no launch gaps). With --bench (the
JSON of an unprofiled `asynct bench --decode-batch` run) and --batch, the kernels' sum is set
beside the step's measured wall time: the rest is launch overhead and idle GPU.

Families: GEMM (gemm_skinny*, cuBLASLt's nvjet/cutlass/sm90 xmma kernels), attention (hp1_*),
norms (peri_ln*, qk_norm*: the q/k norm kernel also applies RoPE and writes the cache; the first
layer's input norm runs inside embedding_norm, counted as other),
other (embedding, silu_mul, sampling, anything unmatched, each listed by name).

Reads both of ncu's CSV pages: `details` (the default; a row per kernel and metric) and `raw`
(a row per kernel, a column per metric, a units row under the header).
Usage: step_profile.py NCU.csv [--steps N] [--bench FILE --batch B] [--json OUT]
       step_profile.py --self-test
"""
import argparse
import csv
import io
import json
import re
import sys

METRIC = "gpu__time_duration.sum"
FAMILIES = [
    ("GEMM", re.compile(r"gemm|nvjet|cutlass|xmma|gemv|splitkreduce|cublas", re.I)),
    ("attention", re.compile(r"^hp1_|flash|fmha|attention", re.I)),
    ("norms", re.compile(r"peri_ln|qk_norm|rms_?norm", re.I)),
]
UNIT_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}


def family(kernel):
    for name, pattern in FAMILIES:
        if pattern.search(kernel):
            return name
    return "other"


def number(text):
    """ncu's numbers may carry thousands separators."""
    return float(text.replace(",", ""))


def kernel_times(text):
    """[(kernel name, microseconds)], one per profiled launch, from either CSV page. Lines before
    the header (ncu's own ==PROF== messages, the application's output) are skipped."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ValueError("no ncu CSV header (a line starting with \"ID\") in the input")
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header, body = rows[0], rows[1:]
    col = {name: i for i, name in enumerate(header)}
    name_col = col.get("Kernel Name", col.get("Function Name"))
    if name_col is None:
        raise ValueError(f"no kernel name column in {header}")
    if "Metric Name" in col:
        return [(r[name_col], number(r[col["Metric Value"]]) * UNIT_US[r[col["Metric Unit"]]])
                for r in body if len(r) == len(header) and r[col["Metric Name"]] in (METRIC, "Duration")]
    if METRIC not in col:
        raise ValueError(f"neither a details page (Metric Name) nor a raw page with {METRIC}")
    units, body = body[0], body[1:]
    scale = UNIT_US[units[col[METRIC]]]
    return [(r[name_col], number(r[col[METRIC]]) * scale) for r in body if len(r) == len(header)]


def shares(times, steps):
    """Per family: launches and microseconds per step and share of the kernels' sum; per kernel the
    same, so 'other' names what it holds."""
    total = sum(us for _, us in times)
    fams, kernels = {}, {}
    for name, us in times:
        for table, key in ((fams, family(name)), (kernels, name)):
            entry = table.setdefault(key, {"launches": 0, "us": 0.0})
            entry["launches"] += 1
            entry["us"] += us
    for table in (fams, kernels):
        for entry in table.values():
            entry["launches"] /= steps
            entry["us"] /= steps
            entry["share"] = entry["us"] / (total / steps) if total else 0.0
    for name, entry in kernels.items():
        entry["family"] = family(name)
    ordered = {f: fams[f] for f, _ in FAMILIES + [("other", None)] if f in fams}
    return {"steps": steps, "kernel_us_per_step": total / steps, "launches_per_step": len(times) / steps,
            "families": ordered, "kernels": dict(sorted(kernels.items(), key=lambda kv: -kv[1]["us"]))}


def step_ms_of(bench_path, batch):
    """The median decode step at `batch` in asynct bench's JSON; None (said) when it has none, since
    the shares stand without it."""
    with open(bench_path) as f:
        bench = json.load(f)
    for point in bench.get("decode", []):
        if point["batch"] == batch:
            return point["step_ms"]["median"]
    print(f"{bench_path} has no decode point at batch {batch}: no wall time to set the kernels beside")
    return None


def report(result, step_ms=None):
    lines = [f"{result['launches_per_step']:.0f} launches, {result['kernel_us_per_step']:.1f} us of kernels per step"]
    if step_ms is not None:
        busy = result["kernel_us_per_step"] / (step_ms * 1e3)
        lines[0] += f"; the step takes {step_ms * 1e3:.1f} us, so the kernels fill {busy:.0%} of it"
    lines.append(f"{'family':<10} {'launches':>8} {'us':>9} {'share':>6}")
    for name, e in result["families"].items():
        lines.append(f"{name:<10} {e['launches']:>8.0f} {e['us']:>9.1f} {e['share']:>6.1%}")
    lines.append("kernels, longest first:")
    for name, e in result["kernels"].items():
        lines.append(f"  {e['family']:<9} {e['launches']:>5.0f} x {e['us'] / e['launches']:>7.2f} us = "
                     f"{e['us']:>8.1f} us {e['share']:>6.1%}  {name[:100]}")
    return "\n".join(lines)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv", nargs="?")
    p.add_argument("--steps", type=int, default=1, help="decode steps the profile holds (--profile-steps)")
    p.add_argument("--bench", help="asynct bench JSON of an unprofiled run, for the step's wall time")
    p.add_argument("--batch", type=int, help="the decode batch to read from --bench")
    p.add_argument("--json", help="write the shares here")
    p.add_argument("--self-test", action="store_true")
    args = p.parse_args(argv)
    if args.self_test:
        return self_test()
    if not args.csv or (args.bench is None) != (args.batch is None):
        p.error("give the CSV, and --bench with --batch or neither")
    with open(args.csv, errors="replace") as f:
        times = kernel_times(f.read())
    if not times:
        sys.exit(f"{args.csv}: no kernel was profiled (did cuProfilerStart run? is --profile-from-start off set?)")
    result = shares(times, args.steps)
    step_ms = step_ms_of(args.bench, args.batch) if args.bench else None
    result["step_ms"] = step_ms
    print(report(result, step_ms))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


DETAILS = '''==PROF== Connected to process 1 (asynct)
running on cuda
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","1","asynct","h","embedding","1","7","(256, 1, 1)","(1, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","2,000"
"1","1","asynct","h","gemm_skinny_m8_r4","1","7","(256, 1, 1)","(64, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","6.5"
"2","1","asynct","h","hp1_split_d128_g8_h2_sparse","1","7","(128, 1, 1)","(8, 4, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","9000"
"3","1","asynct","h","peri_ln_residual","1","7","(256, 1, 1)","(1, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","1500"
"4","1","asynct","h","nvjet_tst_64x8_64x16_4x1_v_bz_TNT","1","7","(128, 1, 1)","(1, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","76000"
"5","1","asynct","h","argmax_rows","1","7","(256, 1, 1)","(1, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","5000"
'''
RAW = '''"ID","Process ID","Process Name","Host Name","Kernel Name","gpu__time_duration.sum"
"","","","","","usecond"
"0","1","asynct","h","qk_norm_rope_cache","1.5"
"1","1","asynct","h","silu_mul","0.5"
"2","1","asynct","h","qk_norm_rope_cache","1.0"
'''


def self_test():
    times = kernel_times(DETAILS)
    assert times[0] == ("embedding", 2.0) and times[1] == ("gemm_skinny_m8_r4", 6.5), times
    assert [family(n) for n, _ in times] == ["other", "GEMM", "attention", "norms", "GEMM", "other"]
    r = shares(times, 1)
    assert abs(r["kernel_us_per_step"] - 100.0) < 1e-9 and r["launches_per_step"] == 6
    assert list(r["families"]) == ["GEMM", "attention", "norms", "other"]
    assert abs(r["families"]["GEMM"]["share"] - 0.825) < 1e-9 and r["families"]["other"]["launches"] == 2
    assert next(iter(r["kernels"])) == "nvjet_tst_64x8_64x16_4x1_v_bz_TNT", "longest first"
    raw = shares(kernel_times(RAW), 2)
    assert raw["launches_per_step"] == 1.5 and abs(raw["families"]["norms"]["us"] - 1.25) < 1e-9, raw
    assert raw["kernels"]["qk_norm_rope_cache"]["launches"] == 1.0
    text = report(r, step_ms=0.2)
    assert "fill 50% of it" in text and "GEMM" in text, text
    for bad in ("no header here", '"ID","Kernel Name","x"\n"0","k","1"'):
        try:
            kernel_times(bad)
        except ValueError:
            continue
        raise AssertionError(f"accepted {bad!r}")
    print("step_profile self-test passed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
