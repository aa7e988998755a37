#!/usr/bin/env python3
"""The PyTorch anchor of issue 9's decode benchmark: one decode step of the asynct-0.5b shape, the
best a PyTorch user gets without a serving engine, run on the device machine in the same call as
`asynct bench --decode-batch`, so both sides are measured on the same GPU.

The model: asynct-0.5b's shapes (35 layers, hidden 1024, 8 q / 4 kv heads, head dim 128,
intermediate 3072, vocab 151936, tied LM head; read from --config, a config.json such as
`asynct init --preset asynct-0.5b` writes, when given), bf16 random weights, Peri-LN (a norm on
both sides of each sublayer, q/k norms per head before RoPE), rotate-half RoPE, SiLU MLP. The
norms are UClipNorm by default, as in AsyncT (`gamma * clamp(alpha * x, -1, 1)`, elementwise, in
f32); `--norm rms` swaps in RMSNorm. Attention is softmax SDPA (F.scaled_dot_product_attention,
GQA) in place of HP1, over a static KV cache of --context tokens per sequence (every step attends
over all of it and writes its new K/V into the last slot). q/k/v and gate/up are one GEMM each,
as a careful PyTorch user (and our engine) fuses them. The next token is the argmax on the GPU,
fed back as the next replay's input.

Variants (--variants, comma-separated; NAME@1/32 limits NAME to those batches):
  eager            the uncompiled kernels, captured as one CUDA graph
  compile-default  torch.compile (inductor, default mode), captured as one CUDA graph
  max-autotune     torch.compile mode max-autotune-no-cudagraphs (tunes the skinny GEMMs), one graph
Each variant is compiled per batch size (dynamic=False) and warmed up before capture, so compiling
and autotuning stay outside the timing; the seconds they took are printed and kept in the JSON.
Inductor's caches go to /tmp (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR unless set).

Timing: the whole step is one CUDA graph; each trial replays it --steps times back to back between
two CUDA events; the figure is the median over --trials trials of (trial time / steps). On the CPU
(--device cpu, for catching errors with tiny shapes: no graph) it is wall clock per call.

Usage: decode_anchor.py OUT.json [--config config.json] [--variants compile-default,max-autotune@1/32]
                        [--batches 1,32,128] [--context 1024] [--steps 50] [--trials 7]
                        [--norm uclip|rms] [--device cuda|cpu]
       decode_anchor.py --self-test     (the pure pieces; no torch needed)
The JSON (rewritten after every point) has the shape of
../shared/anchors/h200-torch-compiled-decode-2026-11-30.json: ms_per_step[variant label]["B<batch>"],
which `asynct bench --decode-batch ... --anchor OUT.json` reads, taking the best variant per batch.
"""
import argparse
import contextlib
import datetime
import gc
import json
import math
import os
import statistics
import sys
import time

VARIANTS = {
    "eager": ("eager kernels in one graph", None),
    "compile-default": ("torch.compile default + graph", "default"),
    "max-autotune": ("torch.compile max-autotune-no-cudagraphs + graph", "max-autotune-no-cudagraphs"),
}
ASYNCT_05B = {"vocab_size": 151936, "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 35,
              "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 128, "rope_theta": 1e6,
              "tie_word_embeddings": True}
# H200 HBM3e: the bandwidth the 0.28 ms weight floor of issue 9 is computed with.
HBM_BYTES_PER_S = 4.3e12


def parse_variants(spec, batches):
    """[(variant, [batch, ...])] from "a,b@1/32": each NAME at every batch, or at those after @."""
    plan = []
    for item in filter(None, spec.split(",")):
        name, _, only = item.partition("@")
        if name not in VARIANTS:
            raise ValueError(f"unknown variant `{name}`; the variants are {', '.join(VARIANTS)}")
        plan.append((name, [int(b) for b in only.split("/")] if only else list(batches)))
    if not plan:
        raise ValueError("--variants names no variant")
    return plan


def load_config(path):
    """The model dims: asynct-0.5b's, or those of the config.json at `path`."""
    if path is None:
        return dict(ASYNCT_05B)
    with open(path) as f:
        cfg = json.load(f)
    missing = [k for k in ASYNCT_05B if k not in cfg]
    if missing:
        raise ValueError(f"{path}: config.json lacks {', '.join(missing)}")
    return {k: cfg[k] for k in ASYNCT_05B}


def weight_bytes(c):
    """bf16 bytes of the matrices a decode step reads once each: every layer's, then the LM head
    (the embedding when tied; the embedding gather reads only a row per sequence)."""
    h, d, i = c["hidden_size"], c["head_dim"], c["intermediate_size"]
    qkvo = (2 * c["num_attention_heads"] + 2 * c["num_key_value_heads"]) * d * h
    layer = qkvo + 3 * i * h
    head = c["vocab_size"] * h * (1 if c["tie_word_embeddings"] else 2)
    return 2 * (c["num_hidden_layers"] * layer + head)


def assemble(c, args, device, torch_version, ms, compile_s, errors):
    timing = (f"whole step in one CUDA graph, greedy argmax on the GPU; ms per step = median of {args.trials} x "
              f"{args.steps} graph replays" if args.device == "cuda" else
              f"on the CPU, no graph; ms per step = median of {args.trials} x {args.steps} calls")
    return {
        "what": f"PyTorch decode step of the {c['num_hidden_layers']}-layer shape (hidden {c['hidden_size']}, "
                f"{c['num_attention_heads']}/{c['num_key_value_heads']} heads, D {c['head_dim']}, "
                f"I {c['intermediate_size']}, vocab {c['vocab_size']}) with softmax SDPA in place of HP1, "
                f"{args.norm} norms (Peri-LN), bf16, static KV cache of {args.context} tokens (attention over all "
                f"of it), {timing}",
        "device": device, "torch": torch_version, "date": datetime.date.today().isoformat(),
        "config": c, "context": args.context, "norm": args.norm,
        "ms_per_step": ms, "compile_s": compile_s, "errors": errors,
        "weight_bytes": weight_bytes(c), "weight_floor_ms": weight_bytes(c) / HBM_BYTES_PER_S * 1e3,
    }


def build_weights(torch, c, device, norm_kind):
    """Random bf16 weights, N(0, 1/fan_in) so activations stay finite; the norms' alpha and gamma
    are f32, per channel (q/k norms: alpha per channel over D, gamma a scalar, as AsyncT's)."""
    g = torch.Generator(device=device).manual_seed(0)
    bf16 = torch.bfloat16

    def mat(rows, cols):
        return (torch.randn(rows, cols, generator=g, device=device) / math.sqrt(cols)).to(bf16)

    def norm(channels, gamma_channels):
        alpha = 0.5 + torch.rand(channels, generator=g, device=device)
        return alpha if norm_kind == "uclip" else None, 0.5 + torch.rand(gamma_channels, generator=g, device=device)

    h, d, i = c["hidden_size"], c["head_dim"], c["intermediate_size"]
    hq, hkv = c["num_attention_heads"], c["num_key_value_heads"]
    layers = [{
        "qkv": mat((hq + 2 * hkv) * d, h), "o": mat(h, hq * d), "gate_up": mat(2 * i, h), "down": mat(h, i),
        "input": norm(h, h), "post_attention": norm(h, h), "pre_feedforward": norm(h, h),
        "post_feedforward": norm(h, h), "q": norm(d, 1), "k": norm(d, 1),
    } for _ in range(c["num_hidden_layers"])]
    embed = (torch.randn(c["vocab_size"], h, generator=g, device=device) * 0.5).to(bf16)
    head = embed if c["tie_word_embeddings"] else mat(c["vocab_size"], h)
    return {"layers": layers, "embed": embed, "head": head, "final": norm(h, h)}


def decode_step_module(torch, c, w, batch, context, device, norm_kind):
    """The decode step as an nn.Module whose buffers are the weights and this batch's KV cache."""
    import torch.nn.functional as F
    from torch import nn
    bf16 = torch.bfloat16
    h, d = c["hidden_size"], c["head_dim"]
    hq, hkv = c["num_attention_heads"], c["num_key_value_heads"]

    def norm(x, p):
        alpha, gamma = p
        x = x.float()
        y = (x * alpha).clamp(-1.0, 1.0) if norm_kind == "uclip" else x * torch.rsqrt(x.pow(2).mean(-1, True) + 1e-6)
        return (y * gamma).to(bf16)

    def rope(x, cos, sin):
        x1, x2 = x.float().chunk(2, -1)
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).to(bf16)

    class Step(nn.Module):
        def __init__(self):
            super().__init__()
            freqs = c["rope_theta"] ** (-torch.arange(0, d, 2, device=device, dtype=torch.float64) / d)
            angles = torch.arange(context, device=device, dtype=torch.float64)[:, None] * freqs[None, :]
            self.register_buffer("cos", angles.cos().float())
            self.register_buffer("sin", angles.sin().float())
            for n in range(len(w["layers"])):
                self.register_buffer(f"k{n}", torch.randn(batch, hkv, context, d, device=device, dtype=bf16))
                self.register_buffer(f"v{n}", torch.randn(batch, hkv, context, d, device=device, dtype=bf16))

        def forward(self, tokens, pos):
            """tokens [B] (int64), pos [1] (int64, the position every sequence is at) -> next [B]."""
            x = w["embed"][tokens]
            cos, sin = self.cos[pos], self.sin[pos]
            for n, lw in enumerate(w["layers"]):
                q, k, v = F.linear(norm(x, lw["input"]), lw["qkv"]).split([hq * d, hkv * d, hkv * d], -1)
                q = rope(norm(q.view(batch, hq, d), lw["q"]), cos, sin)
                k = rope(norm(k.view(batch, hkv, d), lw["k"]), cos, sin)
                kc, vc = getattr(self, f"k{n}"), getattr(self, f"v{n}")
                kc[:, :, pos] = k.unsqueeze(2)
                vc[:, :, pos] = v.view(batch, hkv, 1, d)
                a = F.scaled_dot_product_attention(q.unsqueeze(2), kc, vc, enable_gqa=True)
                x = x + norm(F.linear(a.reshape(batch, hq * d), lw["o"]), lw["post_attention"])
                gate, up = F.linear(norm(x, lw["pre_feedforward"]), lw["gate_up"]).chunk(2, -1)
                x = x + norm(F.linear(F.silu(gate) * up, lw["down"]), lw["post_feedforward"])
            return F.linear(norm(x, w["final"]), w["head"]).argmax(-1)

    return Step()


def measure(torch, variant, step, batch, vocab, context, args):
    """(ms per step, seconds compiling and warming up) of one variant at one batch."""
    mode = VARIANTS[variant][1]
    fn = step if mode is None else torch.compile(step, mode=mode, dynamic=False, fullgraph=True)
    tokens = torch.randint(0, vocab, (batch,), device=args.device)
    pos = torch.tensor([context - 1], device=args.device)

    def run():
        tokens.copy_(fn(tokens, pos))

    cuda = args.device == "cuda"
    side = torch.cuda.Stream() if cuda else None
    if cuda:
        side.wait_stream(torch.cuda.current_stream())
    start = time.perf_counter()
    with torch.cuda.stream(side) if cuda else contextlib.nullcontext():
        for _ in range(3):
            run()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.current_stream().wait_stream(side)
    compile_s = time.perf_counter() - start
    if not cuda:
        trials = []
        for _ in range(args.trials):
            t0 = time.perf_counter()
            for _ in range(args.steps):
                run()
            trials.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(trials) / args.steps, compile_s
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    graph.replay()
    torch.cuda.synchronize()
    trials = []
    for _ in range(args.trials):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(args.steps):
            graph.replay()
        end.record()
        end.synchronize()
        trials.append(begin.elapsed_time(end))
    del graph
    return statistics.median(trials) / args.steps, compile_s


def first_line(e):
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", nargs="?")
    p.add_argument("--config")
    p.add_argument("--variants", default="compile-default,max-autotune")
    p.add_argument("--batches", default="1,32,128")
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--trials", type=int, default=7)
    p.add_argument("--norm", choices=["uclip", "rms"], default="uclip")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--self-test", action="store_true")
    args = p.parse_args(argv)
    if args.self_test:
        return self_test()
    if not args.out:
        p.error("give OUT.json")
    plan = parse_variants(args.variants, [int(b) for b in args.batches.split(",")])
    c = load_config(args.config)
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", "/tmp/torchinductor-decode-anchor")
    os.environ.setdefault("TRITON_CACHE_DIR", "/tmp/triton-decode-anchor")
    import torch
    torch.set_grad_enabled(False)
    device = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    floor = weight_bytes(c) / HBM_BYTES_PER_S * 1e3
    print(f"decode anchor on {device}, torch {torch.__version__}; weights {weight_bytes(c) / 1e9:.3f} GB bf16, "
          f"floor {floor:.3f} ms at {HBM_BYTES_PER_S / 1e12} TB/s; plan {plan}", flush=True)
    w = build_weights(torch, c, args.device, args.norm)
    ms, compile_s, errors = {}, {}, {}

    def save():
        with open(args.out, "w") as f:
            json.dump(assemble(c, args, device, torch.__version__, ms, compile_s, errors), f, indent=1)

    for variant, batches in plan:
        label = VARIANTS[variant][0]
        variant_start = time.perf_counter()
        for b in batches:
            key = f"B{b}"
            try:
                step = decode_step_module(torch, c, w, b, args.context, args.device, args.norm)
                ms_step, secs = measure(torch, variant, step, b, c["vocab_size"], args.context, args)
                ms.setdefault(label, {})[key] = round(ms_step, 4)
                compile_s.setdefault(label, {})[key] = round(secs, 1)
                print(f"{label} {key}: {ms_step:.3f} ms per step ({ms_step / floor:.2f}x the floor); "
                      f"compile and warm-up {secs:.1f} s", flush=True)
            except Exception as e:
                # One variant failing (an autotune that cannot compile, say) costs only its entries.
                print(f"{label} {key} failed: {type(e).__name__}: {str(e)[-4000:]}", flush=True)
                errors.setdefault(label, {})[key] = first_line(e)
            step = None
            gc.collect()
            torch._dynamo.reset()
            if args.device == "cuda":
                torch.cuda.empty_cache()
            save()
        print(f"{label}: {time.perf_counter() - variant_start:.1f} s in all", flush=True)
    for key in sorted({k for v in ms.values() for k in v}, key=lambda k: int(k[1:])):
        best = min((v[key], label) for label, v in ms.items() if key in v)
        print(f"anchor {key}: best {best[1]} {best[0]:.3f} ms", flush=True)
    return 1 if errors else 0


def self_test():
    assert parse_variants("eager", [1, 32]) == [("eager", [1, 32])]
    assert parse_variants("compile-default,max-autotune@1/32", [1, 32, 128]) == [
        ("compile-default", [1, 32, 128]), ("max-autotune", [1, 32])]
    for bad in ("", "turbo", "eager@x"):
        try:
            parse_variants(bad, [1])
        except ValueError:
            continue
        raise AssertionError(f"`{bad}` was accepted")
    gb = weight_bytes(ASYNCT_05B)
    assert 1.18e9 < gb < 1.20e9, gb
    assert 0.27 < gb / HBM_BYTES_PER_S * 1e3 < 0.28, "issue 9's floor"
    untied = dict(ASYNCT_05B, tie_word_embeddings=False)
    assert weight_bytes(untied) - gb == 2 * 151936 * 1024
    assert first_line(RuntimeError("no kernel\ndetail")) == "RuntimeError: no kernel"
    print("decode_anchor self-test passed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
