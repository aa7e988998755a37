"""The AsyncT model in plain PyTorch (SPEC sections 1 to 4): differentiable, trainable, and the
forward the ``transformers`` wrapper in ``asynct.modeling`` runs.

It needs torch alone, so a machine without ``transformers`` can still train and evaluate. The
module names are the checkpoint's tensor names (``model.layers.3.self_attn.q_norm.alpha``), so
``state_dict()`` is a checkpoint as it stands (``asynct.checkpoint_io`` writes it).

Numerics follow the dtype of the parameters:

- float64 or float32: every value stays in that dtype (the oracle's f64 reference and the CPU
  backend's f32). RoPE's cosines and sines are computed in float64 whatever the dtype, as the
  oracle does.
- bfloat16: the GPU model. GEMMs take bf16 operands and return bf16; norms, RoPE, the HP1
  scores, gate and ``p v`` sum compute in float32; values are rounded to bf16 at exactly the
  points ``oracle/src/model/precision.rs`` lists (``RoundPoint``), marked ``# round:`` below.
  The GEMMs are torch's own bf16 ``F.linear``: it accumulates in float32 and rounds the output
  once, SPEC section 4's GEMM, so no upcast is needed (the test
  ``test_torch_bf16_linear_rounds_an_f32_sum_once`` holds the CPU's to that).

  This mode is not bit-near the oracle's bf16-faithful one: the oracle computes in float64
  between the rounding points and its GEMM sums are exact, so a few values in 10^5 land on the
  other side of a bf16 rounding boundary here, and the model amplifies each such flip (it moves
  later values, which flips more roundings). On the shipped model the two bf16 forwards end
  about as far from each other (mean relative L2 2e-3) as each is from float64 (5e-3); they
  are compared by their distance from float64, as the tests do.

Under ``torch.autocast(dtype=torch.bfloat16)`` with float32 parameters (training), the
projections run in bf16 and everything between them, HP1 included, in float32; nothing else is
rounded.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import nn

# Every UClipNorm of a layer, by checkpoint name, and the q/k norms (over the head dim).
LAYER_NORMS = ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm")


@dataclasses.dataclass
class NormShape:
    """The stored shapes of one UClipNorm: ``alpha`` and ``weight`` are ``[1]`` or ``[C]``;
    ``bias`` is ``[C]`` or absent (SPEC section 3)."""

    alpha: int
    weight: int
    bias: bool


@dataclasses.dataclass
class NetworkConfig:
    """The config.json fields the forward reads (SPEC section 1), plus the norms' stored shapes.

    ``norm_shapes`` maps a norm's checkpoint prefix (``model.norm``,
    ``model.layers.0.self_attn.q_norm``) to its [`NormShape`]; a norm it does not name has the
    shape training uses: per-channel ``alpha`` and ``weight`` with a bias, except the q/k norms'
    scalar ``weight`` and no bias (SPEC section 3).
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    max_position_embeddings: int
    rope_theta: float
    tie_word_embeddings: bool = True
    fir_k: int = 3
    relu_pre: bool = True
    clip_min: float = 0.0
    clip_max: float = 1.0
    scale: Optional[float] = None
    eos_token_id: List[int] = dataclasses.field(default_factory=list)
    norm_shapes: Dict[str, NormShape] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        checks = [
            ("num_key_value_heads", self.num_key_value_heads > 0 and self.num_attention_heads % self.num_key_value_heads == 0,
             f"must divide num_attention_heads {self.num_attention_heads}, got {self.num_key_value_heads}"),
            ("head_dim", self.head_dim > 0 and self.head_dim % 2 == 0, f"must be even and positive, got {self.head_dim}"),
            ("hp1.fir_k", self.fir_k >= 1, f"must be at least 1, got {self.fir_k}"),
            ("hp1.clip_min", self.clip_min >= 0.0, f"must be >= 0, got {self.clip_min}"),
            ("hp1.clip_max", self.clip_max > self.clip_min, f"must exceed clip_min {self.clip_min}, got {self.clip_max}"),
        ]
        for field, ok, why in checks:
            if not ok:
                raise ValueError(f"config field `{field}` {why}")

    @property
    def hp1_scale(self) -> float:
        """``hp1.scale``, or ``1/sqrt(head_dim)`` when null."""
        return self.scale if self.scale is not None else 1.0 / math.sqrt(self.head_dim)

    def norm_shape(self, prefix: str, channels: int) -> NormShape:
        if prefix in self.norm_shapes:
            return self.norm_shapes[prefix]
        per_head = prefix.endswith(("q_norm", "k_norm"))
        return NormShape(channels, 1, False) if per_head else NormShape(channels, channels, True)

    @classmethod
    def from_json_dict(cls, d: Dict[str, Any], norm_shapes: Optional[Dict[str, NormShape]] = None) -> "NetworkConfig":
        """From config.json's fields (``hp1`` a nested block, ``eos_token_id`` an int or a list,
        ``head_dim`` defaulting to ``hidden_size / num_attention_heads``)."""
        for field in ("architectures", "model_type"):
            if field not in d:
                raise ValueError(f"config.json has no `{field}`")
        if d["model_type"] != "asynct":
            raise ValueError(f'config field `model_type` must be "asynct", got "{d["model_type"]}"')
        if d.get("hidden_act", "silu") != "silu":
            raise ValueError(f'config field `hidden_act` must be "silu", got "{d["hidden_act"]}"')
        hp1 = d.get("hp1") or {}
        eos = d.get("eos_token_id", [])
        shapes = dict(norm_shapes or {})
        for prefix, s in (d.get("uclipnorm_shapes") or {}).items():
            shapes.setdefault(prefix, NormShape(int(s["alpha"]), int(s["weight"]), bool(s["bias"])))
        return cls(
            vocab_size=int(d["vocab_size"]),
            hidden_size=int(d["hidden_size"]),
            intermediate_size=int(d["intermediate_size"]),
            num_hidden_layers=int(d["num_hidden_layers"]),
            num_attention_heads=int(d["num_attention_heads"]),
            num_key_value_heads=int(d["num_key_value_heads"]),
            head_dim=int(d.get("head_dim") or d["hidden_size"] // d["num_attention_heads"]),
            max_position_embeddings=int(d["max_position_embeddings"]),
            rope_theta=float(d["rope_theta"]),
            tie_word_embeddings=bool(d.get("tie_word_embeddings", True)),
            fir_k=int(hp1.get("fir_k", 3)),
            relu_pre=bool(hp1.get("relu_pre", True)),
            clip_min=float(hp1.get("clip_min", 0.0)),
            clip_max=float(hp1.get("clip_max", 1.0)),
            scale=None if hp1.get("scale") is None else float(hp1["scale"]),
            eos_token_id=[int(e) for e in (eos if isinstance(eos, list) else [eos])],
            norm_shapes=shapes,
        )

    def to_json_dict(self, torch_dtype: str = "bfloat16") -> Dict[str, Any]:
        """config.json as the Rust loader reads it (SPEC section 1); ``uclipnorm_shapes`` is an
        extra field the loader ignores and this module reads back."""
        return {
            "architectures": ["AsyncTForCausalLM"],
            "model_type": "asynct",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "max_position_embeddings": self.max_position_embeddings,
            "rope_theta": self.rope_theta,
            "tie_word_embeddings": self.tie_word_embeddings,
            "hidden_act": "silu",
            "attention_bias": False,
            "torch_dtype": torch_dtype,
            "eos_token_id": list(self.eos_token_id),
            "hp1": {"fir_k": self.fir_k, "relu_pre": self.relu_pre, "clip_min": self.clip_min,
                    "clip_max": self.clip_max, "scale": self.scale},
            "uclipnorm_shapes": {p: dataclasses.asdict(s) for p, s in sorted(self.norm_shapes.items())},
        }


def compute_dtype(param_dtype: torch.dtype) -> torch.dtype:
    """Where norms, RoPE and the gate compute: float32 for bf16 (and f16) weights, else theirs."""
    return torch.float32 if param_dtype in (torch.bfloat16, torch.float16) else param_dtype


class UClipNorm(nn.Module):
    """``y = weight * clamp(alpha * x, -1, 1) + bias`` per channel (SPEC section 3), in the compute
    dtype; the caller rounds."""

    def __init__(self, shape: NormShape, channels: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(shape.alpha))
        self.weight = nn.Parameter(torch.ones(shape.weight))
        self.bias = nn.Parameter(torch.zeros(channels)) if shape.bias else None

    def forward(self, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        x = x.to(dtype)
        y = self.weight.to(dtype) * torch.clamp(self.alpha.to(dtype) * x, -1.0, 1.0)
        return y + self.bias.to(dtype) if self.bias is not None else y


def rope_tables(positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    """``cos`` and ``sin`` ``[tokens, D/2]`` of absolute ``positions``, computed in float64 (an f32
    angle is off by ~1e-3 rad near position 32K) and then cast to ``dtype``."""
    half = head_dim // 2
    j = torch.arange(half, dtype=torch.float64, device=positions.device)
    freq = torch.pow(torch.tensor(theta, dtype=torch.float64, device=positions.device), -2.0 * j / head_dim)
    angle = positions.to(torch.float64)[:, None] * freq[None, :]
    return torch.cos(angle).to(dtype), torch.sin(angle).to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE over the whole head: ``x`` ``[B, H, T, D]``, tables ``[T, D/2]``."""
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


def hp1_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    sigma: torch.Tensor,
    gamma: torch.Tensor,
    cfg: NetworkConfig,
    gate_counts: Optional[List[Tuple[int, int]]] = None,
) -> torch.Tensor:
    """HP1 (SPEC section 2) on dense tensors, differentiable: ``q`` ``[B, Hq, Tq, D]``, ``k`` and
    ``v`` ``[B, Hkv, Tk, D]`` with the queries the last ``Tq`` of the ``Tk`` positions; ``sigma``
    and ``gamma`` ``[Hq]``. Returns ``[B, Hq, Tq, D]``, computed in ``q``'s dtype.

    ``s = scale q.k``; ``r = relu(s)``; ``m_t`` the mean of ``r_t .. r_{t-F+1}`` (zero before key
    0); ``p = gamma clamp(s - sigma m, clip_min, clip_max)`` on keys ``t <= i``, zero after.
    Keys after the query never enter its FIR, which looks left only, so the causal mask is one
    ``where`` on ``p``. Autocast is off inside: the scores, the gate and ``p v`` stay in the
    inputs' dtype (float32 while training under bf16 autocast), as SPEC section 4 computes them.
    With ``gate_counts`` a list, ``(exact zeros, weights)`` of ``p`` over every head, query and
    causal key is appended to it (the oracle's ``GateStats`` count, per call).
    """
    with torch.autocast(q.device.type, enabled=False):
        return _hp1(q, k, v, sigma, gamma, cfg, gate_counts)


def _hp1(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sigma: torch.Tensor, gamma: torch.Tensor,
         cfg: NetworkConfig, gate_counts: Optional[List[Tuple[int, int]]]) -> torch.Tensor:
    b, hq, tq, d = q.shape
    hkv, tk = k.shape[1], k.shape[2]
    group = hq // hkv
    qg = q.reshape(b, hkv, group, tq, d)
    s = torch.matmul(qg, k[:, :, None].transpose(-1, -2)) * cfg.hp1_scale  # [B, Hkv, G, Tq, Tk]
    r = torch.relu(s) if cfg.relu_pre else s
    fir = r
    for back in range(1, cfg.fir_k):
        fir = fir + F.pad(r, (back, 0))[..., :tk]
    m = fir * (1.0 / cfg.fir_k)
    sig = sigma.to(s.dtype).reshape(1, hkv, group, 1, 1)
    gam = gamma.to(s.dtype).reshape(1, hkv, group, 1, 1)
    p = gam * torch.clamp(s - sig * m, cfg.clip_min, cfg.clip_max)
    query_pos = torch.arange(tk - tq, tk, device=q.device)[:, None]
    causal = torch.arange(tk, device=q.device)[None, :] <= query_pos
    p = torch.where(causal, p, torch.zeros((), dtype=p.dtype, device=p.device))
    if gate_counts is not None:
        weights = int(causal.sum()) * b * hq
        gate_counts.append((int((p == 0).sum()) - (causal.numel() - int(causal.sum())) * b * hq, weights))
    out = torch.matmul(p, v[:, :, None])  # [B, Hkv, G, Tq, D]
    return out.reshape(b, hq, tq, d)


class KVCache:
    """Each layer's keys (after k_norm and RoPE) and values, ``[B, Hkv, T, D]``, grown by
    ``update``; the interface of ``transformers``' caches (``update``, ``get_seq_length``), so the
    layers take either."""

    def __init__(self) -> None:
        self.keys: List[torch.Tensor] = []
        self.values: List[torch.Tensor] = []

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.keys[layer_idx].shape[-2] if layer_idx < len(self.keys) else 0

    def update(self, k: torch.Tensor, v: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any) -> Tuple[torch.Tensor, torch.Tensor]:
        if layer_idx == len(self.keys):
            self.keys.append(k)
            self.values.append(v)
        else:
            self.keys[layer_idx] = torch.cat([self.keys[layer_idx], k], dim=-2)
            self.values[layer_idx] = torch.cat([self.values[layer_idx], v], dim=-2)
        return self.keys[layer_idx], self.values[layer_idx]


class Attention(nn.Module):
    """``self_attn``: the projections, the per-head q/k norms, RoPE and HP1."""

    def __init__(self, cfg: NetworkConfig, prefix: str):
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.cfg = cfg
        self.q_proj = nn.Linear(h, cfg.num_attention_heads * d, bias=False)
        self.k_proj = nn.Linear(h, cfg.num_key_value_heads * d, bias=False)
        self.v_proj = nn.Linear(h, cfg.num_key_value_heads * d, bias=False)
        self.o_proj = nn.Linear(cfg.num_attention_heads * d, h, bias=False)
        self.q_norm = UClipNorm(cfg.norm_shape(f"{prefix}.q_norm", d), d)
        self.k_norm = UClipNorm(cfg.norm_shape(f"{prefix}.k_norm", d), d)
        self.hp1_sigma = nn.Parameter(torch.ones(cfg.num_attention_heads))
        self.hp1_gamma = nn.Parameter(torch.ones(cfg.num_attention_heads))
        # A list to append each call's gate counts to, or None (``AsyncTNetwork.gate_zero_fractions``).
        self.gate_counts: Optional[List[Tuple[int, int]]] = None

    def forward(self, h: torch.Tensor, rope: Tuple[torch.Tensor, torch.Tensor], layer: int,
                cache: Optional[Any], act: torch.dtype, comp: torch.dtype) -> torch.Tensor:
        b, t, _ = h.shape
        d = self.cfg.head_dim
        # round: QProj, KProj, VProj (a bf16 GEMM returns bf16).
        q = self.q_proj(h).view(b, t, -1, d).transpose(1, 2)
        k = self.k_proj(h).view(b, t, -1, d).transpose(1, 2)
        v = self.v_proj(h).view(b, t, -1, d).transpose(1, 2)
        cos, sin = rope
        # round: QNormRope, KNormRope.
        q = apply_rope(self.q_norm(q, comp), cos, sin).to(act)
        k = apply_rope(self.k_norm(k, comp), cos, sin).to(act)
        if cache is not None:
            k, v = cache.update(k, v, layer)
        out = hp1_attention(q.to(comp), k.to(comp), v.to(comp), self.hp1_sigma, self.hp1_gamma, self.cfg,
                            self.gate_counts)
        # round: AttnOutput.
        out = out.to(act).transpose(1, 2).reshape(b, t, -1)
        return self.o_proj(out)  # round: OProj.


class Mlp(nn.Module):
    """``mlp``: ``down(silu(gate h) * up h)``."""

    def __init__(self, cfg: NetworkConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, h: torch.Tensor, act: torch.dtype, comp: torch.dtype) -> torch.Tensor:
        g, u = self.gate_proj(h), self.up_proj(h)  # round: GateProj, UpProj.
        m = (F.silu(g.to(comp)) * u.to(comp)).to(act)  # round: MlpProduct.
        return self.down_proj(m)  # round: DownProj.


class DecoderLayer(nn.Module):
    """One Peri-LN block: a UClipNorm on both sides of each sublayer. ``dropout`` (training only,
    0 unless ``asynct.train`` sets it) drops each sublayer's normed output before the residual add."""

    def __init__(self, cfg: NetworkConfig, index: int):
        super().__init__()
        p = f"model.layers.{index}"
        self.index = index
        self.dropout = 0.0
        self.self_attn = Attention(cfg, f"{p}.self_attn")
        self.mlp = Mlp(cfg)
        for name in LAYER_NORMS:
            setattr(self, name, UClipNorm(cfg.norm_shape(f"{p}.{name}", cfg.hidden_size), cfg.hidden_size))

    def forward(self, x: torch.Tensor, rope: Tuple[torch.Tensor, torch.Tensor], cache: Optional[Any],
                act: torch.dtype, comp: torch.dtype) -> torch.Tensor:
        h = self.input_layernorm(x, comp).to(act)  # round: InputNorm.
        a = self.self_attn(h, rope, self.index, cache, act, comp)
        a = self.post_attention_layernorm(a, comp).to(act)  # round: PostAttnNorm.
        a = F.dropout(a, self.dropout, self.training)
        x = (x.to(comp) + a.to(comp)).to(act)  # round: AttnResidual.
        h = self.pre_feedforward_layernorm(x, comp).to(act)  # round: PreFfnNorm.
        m = self.post_feedforward_layernorm(self.mlp(h, act, comp), comp).to(act)  # round: PostFfnNorm.
        m = F.dropout(m, self.dropout, self.training)
        return (x.to(comp) + m.to(comp)).to(act)  # round: FfnResidual.


class Backbone(nn.Module):
    """``model``: embeddings, the layers and the final norm."""

    def __init__(self, cfg: NetworkConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.num_hidden_layers))
        self.norm = UClipNorm(cfg.norm_shape("model.norm", cfg.hidden_size), cfg.hidden_size)


class AsyncTNetwork(nn.Module):
    """The whole model; ``forward(ids)`` gives logits ``[B, T, vocab]`` (float32 for bf16 weights,
    else the weights' dtype), every position's row."""

    def __init__(self, cfg: NetworkConfig):
        super().__init__()
        self.cfg = cfg
        self.model = Backbone(cfg)
        self.lm_head = None if cfg.tie_word_embeddings else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def head_weight(self) -> torch.Tensor:
        return self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    def hidden(self, ids: torch.Tensor, cache: Optional[Any] = None) -> torch.Tensor:
        """``norm(x)`` after the layers, ``[B, T, hidden]``, for token ids ``[B, T]`` that follow the
        ``cache``'s positions (none: they start at position 0)."""
        cfg = self.cfg
        act = self.model.embed_tokens.weight.dtype
        comp = compute_dtype(act)
        past = cache.get_seq_length(0) if cache is not None else 0
        t = ids.shape[1]
        if past + t > cfg.max_position_embeddings:
            raise ValueError(
                f"input_ids reach position {past + t}, past max_position_embeddings {cfg.max_position_embeddings}")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= cfg.vocab_size):
            raise ValueError(f"input_ids hold an id outside the vocabulary of {cfg.vocab_size}")
        positions = torch.arange(past, past + t, device=ids.device)
        rope = rope_tables(positions, cfg.head_dim, cfg.rope_theta, comp)
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, rope, cache, act, comp)
        return self.model.norm(x, comp).to(act)  # round: FinalNorm.

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """The head over ``h``: ``[.., vocab]`` (round: Logits), returned in float32 at least."""
        out = F.linear(h, self.head_weight())
        return out.float() if out.dtype in (torch.bfloat16, torch.float16) else out

    def forward(self, ids: torch.Tensor, cache: Optional[Any] = None) -> torch.Tensor:
        return self.logits(self.hidden(ids, cache))

    @torch.no_grad()
    def gate_zero_fractions(self, windows: Sequence[torch.Tensor]) -> List[float]:
        """Per layer, the fraction of HP1 gate weights that are exactly zero over every head, query
        row and causal key of ``windows`` (each ``[T]`` ids, run from position 0)."""
        attns = [layer.self_attn for layer in self.model.layers]
        for a in attns:
            a.gate_counts = []
        try:
            for w in windows:
                self.forward(w[None].to(self.model.embed_tokens.weight.device))
            return [sum(z for z, _ in a.gate_counts) / max(1, sum(n for _, n in a.gate_counts)) for a in attns]
        finally:
            for a in attns:
                a.gate_counts = None

    @torch.no_grad()
    def greedy(self, prompt: Sequence[int], max_new_tokens: int, stop_at_eos: bool = True) -> List[int]:
        """Greedy continuation of one prompt through the KV cache (what ``asynct generate`` prints
        at temperature 0): the new token ids, at most ``max_new_tokens``, stopping after an eos id."""
        device = self.model.embed_tokens.weight.device
        cache = KVCache()
        ids = torch.tensor([list(prompt)], dtype=torch.long, device=device)
        out: List[int] = []
        limit = min(max_new_tokens, self.cfg.max_position_embeddings - len(prompt))
        for _ in range(limit):
            nxt = int(self.forward(ids, cache)[0, -1].argmax())
            out.append(nxt)
            if stop_at_eos and nxt in self.cfg.eos_token_id:
                break
            ids = torch.tensor([[nxt]], dtype=torch.long, device=device)
        return out
