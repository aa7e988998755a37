"""The project's checkpoint folder from PyTorch: config.json, model.safetensors (one file, or an
index ``model.safetensors.index.json`` with shards, on reading) and tokenizer.json, with SPEC
section 1's tensor names.

Safetensors are read and written here with torch and ``json`` alone (the format is an 8-byte
little-endian header length, a JSON header of ``dtype``, ``shape`` and ``data_offsets`` per
tensor, then the bytes), so training on a machine without the ``safetensors`` package still
writes checkpoints that ``asynct generate`` loads.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import struct
from typing import Dict, Optional, Union

import torch

from .network import AsyncTNetwork, NetworkConfig, NormShape

PathLike = Union[str, "os.PathLike[str]"]

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")

_DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "F64": torch.float64}
_NAMES = {v: k for k, v in _DTYPES.items()}
_TORCH_NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32", torch.float64: "float64"}


def _header(path: pathlib.Path) -> tuple:
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path}: truncated safetensors file (no header length)")
        (n,) = struct.unpack("<Q", raw)
        size = path.stat().st_size
        if n > size - 8:
            raise ValueError(f"{path}: header length {n} runs past the file's {size} bytes")
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return header, 8 + n


def _weight_files(folder: pathlib.Path) -> list:
    if (folder / WEIGHTS_FILE).is_file():
        return [folder / WEIGHTS_FILE]
    if (folder / INDEX_FILE).is_file():
        index = json.loads((folder / INDEX_FILE).read_text())
        return [folder / name for name in sorted(set(index["weight_map"].values()))]
    raise FileNotFoundError(f"{folder}: neither {WEIGHTS_FILE} nor {INDEX_FILE}")


def tensor_shapes(folder: PathLike) -> Dict[str, list]:
    """Every stored tensor's shape, read from the safetensors headers only."""
    shapes: Dict[str, list] = {}
    for path in _weight_files(pathlib.Path(folder)):
        header, _ = _header(path)
        shapes.update({name: list(meta["shape"]) for name, meta in header.items()})
    return shapes


def read_safetensors(path: PathLike) -> Dict[str, torch.Tensor]:
    """Every tensor of one safetensors file, in its stored dtype."""
    path = pathlib.Path(path)
    header, start = _header(path)
    data = path.read_bytes()
    out: Dict[str, torch.Tensor] = {}
    for name, meta in header.items():
        if meta["dtype"] not in _DTYPES:
            raise ValueError(f"{path}: tensor {name} has dtype {meta['dtype']}, expected one of {sorted(_DTYPES)}")
        lo, hi = meta["data_offsets"]
        dtype = _DTYPES[meta["dtype"]]
        want = torch.Size(meta["shape"]).numel() * torch.empty((), dtype=dtype).element_size()
        if hi - lo != want or start + hi > len(data):
            raise ValueError(f"{path}: tensor {name} has {hi - lo} bytes at {lo}, expected {want} within the file")
        buf = bytearray(data[start + lo:start + hi])
        out[name] = torch.frombuffer(buf, dtype=dtype).reshape(meta["shape"]) if want else torch.empty(meta["shape"], dtype=dtype)
    return out


def _raw_bytes(t: torch.Tensor) -> bytes:
    """A contiguous CPU tensor's bytes, through NumPy when torch has it, else a slower list."""
    flat = t.reshape(-1).view(torch.uint8)
    try:
        return flat.numpy().tobytes()
    except (ImportError, RuntimeError):  # torch without NumPy raises RuntimeError here
        return bytes(flat.tolist())


def write_safetensors(path: PathLike, tensors: Dict[str, torch.Tensor]) -> None:
    """Writes ``tensors`` (names sorted, each contiguous, little-endian) as one safetensors file."""
    header: Dict[str, object] = {"__metadata__": {"format": "pt"}}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        if t.dtype not in _NAMES:
            raise ValueError(f"tensor {name} has dtype {t.dtype}, expected one of {sorted(map(str, _NAMES))}")
        blob = _raw_bytes(t) if t.numel() else b""
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as the reference writer does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def norm_shapes_of(shapes: Dict[str, list]) -> Dict[str, NormShape]:
    """The stored UClipNorm shapes of a checkpoint, from its tensor shapes."""
    out: Dict[str, NormShape] = {}
    for name, shape in shapes.items():
        if name.endswith(".alpha"):
            prefix = name[: -len(".alpha")]
            weight = shapes.get(f"{prefix}.weight")
            if weight is None:
                raise ValueError(f"checkpoint has {name} but no {prefix}.weight")
            out[prefix] = NormShape(int(shape[0]), int(weight[0]), f"{prefix}.bias" in shapes)
    return out


def read_config(folder: PathLike) -> NetworkConfig:
    """config.json plus the norm shapes the stored tensors have."""
    folder = pathlib.Path(folder)
    path = folder / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no config.json")
    return NetworkConfig.from_json_dict(json.loads(path.read_text()), norm_shapes_of(tensor_shapes(folder)))


def load_network(folder: PathLike, dtype: torch.dtype = torch.float32, device: Optional[Union[str, torch.device]] = None) -> AsyncTNetwork:
    """The checkpoint in ``folder`` as an [`AsyncTNetwork`] in ``dtype`` (stored values converted),
    every tensor present and of its declared shape."""
    cfg = read_config(folder)
    net = AsyncTNetwork(cfg).to(dtype=dtype)
    stored: Dict[str, torch.Tensor] = {}
    for path in _weight_files(pathlib.Path(folder)):
        stored.update(read_safetensors(path))
    own = net.state_dict()
    for name, param in own.items():
        if name not in stored:
            raise ValueError(f"{folder}: the checkpoint has no tensor {name}")
        if list(stored[name].shape) != list(param.shape):
            raise ValueError(f"{folder}: tensor {name} has shape {list(stored[name].shape)}, expected {list(param.shape)}")
    extra = sorted(set(stored) - set(own))
    if extra:
        raise ValueError(f"{folder}: tensors this config has no place for: {', '.join(extra[:5])}")
    net.load_state_dict({n: stored[n] for n in own})
    return net.to(device=device)


def save_network(net: AsyncTNetwork, folder: PathLike, dtype: torch.dtype = torch.bfloat16,
                 tokenizer_from: Optional[PathLike] = None) -> None:
    """Writes config.json (``torch_dtype`` = ``dtype``) and model.safetensors in ``dtype``, and copies
    tokenizer.json (and tokenizer_config.json, when there) from ``tokenizer_from``."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cfg = net.cfg
    cfg.norm_shapes = norm_shapes_of({n: list(t.shape) for n, t in net.state_dict().items()})
    tensors = {n: t.to(dtype) for n, t in net.state_dict().items()}
    write_safetensors(folder / WEIGHTS_FILE, tensors)
    (folder / CONFIG_FILE).write_text(json.dumps(cfg.to_json_dict(_TORCH_NAMES[dtype]), indent=2) + "\n")
    if tokenizer_from is not None:
        src = pathlib.Path(tokenizer_from)
        for name in TOKENIZER_FILES:
            if (src / name).is_file() and (src / name).resolve() != (folder / name).resolve():
                shutil.copyfile(src / name, folder / name)
