"""Held-out perplexity and next-token accuracy from PyTorch: ``python -m asynct.eval`` and the
functions training calls. The same figure as ``asynct eval`` (server/src/eval.rs), by the same
definition:

- the file is encoded whole with the checkpoint's tokenizer.json (no special tokens added);
- the ids are cut into consecutive windows of ``max_len`` tokens (the last one shorter; a window of
  one token predicts nothing and is dropped), each run from position 0 with no context from the
  window before;
- in a window of ``n`` tokens, positions ``0..n-2`` predict the next token: the loss is the mean
  of ``-log softmax(logits)[next]`` over every prediction of every window, the perplexity its
  ``exp``, the accuracy the fraction whose argmax is the next token (ties to the lowest id, as
  ``torch.argmax`` and the engine's greedy pick break them).

    python -m asynct.eval --model models/asynct-mini-shakespeare \\
        --text target/corpus/shakespeare/heldout.txt --max-len 256 --dtype bfloat16

Needs torch; ``--text`` needs ``tokenizers`` too.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import pathlib
import sys
from typing import List, Optional

import torch
import torch.nn.functional as F

from .network import AsyncTNetwork


@dataclasses.dataclass
class Score:
    """Sums over every prediction scored."""

    nll: float = 0.0
    predictions: int = 0
    correct: int = 0
    windows: int = 0

    @property
    def loss(self) -> float:
        return self.nll / self.predictions

    @property
    def perplexity(self) -> float:
        return math.exp(self.loss)

    @property
    def accuracy(self) -> float:
        return self.correct / self.predictions


def windows(ids: torch.Tensor, max_len: int) -> List[torch.Tensor]:
    """Consecutive windows of ``max_len`` ids (the last shorter), those of fewer than 2 dropped."""
    return [w for w in torch.split(ids, max_len) if len(w) >= 2]


@torch.no_grad()
def score(net: AsyncTNetwork, ids: torch.Tensor, max_len: int, device: torch.device, batch: int = 16,
          autocast: bool = False) -> Score:
    """Scores ``ids`` (int64 ``[N]``) window by window, ``batch`` windows of one length at a time."""
    if max_len < 2:
        raise ValueError(f"max_len must be at least 2, got {max_len}")
    net.eval()
    out = Score()
    ws = windows(ids, max_len)
    for i in range(0, len(ws), batch):
        group = ws[i:i + batch]
        by_len = {}
        for w in group:
            by_len.setdefault(len(w), []).append(w)
        for ws_same in by_len.values():
            x = torch.stack(ws_same).to(device)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
                logits = net(x[:, :-1])
            logits = logits.double()
            target = x[:, 1:]
            out.nll += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), reduction="sum"))
            out.correct += int((logits.argmax(-1) == target).sum())
            out.predictions += target.numel()
            out.windows += len(ws_same)
    return out


def heldout_loss(net: AsyncTNetwork, ids: torch.Tensor, max_len: int, device: torch.device, autocast: bool = False) -> float:
    """The mean next-token loss of [`score`]."""
    was_training = net.training
    try:
        return score(net, ids, max_len, device, batch=64, autocast=autocast).loss
    finally:
        net.train(was_training)


def encode_file(model_dir: pathlib.Path, text: pathlib.Path) -> torch.Tensor:
    """``text`` encoded whole with ``model_dir``'s tokenizer.json, as ``asynct eval`` does."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    return torch.tensor(tok.encode(text.read_text(), add_special_tokens=False).ids, dtype=torch.int64)


def main(argv: Optional[List[str]] = None) -> int:
    from .checkpoint_io import load_network

    p = argparse.ArgumentParser(prog="python -m asynct.eval", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=pathlib.Path, required=True, help="checkpoint folder")
    p.add_argument("--text", type=pathlib.Path, required=True, help="UTF-8 text file to score")
    p.add_argument("--max-len", type=int, default=None, help="tokens per window (default: the model's positions)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64", "bfloat16"],
                   help="weights and compute: bfloat16 rounds where the GPU model does")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--batch", type=int, default=16, help="windows per forward")
    p.add_argument("--gate-stats", action="store_true", help="also print each layer's HP1 gate zero fraction")
    args = p.parse_args(argv)
    if args.batch < 1:
        p.error(f"--batch must be at least 1, got {args.batch}")
    net = load_network(args.model, getattr(torch, args.dtype), args.device)
    max_len = args.max_len or net.cfg.max_position_embeddings
    if not 2 <= max_len <= net.cfg.max_position_embeddings:
        p.error(f"--max-len must be in 2..={net.cfg.max_position_embeddings}, got {max_len}")
    ids = encode_file(args.model, args.text)
    s = score(net, ids, max_len, torch.device(args.device), args.batch)
    if s.predictions == 0:
        p.error(f"{args.text} encodes to fewer than 2 tokens: nothing to score")
    print(f"perplexity {s.perplexity:.4f}  loss {s.loss:.6f} nats/token  accuracy {s.accuracy:.4f}  "
          f"({s.predictions} predictions in {s.windows} windows of at most {max_len} tokens, {args.dtype})")
    if args.gate_stats:
        fractions = net.gate_zero_fractions(windows(ids, max_len))
        print("gate zero fraction per layer: " + ", ".join(f"{f:.4f}" for f in fractions))
    return 0


if __name__ == "__main__":
    sys.exit(main())
