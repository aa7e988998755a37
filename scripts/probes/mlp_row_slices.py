# Does a sub-batched MLP (gate/up GEMM -> silu*up -> down GEMM over row slices whose
# intermediates fit in L2) beat the whole-step MLP? asynct-0.5b shapes, bf16, torch's cuBLAS and
# a torch.compile'd SiLU-mul, each variant one CUDA graph, median us of 20 replays. RESULTS run
# 184. Run on the device: python3 scripts/probes/mlp_row_slices.py
import torch
from graph_timing import graph_median_us
torch.manual_seed(0)
M, H, I = 16384, 1024, 3072
dev = 'cuda'
x = torch.randn(M, H, device=dev, dtype=torch.bfloat16)
wgu = (torch.randn(2 * I, H, device=dev, dtype=torch.bfloat16) * 0.02)
wd = (torch.randn(H, I, device=dev, dtype=torch.bfloat16) * 0.02)

@torch.compile(fullgraph=True, dynamic=False)
def silu_mul(gu):
    g, u = gu[:, :I].float(), gu[:, I:].float()
    return (g * torch.sigmoid(g) * u).to(torch.bfloat16)

def make(rows, reuse):
    k = M // rows
    gu_full = torch.empty(M, 2 * I, device=dev, dtype=torch.bfloat16)
    mlp_full = torch.empty(M, I, device=dev, dtype=torch.bfloat16)
    out = torch.empty(M, H, device=dev, dtype=torch.bfloat16)
    gu_s = torch.empty(rows, 2 * I, device=dev, dtype=torch.bfloat16)
    mlp_s = torch.empty(rows, I, device=dev, dtype=torch.bfloat16)
    def body(parts):
        for j in range(k):
            r = slice(j * rows, (j + 1) * rows)
            gu = gu_s if reuse else gu_full[r]
            mlp = mlp_s if reuse else mlp_full[r]
            if 'g' in parts: torch.matmul(x[r], wgu.t(), out=gu)
            if 's' in parts: mlp = silu_mul(gu)
            if 'd' in parts: torch.matmul(mlp, wd.t(), out=out[r])
    return body

for rows, reuse in [(16384, False), (4096, False), (2048, False), (2048, True), (1024, False), (1024, True), (512, True)]:
    body = make(rows, reuse)
    res = {p: graph_median_us(lambda p=p: body(p), reps=20) for p in ['gsd', 'g', 's', 'd', 'gs']}
    print(f"rows {rows:5d} reuse {int(reuse)}: all {res['gsd']:.1f} us = gate_up {res['g']:.1f} + silu {res['s']:.1f} + down {res['d']:.1f}; gate_up+silu {res['gs']:.1f}", flush=True)
