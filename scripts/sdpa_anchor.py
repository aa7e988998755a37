#!/usr/bin/env python3
"""PyTorch SDPA anchor for the kernel benchmark (SPEC section 7), run on the device machine in the
same call as `asynct-bench`, so our numbers stand beside the peers measured on the same GPU.

Decode: q [B, Hq, 1, D], k/v [B, Hkv, L, D] (contiguous, as SDPA takes them), bf16, GQA via
enable_gqa, for the cuDNN and flash backends. Prefill: causal self-attention q/k/v [B, H, T, D].
Timing: CUDA events around `reps` back-to-back calls, the median of `trials` such runs, cycling
through enough input sets that their total exceeds twice the L2 cache (so no run is served from
L2 alone). Writes JSON to the path given.
"""
import json
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HQ, HKV, D = 8, 4, 128
DECODE = [(b, l) for b in (1, 32, 128) for l in (1024, 4096, 16384)]
PREFILL = [(32, 256), (16, 1024), (4, 4096), (1, 16384)]
BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}
L2_BYTES = 60 * 2**20


def time_ms(fn, sets, reps=50, trials=7):
    for s in sets[:3]:
        fn(*s)
    torch.cuda.synchronize()
    times = []
    for _ in range(trials):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(reps):
            fn(*sets[i % len(sets)])
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / reps)
    return statistics.median(times)


def input_sets(shapes, bytes_per_set):
    n = max(1, min(64, (2 * L2_BYTES) // max(bytes_per_set, 1) + 1))
    return [tuple(torch.randn(s, device="cuda", dtype=torch.bfloat16) for s in shapes) for _ in range(n)]


def time_backends(call, sets, reps, rate):
    """Times `call` under each SDPA backend; `rate(ms)` adds the point's throughput figure.
    Frees the input sets afterwards."""
    out = {}
    for name, backend in BACKENDS.items():
        try:
            with sdpa_kernel(backend):
                ms = time_ms(call, sets, reps=reps)
            out[name] = {"ms": ms, **rate(ms)}
        except RuntimeError as e:
            out[name] = {"error": str(e).splitlines()[0]}
    sets.clear()
    torch.cuda.empty_cache()
    return out


def decode_point(b, l):
    kv_bytes = 2 * b * HKV * l * D * 2
    sets = input_sets([(b, HQ, 1, D), (b, HKV, l, D), (b, HKV, l, D)], kv_bytes)
    out = {"kv_bytes": kv_bytes}
    call = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    out.update(time_backends(call, sets, 50, lambda ms: {"TBps": kv_bytes / ms / 1e9}))
    return out


def prefill_point(b, t):
    flops = 4 * b * HQ * D * t * (t + 1) / 2
    shape_q, shape_kv = (b, HQ, t, D), (b, HKV, t, D)
    sets = input_sets([shape_q, shape_kv, shape_kv], 2 * b * (HQ + 2 * HKV) * t * D)
    out = {"causal_flops": flops}
    call = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    out.update(time_backends(call, sets, 20, lambda ms: {"TFLOPs": flops / ms / 1e9}))
    return out


def main():
    torch.manual_seed(0)
    result = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "decode": {f"B{b}_L{l}": decode_point(b, l) for b, l in DECODE},
    }
    if "--prefill" in sys.argv:
        result["prefill"] = {f"B{b}_T{t}": prefill_point(b, t) for b, t in PREFILL}
    path = [a for a in sys.argv[1:] if not a.startswith("--")][0]
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    for key, point in result["decode"].items():
        best = min((v["ms"] for v in point.values() if isinstance(v, dict) and "ms" in v), default=float("nan"))
        print(f"anchor decode {key}: best SDPA {best * 1000:.1f} us")


if __name__ == "__main__":
    main()
