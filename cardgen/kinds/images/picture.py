"""The images a request carries, made here and deterministically (no download, no imaging library): a PNG of a
given size written with :mod:`zlib`, its pixels squares of colours drawn from a seed,
so that two seeds give two different images (a server that caches encoded images by their content finds none of
them twice) that still compress well (the data URI stays small and is quick to make).

    png_bytes(width, height, seed)  -> bytes           a valid PNG (8-bit RGB, no interlace)
    data_uri(width, height, seed)   -> "data:image/png;base64,..."
"""

from __future__ import annotations

import base64
import hashlib
import struct
import zlib

import numpy as np

MAX_SIDE = 4096  # the largest width or height cardgen makes (a 4096 x 4096 RGB image is 48 MiB raw)
BLOCK = 16  # px a side of one square of colour
_PNG = b"\x89PNG\r\n\x1a\n"


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def pixels(width: int, height: int, seed: str) -> np.ndarray:
    """The image's RGB pixels (``height`` x ``width`` x 3, uint8): squares of :data:`BLOCK` px, each of a colour
    drawn from a generator seeded with ``seed``'s SHA-256 (rows repeat, so the PNG compresses well)."""
    if not (1 <= width <= MAX_SIDE and 1 <= height <= MAX_SIDE):
        raise ValueError(f"an image must be 1 to {MAX_SIDE} px a side, not {width} x {height}")
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "big"))
    blocks = rng.integers(0, 256, size=(-(-height // BLOCK), -(-width // BLOCK), 3), dtype=np.uint8)
    return np.repeat(np.repeat(blocks, BLOCK, axis=0), BLOCK, axis=1)[:height, :width]


def png_bytes(width: int, height: int, seed: str) -> bytes:
    """A PNG of ``width`` x ``height`` px whose pixels are :func:`pixels` of ``seed``: the same bytes for the same
    arguments, on every machine."""
    raw = pixels(width, height, seed)
    rows = np.concatenate([np.zeros((height, 1), dtype=np.uint8), raw.reshape(height, width * 3)], axis=1)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit, truecolour, deflate, no filter/interlace
    return _PNG + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(rows.tobytes(), 1)) + _chunk(b"IEND", b"")


def data_uri(width: int, height: int, seed: str) -> str:
    """The image as a ``data:`` URI, as an OpenAI-style ``image_url`` part carries it."""
    return "data:image/png;base64," + base64.b64encode(png_bytes(width, height, seed)).decode("ascii")
