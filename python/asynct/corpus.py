"""The training corpus as token ids: a byte-level BPE trained on it with the ``tokenizers``
library, and the train and held-out texts encoded once into ``uint16`` files.

A corpus folder (``scripts/corpus.sh`` writes one) holds ``train.txt`` and ``heldout.txt``, works
separated by a line ``<|endoftext|>``. Tokenizing writes ``bpe-<vocab>/`` inside it:
``tokenizer.json`` (byte-level BPE, id 0 the end-of-text token), ``tokenizer_config.json``,
``train.u16`` and ``heldout.u16`` (little-endian token ids: each file encoded whole, as
``asynct eval --text`` and ``python -m asynct.eval --text`` encode a file, the separator lines'
``<|endoftext|>`` becoming the end-of-text id) and ``tokens.json`` (the counts). Training reads only those files, so a machine with torch
and no ``tokenizers`` (or no network) trains from a folder tokenized elsewhere.
"""

from __future__ import annotations

import json
import pathlib
import struct
from typing import Dict, List, Sequence, Tuple

import torch

EOS_TOKEN = "<|endoftext|>"
EOS_ID = 0
SEPARATOR = f"\n{EOS_TOKEN}\n"


def works(text: str) -> List[str]:
    """The works of a corpus file: the text between separator lines, blank ones dropped."""
    return [w.strip("\n") + "\n" for w in text.split(SEPARATOR) if w.strip()]


def bpe_dir(corpus: pathlib.Path, vocab_size: int) -> pathlib.Path:
    return corpus / f"bpe-{vocab_size}"


def train_tokenizer(corpus: pathlib.Path, vocab_size: int, max_len: int) -> pathlib.Path:
    """Trains a byte-level BPE of ``vocab_size`` ids on ``train.txt`` (never the held-out text)
    and writes tokenizer.json and tokenizer_config.json into ``bpe-<vocab>/``."""
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    except ImportError as e:
        raise SystemExit(f"training a tokenizer needs the `tokenizers` package ({e}); pip install tokenizers") from e
    out = bpe_dir(corpus, vocab_size)
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    tok.train_from_iterator(works((corpus / "train.txt").read_text()), trainer)
    if tok.token_to_id(EOS_TOKEN) != EOS_ID:
        raise RuntimeError(f"the trainer put {EOS_TOKEN} at id {tok.token_to_id(EOS_TOKEN)}, expected {EOS_ID}")
    tok.save(str(out / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": EOS_TOKEN, "model_max_length": max_len,
              "clean_up_tokenization_spaces": False}
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return out


def encode_corpus(corpus: pathlib.Path, tokenizer_dir: pathlib.Path, vocab_size: int) -> pathlib.Path:
    """Encodes train.txt and heldout.txt with ``tokenizer_dir``'s tokenizer.json into
    ``bpe-<vocab>/{train,heldout}.u16``."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    if tok.get_vocab_size() > vocab_size or vocab_size > 65536:
        raise SystemExit(f"the tokenizer has {tok.get_vocab_size()} ids; the model's vocab_size is {vocab_size} (at most 65536 here)")
    eos = tok.token_to_id(EOS_TOKEN)
    if eos is None:
        raise SystemExit(f"{tokenizer_dir / 'tokenizer.json'} has no {EOS_TOKEN} token")
    out = bpe_dir(corpus, vocab_size)
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for split in ("train", "heldout"):
        ids = tok.encode((corpus / f"{split}.txt").read_text(), add_special_tokens=False).ids
        (out / f"{split}.u16").write_bytes(struct.pack(f"<{len(ids)}H", *ids))
        counts[split] = len(ids)
    (out / "tokens.json").write_text(json.dumps({"eos_token_id": eos, "vocab_size": vocab_size, **counts}, indent=2) + "\n")
    return out


def load_tokens(data: pathlib.Path) -> Tuple[torch.Tensor, torch.Tensor, int]:
    """``(train, heldout, eos_id)`` of a tokenized folder, ids as int64 tensors."""
    meta_path = data / "tokens.json"
    if not meta_path.is_file():
        raise SystemExit(f"{data}: no tokens.json (tokenize the corpus first: python -m asynct.train --train-tokenizer ...)")
    meta = json.loads(meta_path.read_text())

    def read(split: str) -> torch.Tensor:
        raw = (data / f"{split}.u16").read_bytes()
        if len(raw) != 2 * meta[split]:
            raise SystemExit(f"{data / (split + '.u16')}: {len(raw)} bytes, expected {2 * meta[split]} (tokens.json)")
        # int16 and a mask rather than torch.uint16, whose ops older torch builds lack.
        return torch.frombuffer(bytearray(raw), dtype=torch.int16).to(torch.int64) & 0xFFFF

    return read("train"), read("heldout"), int(meta["eos_token_id"])


def _byte_alphabet() -> Dict[str, int]:
    """The byte-level pre-tokenizer's printable stand-in for each byte (GPT-2's), inverted."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("\u00a1"), ord("\u00ac") + 1), *range(ord("\u00ae"), ord("\u00ff") + 1)]
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return {c: b for b, c in chars.items()}


def decode(tokenizer_json: pathlib.Path, ids: Sequence[int]) -> str:
    """``ids`` as text, read from a byte-level BPE tokenizer.json with no library (training on a
    machine without ``tokenizers`` still prints its samples): each id's token string mapped back
    to bytes, special tokens as written, invalid UTF-8 replaced."""
    spec = json.loads(tokenizer_json.read_text())
    vocab = {i: t for t, i in spec["model"]["vocab"].items()}
    special = {t["id"]: t["content"] for t in spec.get("added_tokens", [])}
    alphabet = _byte_alphabet()
    out = bytearray()
    for i in ids:
        if i in special:
            out += special[i].encode()
        else:
            out += bytes(alphabet[c] for c in vocab.get(i, ""))
    return out.decode("utf-8", errors="replace")


def main() -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m asynct.corpus",
                                description="Train the byte-level BPE on a corpus folder and write its token files.")
    p.add_argument("corpus", type=pathlib.Path, help="folder with train.txt and heldout.txt (scripts/corpus.sh)")
    p.add_argument("--vocab-size", type=int, default=4096, help="ids of the BPE (the model's vocab_size)")
    p.add_argument("--max-len", type=int, default=1024, help="model_max_length written to tokenizer_config.json")
    args = p.parse_args()
    if not 257 <= args.vocab_size <= 65536:
        p.error(f"--vocab-size must be in 257..=65536 (256 bytes plus the end-of-text token at least), got {args.vocab_size}")
    data = encode_corpus(args.corpus, train_tokenizer(args.corpus, args.vocab_size, args.max_len), args.vocab_size)
    print(f"wrote {data}: {(data / 'tokens.json').read_text().strip()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
