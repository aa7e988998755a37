#!/usr/bin/env python3
"""Compares two `asynct generate --dump-logits` files, row by row: the GPU's against the CPU
oracle's bf16-faithful mode (`--device cpu --precision bf16`), as issue 9 asks for asynct-0.5b.

    compare_logits.py GOT.safetensors WANT.safetensors [--got-ids FILE --want-ids FILE] [--bound 2e-2]

Each file holds one f32 tensor `logits`, `[positions, vocab]`: a row per prompt position, then one
per generated token but the last. Rows are compared while both runs saw the same inputs: every
prompt row, then generated rows up to the first generated token that differs (given the printed
ids of both runs; without them, the prompt rows only would be safe, so pass them). Prints the
whole-tensor relative L2 over the compared rows, the worst row's, and exits 1 when the whole
tensor is over the bound. Needs only NumPy (safetensors is read by hand: an 8-byte header length,
a JSON header, then the raw data).
"""
import argparse
import json
import struct
import sys

import numpy as np


def read_logits(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        meta = header["logits"]
        if meta["dtype"] != "F32":
            sys.exit(f"{path}: logits are {meta['dtype']}, expected F32")
        start, end = meta["data_offsets"]
        f.seek(8 + n + start)
        data = np.frombuffer(f.read(end - start), dtype="<f4")
    return data.reshape(meta["shape"]).astype(np.float64)


def read_ids(path):
    text = open(path).read().strip()
    return [int(t) for t in text.replace("\n", ",").split(",") if t.strip()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("got")
    ap.add_argument("want")
    ap.add_argument("--got-ids")
    ap.add_argument("--want-ids")
    ap.add_argument("--prompt-len", type=int, required=True, help="prompt tokens (rows always compared)")
    ap.add_argument("--bound", type=float, default=2e-2)
    a = ap.parse_args()
    got, want = read_logits(a.got), read_logits(a.want)
    if got.shape[1] != want.shape[1]:
        sys.exit(f"vocab differs: {got.shape} vs {want.shape}")
    rows = min(got.shape[0], want.shape[0], a.prompt_len)
    if a.got_ids and a.want_ids:
        g, w = read_ids(a.got_ids), read_ids(a.want_ids)
        same = 0
        while same < min(len(g), len(w)) and g[same] == w[same]:
            same += 1
        # Generated row j (after the prompt) is the logits of the input generated token j - 1.
        rows = min(got.shape[0], want.shape[0], a.prompt_len + same)
        print(f"generated tokens agree for the first {same} of {min(len(g), len(w))}")
    d = got[:rows] - want[:rows]
    whole = np.linalg.norm(d) / np.linalg.norm(want[:rows])
    per_row = np.linalg.norm(d, axis=1) / np.maximum(np.linalg.norm(want[:rows], axis=1), 1e-300)
    worst = int(np.argmax(per_row))
    print(f"rows compared {rows} (prompt {a.prompt_len}), vocab {got.shape[1]}")
    print(f"relative L2 whole {whole:.3e}, worst row {per_row[worst]:.3e} at position {worst}, "
          f"median row {np.median(per_row):.3e}; bound {a.bound:.1e}")
    greedy_same = np.mean(np.argmax(got[:rows], axis=1) == np.argmax(want[:rows], axis=1))
    print(f"argmax agrees at {100 * greedy_same:.1f}% of positions")
    sys.exit(0 if whole <= a.bound else 1)


if __name__ == "__main__":
    main()
