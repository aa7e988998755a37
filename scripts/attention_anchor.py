#!/usr/bin/env python3
"""The attention anchor of the kernel benchmark (SPEC section 7), run on the device machine in the
same call as `asynct-bench`, so our kernels stand beside their peers measured on the same GPU.

Peers: PyTorch SDPA with its cuDNN and flash backends on contiguous K/V, and (decode only)
FlashInfer's paged decode, the kernel serving engines use: page 16, a shuffled page table.
Shapes: Hq/Hkv = 8/4, D = 128, bf16. Decode q [B, Hq, 1, D] against L keys per sequence;
prefill causal self-attention over T tokens.

Timing: one CUDA graph of N calls cycling through enough input sets that their total exceeds twice
the L2 (so no call is served from L2 alone), replayed TRIALS times between CUDA events; the median
replay over N is the figure. Eager back-to-back calls, the old method, time PyTorch's dispatch
(20-35 us) at small sizes rather than the kernel; they are kept as `eager_ms` to show how much.
Each backend warms up on every input set before capture, so JIT compilation, autotuning and cuDNN
plan building stay outside the graph.

Usage: attention_anchor.py OUT.json [--prefill]   (JSON rewritten after every point)
       attention_anchor.py --self-test            (the pure pieces, no torch or GPU needed)
"""
import contextlib
import gc
import json
import os
import random
import shutil
import statistics
import sys

HQ, HKV, D, PAGE = 8, 4, 128, 16
DECODE = [(b, l) for b in (1, 32, 128) for l in (1024, 4096, 16384)]
PREFILL = [(32, 256), (16, 1024), (4, 4096), (1, 16384)]
L2_BYTES = 60 * 2**20
MAX_SETS = 64
DECODE_CALLS, PREFILL_CALLS, TRIALS = 40, 20, 7
WORKSPACE_BYTES = 128 * 2**20
METHOD = "one CUDA graph of N calls, inputs cycled past 2x L2, median of 7 replays, ms per call"


def set_count(bytes_per_set):
    """Input sets to cycle through: enough to exceed twice the L2 (the rule asynct-bench uses too)."""
    return max(1, min(MAX_SETS, 2 * L2_BYTES // max(bytes_per_set, 1) + 1))


def page_table(lengths, page_size, rng):
    """(indptr, indices, last_page_len) of a paged cache holding `lengths` tokens per sequence,
    its pages drawn from one random permutation of all of them, so neighbours in a sequence are
    scattered in memory as in a long-running server."""
    assert all(n >= 1 for n in lengths), lengths
    pages = [(n + page_size - 1) // page_size for n in lengths]
    indices = list(range(sum(pages)))
    rng.shuffle(indices)
    indptr = [0]
    for p in pages:
        indptr.append(indptr[-1] + p)
    last = [n - (p - 1) * page_size for n, p in zip(lengths, pages)]
    return indptr, indices, last


def per_call_ms(run_ms, calls):
    """The median of the timed runs, each of `calls` calls, per call."""
    return statistics.median(run_ms) / calls


def first_line(e):
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__


def assemble(device, torch_version, flashinfer, decode, prefill):
    """The anchor JSON; asynct-bench takes each point's entries that hold "ms"."""
    result = {"device": device, "torch": torch_version, "flashinfer": flashinfer, "method": METHOD,
              "calls": {"decode": DECODE_CALLS, "prefill": PREFILL_CALLS}, "decode": decode}
    if prefill is not None:
        result["prefill"] = prefill
    return result


def summary(key, point):
    """One line: every backend's graph and eager us (or its error), then the best."""
    parts, timed = [], []
    for name, v in point.items():
        if not isinstance(v, dict):
            continue
        if "ms" in v:
            parts.append(f"{name} {v['ms'] * 1e3:.1f} us (eager {v['eager_ms'] * 1e3:.1f})")
            timed.append((v["ms"], name))
        else:
            parts.append(f"{name} failed")
    best = f"best {min(timed)[1]} {min(timed)[0] * 1e3:.1f} us" if timed else "no backend ran"
    return f"anchor decode {key}: " + ", ".join(parts) + "; " + best


def timed_ms(work):
    import torch
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    work()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def time_graph(call, n_sets, calls, context):
    """(graph, eager) ms per call of `call(i)`, which launches one call on input set i % n_sets.
    Warm-up, eager timing and capture run on one side stream (torch captures only off the
    default stream) inside `context` (the SDPA backend choice must hold at capture)."""
    import torch
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with context, torch.cuda.stream(side):
        for i in range(n_sets):
            call(i)
        eager = [timed_ms(lambda: [call(i) for i in range(calls)]) for _ in range(TRIALS)]
        with torch.cuda.graph(graph, stream=side):
            # Kept alive, so each call's output stays its own memory on every replay.
            outputs = [call(i) for i in range(calls)]
    torch.cuda.current_stream().wait_stream(side)
    graph.replay()
    replays = [timed_ms(graph.replay) for _ in range(TRIALS)]
    del outputs
    return per_call_ms(replays, calls), per_call_ms(eager, calls)


def measure(label, build, n_sets, calls, context, rate):
    """One backend at one point, printed as it lands; its tensors are freed before the next."""
    entry = attempt(build, n_sets, calls, context, rate)
    names = {"ms": "graph", "eager_ms": "eager"}
    print(f"{label}: " + ", ".join(
        f"{names[k]} {v * 1e3:.1f} us" if k in names else f"{k} {v:.3g}" if isinstance(v, float) else f"{k}: {v}"
        for k, v in entry.items()), flush=True)
    release()
    return entry


def attempt(build, n_sets, calls, context, rate):
    """`build()` allocates the input sets and returns (call, check), `check()` correctness figures
    to record beside the time. A failure becomes {"error": its first line}."""
    try:
        call, check = build()
        ms, eager_ms = time_graph(call, n_sets, calls, context)
        entry = {"ms": ms, **rate(ms), "eager_ms": eager_ms}
    except Exception as e:
        return {"error": logged(e)}
    try:
        entry.update(check())
    except Exception as e:
        entry["check_error"] = logged(e)
    return entry


def logged(e):
    """The error's first line, for the JSON, after its whole text (a compiler's output, say) to the log."""
    print(f"{type(e).__name__}: {str(e)[-4000:]}", flush=True)
    return first_line(e)


def release():
    """Frees the point's tensors and graph pools: the B128_L16384 sets alone are 4.3 GB."""
    import torch
    gc.collect()
    torch.cuda.empty_cache()


def sdpa_backends():
    from torch.nn.attention import SDPBackend
    return {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}


def sdpa_point(key, shapes, bytes_per_set, calls, rate, **kw):
    """Each SDPA backend on fresh input sets of `shapes` (q, k, v)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel
    n = set_count(bytes_per_set)

    def build():
        sets = [tuple(torch.randn(s, device="cuda", dtype=torch.bfloat16) for s in shapes) for _ in range(n)]
        return (lambda i: F.scaled_dot_product_attention(*sets[i % n], enable_gqa=True, **kw)), lambda: {}

    return {name: measure(f"{key} {name}", build, n, calls, sdpa_kernel(backend), rate)
            for name, backend in sdpa_backends().items()}


def decode_rate(kv_bytes):
    return lambda ms: {"TBps": kv_bytes / ms / 1e9}


def decode_sdpa(b, l):
    kv_bytes = 2 * b * HKV * l * D * 2
    shapes = [(b, HQ, 1, D), (b, HKV, l, D), (b, HKV, l, D)]
    point = {"kv_bytes": kv_bytes}
    point.update(sdpa_point(f"B{b}_L{l}", shapes, kv_bytes, DECODE_CALLS, decode_rate(kv_bytes)))
    return point


def prefill_sdpa(b, t):
    flops = 4 * b * HQ * D * t * (t + 1) / 2
    shapes = [(b, HQ, t, D), (b, HKV, t, D), (b, HKV, t, D)]
    point = {"causal_flops": flops}
    point.update(sdpa_point(f"B{b}_T{t}", shapes, 2 * b * (HQ + 2 * HKV) * t * D, PREFILL_CALLS,
                            lambda ms: {"TFLOPs": flops / ms / 1e9}, is_causal=True))
    return point


def decode_flashinfer(fi, b, l):
    """FlashInfer's BatchDecodeWithPagedKVCacheWrapper in CUDA-graph mode (its page table in fixed
    buffers, planned once); the input sets share the table and differ in q and the caches."""
    import torch
    import torch.nn.functional as F
    kv_bytes = 2 * b * HKV * l * D * 2
    n = set_count(kv_bytes)
    i32 = dict(dtype=torch.int32, device="cuda")
    bf16 = dict(dtype=torch.bfloat16, device="cuda")

    def build():
        indptr, indices, last = page_table([l] * b, PAGE, random.Random(b * 100_003 + l))
        wrapper = fi.BatchDecodeWithPagedKVCacheWrapper(
            torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device="cuda"), "NHD", use_cuda_graph=True,
            paged_kv_indptr_buffer=torch.empty(b + 1, **i32),
            paged_kv_indices_buffer=torch.empty(len(indices), **i32),
            paged_kv_last_page_len_buffer=torch.empty(b, **i32))
        wrapper.plan(torch.tensor(indptr, **i32), torch.tensor(indices, **i32), torch.tensor(last, **i32),
                     num_qo_heads=HQ, num_kv_heads=HKV, head_dim=D, page_size=PAGE, pos_encoding_mode="NONE",
                     q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
        torch.cuda.synchronize()
        cache = (len(indices), PAGE, HKV, D)
        sets = [(torch.randn(b, HQ, D, **bf16), torch.randn(cache, **bf16), torch.randn(cache, **bf16),
                 torch.empty(b, HQ, D, **bf16)) for _ in range(n)]

        def call(i):
            q, k_cache, v_cache, out = sets[i % n]
            return wrapper.run(q, (k_cache, v_cache), out=out)

        def check():
            # Set 0's output, last written by a graph replay, against SDPA on its pages gathered
            # back into order: a misread page table would time plausibly and compute nonsense.
            q, k_cache, v_cache, out = sets[0]
            order = torch.tensor(indices, dtype=torch.long, device="cuda")
            gather = lambda c: c[order].view(b, -1, HKV, D)[:, :l].transpose(1, 2)
            ref = F.scaled_dot_product_attention(q.unsqueeze(2), gather(k_cache), gather(v_cache), enable_gqa=True)
            return {"max_abs_diff_vs_sdpa": (out.float() - ref.squeeze(2).float()).abs().max().item()}

        return call, check

    return measure(f"B{b}_L{l} flashinfer_paged", build, n, DECODE_CALLS, contextlib.nullcontext(),
                   decode_rate(kv_bytes))


def load_flashinfer():
    """(module, version) or (None, {"error"}). FlashInfer compiles its kernels on first use with
    nvcc through ninja, whose script sits beside python3 in its environment, not always on PATH."""
    try:
        if shutil.which("ninja") is None:
            dirs = [os.path.dirname(sys.executable)]
            with contextlib.suppress(Exception):
                import ninja
                dirs.append(ninja.BIN_DIR)
            os.environ["PATH"] = os.pathsep.join(dirs + [os.environ.get("PATH", "")])
        import flashinfer
        print(f"FlashInfer {flashinfer.__version__} from {os.path.dirname(flashinfer.__file__)}; "
              f"ninja {shutil.which('ninja')}, nvcc {shutil.which('nvcc')}", flush=True)
        return flashinfer, flashinfer.__version__
    except Exception as e:
        print(f"FlashInfer could not load ({first_line(e)}); timing SDPA only", flush=True)
        return None, {"error": first_line(e)}


def main(argv):
    if "--self-test" in argv:
        return self_test()
    paths = [a for a in argv if not a.startswith("--")]
    if not paths:
        sys.exit("usage: attention_anchor.py OUT.json [--prefill] | --self-test")
    import torch
    torch.manual_seed(0)
    device, version = torch.cuda.get_device_name(), torch.__version__
    fi, fi_version = load_flashinfer()
    decode, prefill = {}, ({} if "--prefill" in argv else None)

    def save():
        with open(paths[0], "w") as f:
            json.dump(assemble(device, version, fi_version, decode, prefill), f, indent=1)

    # SDPA first, FlashInfer last: a fault in FlashInfer's freshly compiled kernel that kills the
    # CUDA context then costs only its own entries.
    for b, l in DECODE:
        decode[f"B{b}_L{l}"] = decode_sdpa(b, l)
        save()
    for b, t in PREFILL if prefill is not None else []:
        prefill[f"B{b}_T{t}"] = prefill_sdpa(b, t)
        save()
    ran, gave_up = False, fi_version if fi is None else None
    for b, l in DECODE:
        entry = gave_up or decode_flashinfer(fi, b, l)
        ran = ran or "ms" in entry
        if not ran and gave_up is None:
            # Failing before any point ran means the build (nvcc, ninja) or the module is broken:
            # every further point would compile again and fail the same way, a minute each.
            gave_up = {"error": f"skipped: FlashInfer failed at B{b}_L{l}: {entry['error']}"}
        decode[f"B{b}_L{l}"]["flashinfer_paged"] = entry
        save()
    for key, point in decode.items():
        print(summary(key, point), flush=True)


def self_test():
    mib = 2**20
    assert set_count(2 * mib) == 61 and set_count(4 << 30) == 1 and set_count(0) == MAX_SETS
    assert set_count(2 * L2_BYTES) == 2 and set_count(1024) == MAX_SETS
    for lengths in ([16], [17], [1, 15, 16, 31, 32, 33], [1024] * 32, [5, 100, 16384]):
        indptr, indices, last = page_table(lengths, PAGE, random.Random(1))
        pages = [-(-n // PAGE) for n in lengths]
        assert sorted(indices) == list(range(sum(pages))), "indices are a permutation of every page"
        assert indptr[0] == 0 and [indptr[i + 1] - indptr[i] for i in range(len(lengths))] == pages
        assert all(1 <= x <= PAGE for x in last)
        assert [(p - 1) * PAGE + x for p, x in zip(pages, last)] == lengths, (lengths, last)
    _, indices, _ = page_table([1024] * 32, PAGE, random.Random(1))
    assert indices != sorted(indices), "the table is shuffled"
    assert page_table([20, 1], PAGE, random.Random(0))[2] == [4, 1]
    assert per_call_ms([4.0, 1.0, 2.0], 2) == 1.0
    assert first_line(RuntimeError("no kernel\ndetail")) == "RuntimeError: no kernel"
    assert first_line(ValueError()) == "ValueError"
    point = {"kv_bytes": 1, "cudnn": {"ms": 0.007, "TBps": 1.0, "eager_ms": 0.03},
             "flash": {"error": "RuntimeError: x"}, "flashinfer_paged": {"ms": 0.0109, "eager_ms": 0.05}}
    line = summary("B1_L1024", point)
    assert "cudnn 7.0 us (eager 30.0)" in line and "flash failed" in line and line.endswith("best cudnn 7.0 us"), line
    assert summary("B1_L1024", {"kv_bytes": 1}).endswith("no backend ran")
    result = json.loads(json.dumps(assemble("H200", "2.11", {"error": "x"}, {"B1_L1024": point}, None)))
    assert result["method"] == METHOD and "prefill" not in result and result["decode"]["B1_L1024"] == point
    assert "prefill" in assemble("H200", "2.11", "0.5.3", {}, {})
    print("attention_anchor self-test passed")


if __name__ == "__main__":
    main(sys.argv[1:])
