"""Fresh weights for training an AsyncT from scratch, scaled as the generator's
(``oracle/src/model/init.rs``) so activations keep a sensible spread through every layer, without
its jitter and bf16 rounding (training moves every value at once anyway).

- Projections ``N(0, 1/fan_in)``; ``embed_tokens`` ``N(0, (4/sqrt(H))^2)`` (tied head: logits of
  spread ~2).
- Each norm's ``alpha`` is ``0.5 / spread of its input``, so the clamp to ``[-1, 1]`` bites on a
  few percent of values; the input norms' shrinks with depth as the residual stream grows.
- The post-sublayer norms' gain is the embedding's spread, so each sublayer adds about a quarter
  of the embedding's variance.
- The final norm's gain starts at 0.1, so the first logits are near uniform.
- q/k norms: per-channel ``alpha`` 1.1, scalar gain 2 (scores of spread ~1).
- ``hp1_sigma`` 1.5 (about 70% exact zeros at init, as a trained AsyncT), ``hp1_gamma`` 0.15:
  the output sums ``p v`` over hundreds of keys without normalisation, and this keeps the sum
  near the post-attention norm's linear range at a context of 512.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .network import AsyncTNetwork, Attention, NetworkConfig, UClipNorm

# Spreads the post norms see at init: o_proj of a gated sum of values, down_proj of silu(g)*u.
ATTN_OUT_SPREAD = 0.25
MLP_OUT_SPREAD = 0.15
# Variance a post-sublayer norm adds to the stream, relative to the embedding's.
ADDED = 0.25
# The final norm's gain: with a tied head, a token's own embedding row would otherwise get a logit
# near H * alpha * spread^2 (about 30) and the first steps would only unlearn repeating the input.
FINAL_GAIN = 0.1


def embed_spread(cfg: NetworkConfig) -> float:
    return 4.0 / math.sqrt(cfg.hidden_size)


def _stream(cfg: NetworkConfig, sublayers: int) -> float:
    return embed_spread(cfg) * math.sqrt(1.0 + ADDED * sublayers)


def _norm(n: UClipNorm, alpha: float, weight: float) -> None:
    nn.init.constant_(n.alpha, alpha)
    nn.init.constant_(n.weight, weight)
    if n.bias is not None:
        nn.init.zeros_(n.bias)


@torch.no_grad()
def init_module(module: nn.Module, cfg: NetworkConfig) -> None:
    """The weights of one module that do not depend on where it sits (``transformers``'
    ``_init_weights`` calls this per module): projections, embeddings, the HP1 gate, unit norms."""
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, 0.0, 1.0 / math.sqrt(module.in_features))
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, 0.0, embed_spread(cfg))
    elif isinstance(module, Attention):
        nn.init.constant_(module.hp1_sigma, 1.5)
        nn.init.constant_(module.hp1_gamma, 0.15)
        _norm(module.q_norm, 0.5 / 0.45, 2.0)
        _norm(module.k_norm, 0.5 / 0.45, 2.0)
    elif isinstance(module, UClipNorm):
        _norm(module, 1.0, 1.0)


@torch.no_grad()
def init_network(net: AsyncTNetwork, seed: int) -> None:
    """Every weight of ``net`` from ``seed``: [`init_module`] everywhere, then each norm's scale
    for its place in the stream."""
    cfg = net.cfg
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        for m in net.modules():
            if not isinstance(m, UClipNorm):
                init_module(m, cfg)
    finally:
        torch.random.set_rng_state(gen_state)
    e = embed_spread(cfg)
    for i, layer in enumerate(net.model.layers):
        _norm(layer.input_layernorm, 0.5 / _stream(cfg, 2 * i), 1.0)
        _norm(layer.post_attention_layernorm, 0.5 / ATTN_OUT_SPREAD, e)
        _norm(layer.pre_feedforward_layernorm, 0.5 / _stream(cfg, 2 * i + 1), 1.0)
        _norm(layer.post_feedforward_layernorm, 0.5 / MLP_OUT_SPREAD, e)
    _norm(net.model.norm, 0.5 / _stream(cfg, 2 * cfg.num_hidden_layers), FINAL_GAIN)
