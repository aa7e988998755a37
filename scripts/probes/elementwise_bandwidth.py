# What an elementwise kernel with 2 reads + 2 writes of [16384, 1024] bf16 reaches on this
# device (torch.compile / Triton), beside 1r1w and 2r1w: the ceiling for peri_ln_residual and
# silu_mul. Ten calls a CUDA graph, median us a call over 30 replays. RESULTS run 185.
# Run on the device: python3 scripts/probes/elementwise_bandwidth.py
import torch
from graph_timing import graph_median_us
M, H = 16384, 1024
a = torch.randn(M, H, device='cuda', dtype=torch.bfloat16)
x = torch.randn(M, H, device='cuda', dtype=torch.bfloat16)
w = torch.randn(H, device='cuda', dtype=torch.float32)

@torch.compile(fullgraph=True)
def r2w2(a, x, w):
    af = a.float(); xf = x.float()
    y = (xf + torch.clamp(af * w, -3, 3).to(torch.bfloat16).float())
    yb = y.to(torch.bfloat16)
    return yb, (torch.clamp(yb.float() * w, -2, 2)).to(torch.bfloat16)

@torch.compile(fullgraph=True)
def r1w1(a, w):
    return (a.float() * w).to(torch.bfloat16)

@torch.compile(fullgraph=True)
def r2w1(a, x, w):
    return (a.float() * w * x.float()).to(torch.bfloat16)

mb = M * H * 2 / 1e6
for name, fn, n in [("2r2w", lambda: r2w2(a, x, w), 4), ("1r1w", lambda: r1w1(a, w), 2), ("2r1w", lambda: r2w1(a, x, w), 3)]:
    us = graph_median_us(fn, reps=30, calls=10)
    print(f"{name}: {us:.1f} us, {n * mb / us:.2f} TB/s", flush=True)
