"""The images a chat request carries, as the virtual server over HTTP reads them: each ``image_url`` part's size,
from its data URI's PNG or JPEG header (no pixel is decoded), so the vision encoder of the model it serves
(:mod:`cardgen.sim.vision`) makes their tokens and work, as the virtual-time driver does from the kind's
:class:`~cardgen.kinds.shape.VirtualCost`.

    image_sizes(messages) -> [(width, height, key)]     key: a hash of the image's bytes (the prefix cache's)

A part that is not an image the server can read (a URL it would have to fetch, a data URI that is not base64,
bytes that are not PNG or JPEG) is an :class:`ImageError`, which the server answers with a 400.
"""

from __future__ import annotations

import base64
import binascii
import struct
import zlib
from typing import Any

_PNG = b"\x89PNG\r\n\x1a\n"
_JPEG = b"\xff\xd8"
# the JPEG markers whose segment holds the frame's size (SOF0-SOF15, less DHT, JPG and DAC)
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


class ImageError(ValueError):
    """An image part the server cannot read."""


def _size(data: bytes) -> tuple[int, int]:
    """Width and height of a PNG or JPEG image's bytes."""
    if data.startswith(_PNG):
        if len(data) < 24 or data[12:16] != b"IHDR":
            raise ImageError("the PNG image has no IHDR header")
        width, height = struct.unpack(">II", data[16:24])
        return int(width), int(height)
    if data.startswith(_JPEG):
        i = 2
        while i + 9 <= len(data):
            if data[i] != 0xFF:
                raise ImageError("the JPEG image's markers are broken")
            marker, length = data[i + 1], struct.unpack(">H", data[i + 2:i + 4])[0]
            if marker in _SOF:
                height, width = struct.unpack(">HH", data[i + 5:i + 9])
                return int(width), int(height)
            i += 2 + length
        raise ImageError("the JPEG image has no frame header")
    raise ImageError("the image is neither PNG nor JPEG")


def _image(url: Any) -> tuple[int, int, int]:
    if not isinstance(url, str) or not url.startswith("data:"):
        raise ImageError("the virtual server takes images as data URIs only (it fetches no URL)")
    head, _, payload = url.partition(",")
    if not head.endswith(";base64"):
        raise ImageError("an image's data URI must be base64")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ImageError("an image's data URI is not valid base64") from None
    width, height = _size(data)
    if width < 1 or height < 1:
        raise ImageError(f"an image of {width} x {height} px has no pixels")
    return width, height, zlib.crc32(data)


def image_sizes(messages: Any) -> list[tuple[int, int, int]]:
    """Every image of a chat's messages, in order: its width, height (px) and a hash of its bytes."""
    out = []
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else ():
            if isinstance(part, dict) and part.get("type") == "image_url":
                image = part.get("image_url")
                out.append(_image(image.get("url") if isinstance(image, dict) else image))
    return out
