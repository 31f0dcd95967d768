"""The images of a chat request as the real-time virtual server reads them (``cardgen.sim.images``): each one's
size from its PNG or JPEG header, its tokens and encoder work from the served model's vision encoder, and a 400 for
an image it cannot read."""

from __future__ import annotations

import base64
import struct

import pytest

from cardgen.kinds.images.picture import data_uri
from cardgen.sim.images import ImageError, image_sizes
from cardgen.sim.validate import ApiError, parse_generation
from cardgen.sim.vision import DEFAULT_VISION


def _chat(*urls: str, text: str = "describe it") -> list[dict]:
    parts = [{"type": "image_url", "image_url": {"url": u}} for u in urls]
    return [{"role": "user", "content": [*parts, {"type": "text", "text": text}]}]


def _jpeg(width: int, height: int) -> str:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00" + bytes(9)
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + bytes(3)
    return "data:image/jpeg;base64," + base64.b64encode(b"\xff\xd8" + app0 + sof + b"\xff\xd9").decode()


def test_sizes_come_from_the_png_and_jpeg_headers_and_each_image_has_its_own_key():
    found = image_sizes(_chat(data_uri(224, 96, "a"), _jpeg(640, 480), data_uri(224, 96, "b")))
    assert [(w, h) for w, h, _ in found] == [(224, 96), (640, 480), (224, 96)]
    assert len({key for *_, key in found}) == 3  # other bytes, another key
    assert image_sizes([{"role": "user", "content": "no images"}]) == []


@pytest.mark.parametrize(("url", "words"), [
    ("https://example.com/cat.png", "data URIs only"),
    ("data:image/png,rawbytes", "must be base64"),
    ("data:image/png;base64,@@@", "not valid base64"),
    ("data:image/gif;base64," + base64.b64encode(b"GIF89a....").decode(), "neither PNG nor JPEG"),
])
def test_an_image_the_server_cannot_read_is_refused_in_words(url, words):
    with pytest.raises(ImageError, match=words):
        image_sizes(_chat(url))
    with pytest.raises(ApiError) as refused:
        parse_generation({"messages": _chat(url), "max_tokens": 4}, chat=True, names=(), max_model_len=100_000,
                         vision=DEFAULT_VISION)
    assert refused.value.status == 400 and words in refused.value.message


def test_the_images_tokens_count_in_the_prompt_and_their_work_is_the_encoders():
    body = {"messages": _chat(data_uri(448, 448, "x"), data_uri(224, 224, "y")), "max_tokens": 4}
    text = parse_generation({"messages": _chat(), "max_tokens": 4}, chat=True, names=(), max_model_len=100_000,
                            vision=DEFAULT_VISION)
    params = parse_generation(body, chat=True, names=(), max_model_len=100_000, vision=DEFAULT_VISION)
    tokens = DEFAULT_VISION.tokens(448, 448) + DEFAULT_VISION.tokens(224, 224)
    assert params.image_tokens == tokens and params.prompt_tokens == text.prompt_tokens + tokens
    assert params.encode_flops == pytest.approx(DEFAULT_VISION.flops(448, 448) + DEFAULT_VISION.flops(224, 224))
    assert [n for _, n in params.images] == [DEFAULT_VISION.tokens(448, 448), DEFAULT_VISION.tokens(224, 224)]
    with pytest.raises(ApiError, match="maximum context length"):  # the images' tokens count against the context
        parse_generation(body, chat=True, names=(), max_model_len=text.prompt_tokens + 8, vision=DEFAULT_VISION)
    with pytest.raises(ApiError, match="takes no images"):
        parse_generation(body, chat=True, names=(), max_model_len=100_000, vision=None)
