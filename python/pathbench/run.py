"""Run directories of `pathbench train --out DIR` (docs/run-format.md) and safetensors files."""
import json
import os
import struct
from dataclasses import dataclass, field

import numpy as np

from .xxh3 import xxh3_64

_DTYPES = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "I64": "<i8", "I32": "<i4", "U8": "u1"}


def read_safetensors(path):
    """{name: array} of a safetensors file, shaped as stored (row-major), in the stored dtype.

    Layout: an 8-byte little-endian header length n, n bytes of JSON
    {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the data,
    offsets counted from the end of the header. When __metadata__ holds "xxh3_64" (pathbench writes
    it: XXH3-64 of the data section, 16 hex digits) the data is checked against it (ValueError).
    """
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{path}: not a safetensors file ({len(blob)} bytes)")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise ValueError(f"{path}: header of {n} bytes in a {len(blob)}-byte file")
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", None) or {}
    if "xxh3_64" in meta and meta["xxh3_64"] != f"{xxh3_64(blob[8 + n:]):016x}":
        raise ValueError(f"{path}: corrupted: the tensor data does not match its xxh3_64 checksum")
    out = {}
    for name, info in header.items():
        if info["dtype"] not in _DTYPES:
            raise ValueError(f"{path}: tensor {name!r} has unsupported dtype {info['dtype']}")
        dt = np.dtype(_DTYPES[info["dtype"]])
        begin, end = info["data_offsets"]
        shape = tuple(info["shape"])
        if end - begin != dt.itemsize * int(np.prod(shape)) or 8 + n + end > len(blob):
            raise ValueError(f"{path}: tensor {name!r} offsets {begin}..{end} do not fit shape {shape}")
        out[name] = np.frombuffer(blob, dt, int(np.prod(shape)), 8 + n + begin).reshape(shape).copy()
    return out


def _read_jsonl(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _read_json(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


@dataclass
class Run:
    """One run directory. `result` is None while the run is not complete (no result.json)."""
    path: str
    config: dict
    meta: dict
    result: dict
    metrics: list = field(default_factory=list)  # metrics.jsonl: {"step", "loss", "lr", ...} per step
    evals: list = field(default_factory=list)    # eval.jsonl: {"step", "split", "acc", "loss", ...}
    weights: dict = field(default_factory=dict)  # model.safetensors: name -> float32 array

    def last_eval(self, split, task=None):
        """The last eval.jsonl line of `split` (and of `task`, default the training task)."""
        task = task or self.config["task"]
        rows = [e for e in self.evals if e["split"] == split and e["task"] == task]
        if not rows:
            raise KeyError(f"{self.path}: no evaluation of split {split!r} on {task!r}")
        return rows[-1]


def load_run(path):
    """Reads config.json, meta.json, result.json, metrics.jsonl, eval.jsonl, model.safetensors."""
    config = _read_json(os.path.join(path, "config.json"))
    if config is None:
        raise FileNotFoundError(f"{path}: no config.json, not a pathbench run directory")
    weights_path = os.path.join(path, "model.safetensors")
    return Run(path=path, config=config,
               meta=_read_json(os.path.join(path, "meta.json")),
               result=_read_json(os.path.join(path, "result.json")),
               metrics=_read_jsonl(os.path.join(path, "metrics.jsonl")),
               evals=_read_jsonl(os.path.join(path, "eval.jsonl")),
               weights=read_safetensors(weights_path) if os.path.exists(weights_path) else {})
