"""Binary dataset files of `pathbench gen --format bin` (tasks/README.md, "Binary file layout")."""
import struct
from dataclasses import dataclass

import numpy as np

from .xxh3 import xxh3_64

_MAGIC = b"PBDATA\x1a\n"
# magic, version, header_bytes, n, seq_len, vocab_size, seed, token_bytes, spec_bytes,
# split_bytes, payload_xxh3, header_xxh3: the 64-byte fixed header, little-endian
_HEADER = struct.Struct("<8sIIQIIQIHHQQ")


@dataclass
class Dataset:
    input: np.ndarray   # (n, T) int32 tokens read
    target: np.ndarray  # (n, T) int32 tokens to predict, −1 where there is none
    scored: np.ndarray  # (n, T) bool, the targets counted by the task's accuracy
    spec: str           # canonical task spec
    split: str
    seed: int
    vocab_size: int


def read_dataset(path):
    """Reads and checks a dataset file; ValueError on a bad magic, version, size or checksum.

    Both checksums are XXH3-64: of the n records, and of the header_bytes-byte header with its
    own checksum field zeroed. A record is input (T tokens) | target (T tokens, −1 stored as
    all-ones) | scored (T bytes), tokens of token_bytes = 1, 2 or 4 bytes.
    """
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < _HEADER.size:
        raise ValueError(f"{path}: truncated, {len(blob)} bytes")
    (magic, version, header_bytes, n, T, vocab, seed, token_bytes, spec_bytes, split_bytes,
     payload_xxh3, header_xxh3) = _HEADER.unpack_from(blob)
    if magic != _MAGIC:
        raise ValueError(f"{path}: not a pathbench dataset file (bad magic)")
    if version != 1:
        raise ValueError(f"{path}: format version {version}, this reader reads version 1")
    if header_bytes != (64 + spec_bytes + split_bytes + 63) // 64 * 64 or header_bytes > len(blob):
        raise ValueError(f"{path}: truncated or corrupted header")
    head = bytearray(blob[:header_bytes])
    head[56:64] = bytes(8)
    if xxh3_64(head) != header_xxh3:
        raise ValueError(f"{path}: header checksum mismatch")
    if token_bytes not in (1, 2, 4):
        raise ValueError(f"{path}: corrupted header, {token_bytes}-byte tokens")
    record = T * (2 * token_bytes + 1)
    payload = blob[header_bytes:]
    if len(payload) != n * record:
        raise ValueError(f"{path}: {len(payload)} bytes of records, expected {n} of {record}")
    if xxh3_64(payload) != payload_xxh3:
        raise ValueError(f"{path}: payload checksum mismatch")
    rec = np.frombuffer(payload, np.uint8).reshape(n, record)
    tok = np.dtype(f"<u{token_bytes}")

    def tokens(lo):  # (n, T) int32, all-ones → −1
        raw = rec[:, lo:lo + T * token_bytes].copy().view(tok).astype(np.int64)
        return np.where(raw == (1 << 8 * token_bytes) - 1, -1, raw).astype(np.int32)

    spec = blob[64:64 + spec_bytes].decode()
    split = blob[64 + spec_bytes:64 + spec_bytes + split_bytes].decode()
    return Dataset(tokens(0), tokens(T * token_bytes), rec[:, 2 * T * token_bytes:] != 0,
                   spec, split, seed, vocab)
