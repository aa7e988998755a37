"""``python -m asynct.train``: trains an AsyncT preset from scratch on a text corpus with PyTorch.

    scripts/corpus.sh                                   # target/corpus/shakespeare/{train,heldout}.txt
    python -m asynct.train --corpus target/corpus/shakespeare --train-tokenizer \\
        --preset asynct-mini --out models/asynct-mini-shakespeare --steps 3000 --device cuda

What it does: tokenizes the corpus (training a byte-level BPE of the preset's vocabulary with
``tokenizers`` when ``--train-tokenizer`` is given or none is there yet; a folder tokenized before
is reused as it stands), then AdamW (weight decay on the matrices only) with a linear warm-up and a
cosine decay to ``--min-lr-ratio`` of the peak, bf16 autocast on CUDA, gradient clipping, random
windows of ``--seq-len`` tokens from the training split. Every ``--eval-every`` steps it measures
the loss over the whole held-out split and, when that is the best so far, writes the checkpoint
(bf16, the project's layout: config.json, model.safetensors, tokenizer.json) to ``--out``, so the
folder always holds the best model seen. At the end it writes ``loss.csv``, ``loss.png`` (when
matplotlib is installed; it says so when not), ``card.json`` and ``MODEL_CARD.md`` with the
held-out loss and perplexity of the written checkpoint, measured as the GPU runs it (bf16),
``SAMPLES.md`` (greedy continuations of held-out openings) and a copy of ``heldout.txt``.

``--time-budget SECONDS`` bounds the run's wall time: the schedule's progress is then the larger of
``step / steps`` and ``elapsed / budget``, so the learning rate still reaches the end of its
cosine and the run ends in time; a budget that binds makes the step count depend on the machine.

Needs torch only (no ``transformers``); ``tokenizers`` only to tokenize.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import pathlib
import shutil
import sys
import time
from typing import Dict, List, Optional

import torch
import torch.nn.functional as F

from . import corpus as corpus_mod
from .checkpoint_io import load_network, save_network
from .eval import heldout_loss, windows
from .init_weights import init_network
from .network import AsyncTNetwork, NetworkConfig
from .presets import PRESETS


# Held-out windows the card's gate zero fractions are counted over (the f32 checkpoint).
GATE_WINDOWS = 32


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m asynct.train", description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", type=pathlib.Path, required=True, help="folder with train.txt and heldout.txt (scripts/corpus.sh)")
    p.add_argument("--out", type=pathlib.Path, required=True, help="checkpoint folder to write")
    p.add_argument("--preset", default="asynct-mini", choices=sorted(PRESETS), help="model shape (model/src/presets.rs)")
    p.add_argument("--train-tokenizer", action="store_true", help="train the byte-level BPE afresh with `tokenizers`")
    p.add_argument("--steps", type=int, default=3000, help="optimizer steps")
    p.add_argument("--batch", type=int, default=64, help="sequences per step")
    p.add_argument("--seq-len", type=int, default=256, help="tokens per sequence (at most the preset's positions)")
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    p.add_argument("--min-lr-ratio", type=float, default=0.1, help="final learning rate / peak")
    p.add_argument("--warmup", type=int, default=100, help="linear warm-up steps")
    p.add_argument("--weight-decay", type=float, default=0.1, help="AdamW decay of the matrices")
    p.add_argument("--dropout", type=float, default=0.0, help="dropout on each sublayer's output while training")
    p.add_argument("--grad-clip", type=float, default=1.0, help="clip the gradient's global norm to this")
    p.add_argument("--eval-every", type=int, default=250, help="steps between held-out evaluations (and checkpoints)")
    p.add_argument("--time-budget", type=float, default=None, help="seconds of wall time the run may take at most")
    p.add_argument("--device", default="auto", help="auto (cuda when there), cuda or cpu")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and the batches")
    p.add_argument("--eval-tokens", type=int, default=None, help="score only the held-out split's first N tokens (quick CPU runs)")
    p.add_argument("--samples", type=int, default=4, help="greedy continuations of held-out openings for SAMPLES.md")
    args = p.parse_args(argv)
    for name in ("steps", "batch", "seq_len", "eval_every"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.warmup < 0 or not 0.0 <= args.min_lr_ratio <= 1.0 or args.lr <= 0 or args.grad_clip <= 0:
        p.error("--warmup must be >= 0, --min-lr-ratio in [0, 1], --lr and --grad-clip > 0")
    if not 0.0 <= args.dropout < 1.0:
        p.error(f"--dropout must be in [0, 1), got {args.dropout}")
    if args.eval_tokens is not None and args.eval_tokens < 2:
        p.error(f"--eval-tokens must be at least 2, got {args.eval_tokens}")
    if args.samples < 0:
        p.error(f"--samples must be >= 0, got {args.samples}")
    if args.seq_len > PRESETS[args.preset]["max_position_embeddings"]:
        p.error(f"--seq-len {args.seq_len} exceeds {args.preset}'s max_position_embeddings "
                f"{PRESETS[args.preset]['max_position_embeddings']}")
    if args.time_budget is not None and args.time_budget <= 0:
        p.error(f"--time-budget must be positive, got {args.time_budget}")
    return args


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name not in ("cpu", "cuda") and not name.startswith("cuda:"):
        raise SystemExit(f"--device must be auto, cpu or cuda, got {name}")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("--device cuda, but torch sees no CUDA device")
    return torch.device(name)


def tokenized(args: argparse.Namespace, vocab_size: int, max_len: int) -> pathlib.Path:
    """The tokenized folder, made first when asked or missing."""
    data = corpus_mod.bpe_dir(args.corpus, vocab_size)
    if args.train_tokenizer or not (data / "tokenizer.json").is_file():
        print(f"training a byte-level BPE of {vocab_size} ids on {args.corpus / 'train.txt'}", flush=True)
        corpus_mod.train_tokenizer(args.corpus, vocab_size, max_len)
        corpus_mod.encode_corpus(args.corpus, data, vocab_size)
    elif not (data / "tokens.json").is_file():
        corpus_mod.encode_corpus(args.corpus, data, vocab_size)
    return data


def lr_at(progress: float, step: int, args: argparse.Namespace) -> float:
    """Linear warm-up over ``--warmup`` steps, then a cosine from the peak to ``min_lr_ratio``
    of it as ``progress`` goes from the warm-up's end to 1."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    start = args.warmup / args.steps
    t = min(1.0, max(0.0, (progress - start) / max(1e-9, 1.0 - start)))
    return args.lr * (args.min_lr_ratio + (1.0 - args.min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * t)))


def optimizer(net: AsyncTNetwork, args: argparse.Namespace, device: torch.device) -> torch.optim.Optimizer:
    decay = [p for p in net.parameters() if p.dim() >= 2]
    keep = [p for p in net.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": keep, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=device.type == "cuda")


def write_curve(out: pathlib.Path, rows: List[Dict[str, float]]) -> str:
    """loss.csv, and loss.png when matplotlib is there; returns what was written, for the log."""
    with open(out / "loss.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["step", "elapsed_s", "lr", "train_loss", "heldout_loss"])
        w.writeheader()
        w.writerows(rows)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "loss.csv (matplotlib is not installed: no loss.png)"
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([r["step"] for r in rows], [r["train_loss"] for r in rows], label="train (per step)", lw=0.8)
    held = [r for r in rows if r["heldout_loss"] == r["heldout_loss"]]
    ax.plot([r["step"] for r in held], [r["heldout_loss"] for r in held], "o-", label="held-out")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats / token)")
    ax.set_title(out.name)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "loss.png", dpi=120)
    plt.close(fig)
    return "loss.csv and loss.png"


def write_card(out: pathlib.Path, card: Dict[str, object]) -> None:
    (out / "card.json").write_text(json.dumps(card, indent=2) + "\n")
    lines = [
        f"# {out.name}",
        "",
        "An AsyncT (HP1 attention, UClipNorm, Peri-LN) trained from scratch by `python -m asynct.train`.",
        "",
        "| | |",
        "|---|---|",
    ]
    for key, label in [("preset", "shape"), ("parameters", "parameters"), ("bf16_bytes", "weights (bf16 bytes)"),
                       ("corpus", "corpus"), ("train_tokens", "training tokens"), ("heldout_tokens", "held-out tokens"),
                       ("steps", "steps"), ("tokens_seen", "tokens seen"), ("best_step", "checkpoint from step"),
                       ("heldout_loss", "held-out loss (nats/token, bf16)"), ("heldout_ppl", "held-out perplexity (bf16)"),
                       ("heldout_loss_f32", "held-out loss (f32)"), ("heldout_ppl_f32", "held-out perplexity (f32)"),
                       ("gate_zero_fraction_per_layer", "HP1 gate zero fraction per layer (held-out)"),
                       ("train_seconds", "training time (s)"), ("device", "device"), ("command", "command")]:
        lines.append(f"| {label} | {card.get(key, '')} |")
    (out / "MODEL_CARD.md").write_text("\n".join(lines) + "\n")


def write_samples(out: pathlib.Path, net: AsyncTNetwork, heldout: torch.Tensor, count: int) -> None:
    """SAMPLES.md: greedy continuations (64 tokens, the bf16 model) of ``count`` 24-token openings
    spread over the held-out split, decoded without the tokenizers library."""
    lines = [f"# Greedy samples of {out.name}", "", "Openings from the held-out text (never trained on); "
             "64 greedy tokens each, as `asynct generate` picks them.", ""]
    for k in range(count):
        at = (len(heldout) - 24) * k // max(1, count)
        prompt = heldout[at:at + 24].tolist()
        cont = net.greedy(prompt, 64)
        lines += [f"## Sample {k + 1} (held-out tokens {at}..{at + 24})", "", "```",
                  corpus_mod.decode(out / "tokenizer.json", prompt) + " >>> " + corpus_mod.decode(out / "tokenizer.json", cont),
                  "```", ""]
    (out / "SAMPLES.md").write_text("\n".join(lines))


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    device = pick_device(args.device)
    shape = PRESETS[args.preset]
    data = tokenized(args, shape["vocab_size"], shape["max_position_embeddings"])
    train, heldout, eos = corpus_mod.load_tokens(data)
    heldout = heldout[:args.eval_tokens] if args.eval_tokens else heldout
    if len(train) <= args.seq_len + 1 or len(heldout) <= args.seq_len + 1:
        raise SystemExit(f"{data}: splits of {len(train)} and {len(heldout)} tokens are too short for --seq-len {args.seq_len}")
    cfg = NetworkConfig(**shape, eos_token_id=[eos])
    net = AsyncTNetwork(cfg)
    init_network(net, args.seed)
    for layer in net.model.layers:
        layer.dropout = args.dropout
    net.to(device)
    n_params = sum(p.numel() for p in net.parameters())
    print(f"{args.preset}: {n_params} parameters on {device}; {len(train)} training and {len(heldout)} held-out tokens", flush=True)

    opt = optimizer(net, args, device)
    autocast = device.type == "cuda"
    gen = torch.Generator().manual_seed(args.seed)
    train_dev = train.to(device)
    offsets = torch.arange(args.seq_len + 1, device=device)
    args.out.mkdir(parents=True, exist_ok=True)
    rows: List[Dict[str, float]] = []
    best = (math.inf, -1)
    start = time.perf_counter()
    step = 0
    while True:
        elapsed = time.perf_counter() - start
        progress = max(step / args.steps, elapsed / args.time_budget if args.time_budget else 0.0)
        lr = lr_at(progress, step, args)
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, len(train) - args.seq_len - 1, (args.batch,), generator=gen).to(device)
        window = train_dev[starts[:, None] + offsets]
        net.train()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            logits = net(window[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, cfg.vocab_size), window[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), args.grad_clip)
        opt.step()
        step += 1
        elapsed = time.perf_counter() - start
        done = step >= args.steps or (args.time_budget is not None and elapsed >= args.time_budget)
        evaluate = step % args.eval_every == 0 or done
        if not (evaluate or step == 1 or step % 50 == 0):
            continue
        row = {"step": step, "elapsed_s": round(elapsed, 3), "lr": lr, "train_loss": float(loss.detach()),
               "heldout_loss": float("nan")}
        line = f"step {step:5d}  lr {lr:.2e}  train {row['train_loss']:.4f}"
        if evaluate:
            held = heldout_loss(net, heldout, args.seq_len, device, autocast=autocast)
            row["heldout_loss"] = held
            line += f"  held-out {held:.4f}"
            if held < best[0]:
                best = (held, step)
                save_network(net, args.out, torch.bfloat16, tokenizer_from=data)
                line += " (saved)"
        print(f"{line}  {elapsed:.0f} s", flush=True)
        rows.append(row)
        if done:
            break
    train_seconds = time.perf_counter() - start
    curve = write_curve(args.out, rows)

    # The card's figures are the written checkpoint's, run as the GPU runs it (bf16) and in f32.
    saved = {dt: load_network(args.out, dt, device) for dt in (torch.bfloat16, torch.float32)}
    loss_bf16 = heldout_loss(saved[torch.bfloat16], heldout, args.seq_len, device, autocast=False)
    loss_f32 = heldout_loss(saved[torch.float32], heldout, args.seq_len, device, autocast=False)
    source = (args.corpus / "SOURCE.md")
    card = {
        "preset": args.preset,
        "parameters": n_params,
        "bf16_bytes": (args.out / "model.safetensors").stat().st_size,
        "corpus": source.read_text().splitlines()[2].removeprefix("- From: ") if source.is_file() else str(args.corpus),
        "train_tokens": len(train),
        "heldout_tokens": len(heldout),
        "steps": step,
        "batch": args.batch,
        "seq_len": args.seq_len,
        "tokens_seen": step * args.batch * args.seq_len,
        "best_step": best[1],
        "heldout_loss": round(loss_bf16, 4),
        "heldout_ppl": round(math.exp(loss_bf16), 3),
        "heldout_loss_f32": round(loss_f32, 4),
        "heldout_ppl_f32": round(math.exp(loss_f32), 3),
        "heldout_windows": f"non-overlapping windows of {args.seq_len} tokens, every position scored",
        "gate_zero_fraction_per_layer": [round(f, 4) for f in saved[torch.float32].gate_zero_fractions(
            windows(heldout, args.seq_len)[:GATE_WINDOWS])],
        "train_seconds": round(train_seconds, 1),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "command": "python -m asynct.train " + " ".join(sys.argv[1:] if argv is None else argv),
    }
    # The held-out text travels with the model, so the GPU harness (verify/tests/gpu_trained.rs)
    # and `asynct eval` can score what the card reports.
    shutil.copyfile(args.corpus / "heldout.txt", args.out / "heldout.txt")
    write_card(args.out, card)
    write_samples(args.out, saved[torch.bfloat16], heldout, args.samples)
    print(f"wrote {args.out}: best held-out loss {loss_bf16:.4f} (perplexity {math.exp(loss_bf16):.2f}) at step {best[1]}; "
          f"{curve}; MODEL_CARD.md", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
