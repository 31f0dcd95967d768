"""The images kind's suite entry, program, pictures and shape, driven directly (no clock, no server): a point per
(parallel, count, side), a text-only request first, a warm-up image request, then the image requests from the
point's users; a point whose images are refused stops; every request its own deterministic images."""

from __future__ import annotations

import base64
import io
import zlib

import numpy as np
import pytest
from programkit import point_of, record_of, sends_in

from cardgen.errors import UsageError
from cardgen.kinds import kind_of, program_for, request_shape
from cardgen.kinds.images import ImagesParams
from cardgen.kinds.images.picture import MAX_SIDE, data_uri, pixels, png_bytes
from cardgen.kinds.images.program import IMAGES, NOT_CHAT, TEXT
from cardgen.kinds.program import Send
from cardgen.outcome import Outcome
from cardgen.points import expand
from cardgen.stops import STOP_COMPLETE
from cardgen.suite import parse_suite


def _suite(entry: str, endpoint: str = "chat"):
    return parse_suite(f"name: i\nendpoint: {endpoint}\nscenarios:\n  - {entry}\n", source="x")


def _point(**kw):
    base = dict(images=2, side=64, requests=4, seed=0, parallel=2, endpoint="chat", prompt_tokens=16,
                output_tokens=4)
    return point_of("images", **{**base, **kw})


def test_an_entry_is_a_point_per_parallel_count_image_count_and_side():
    points = expand(_suite("{kind: images, images: [2, 0, 1], sides: [448, 224], parallel: [1, 4], requests: 3}"))
    assert [p.name for p in points][:4] == ["images-k0-in64-out32-p1", "images-k1-224px-in64-out32-p1",
                                           "images-k1-448px-in64-out32-p1", "images-k2-224px-in64-out32-p1"]
    assert len(points) == 2 * (1 + 2 * 2)  # a text-only point once per parallel count, not once per side
    assert points[1].params == ImagesParams(images=1, side=224, requests=3, seed=0)
    assert {p.parallel for p in points} == {1, 4}
    assert kind_of(points[0]).expected_requests(points[0]) == 5  # text-only, warm-up, 3


@pytest.mark.parametrize("entry,words", [
    ("{kind: images, sides: [5000]}", f"1 to {MAX_SIDE} px"), ("{kind: images, sides: [0]}", "1 to"),
    ("{kind: images, images: [-1]}", "0 to 32"), ("{kind: images, images: [40]}", "0 to 32"),
    ("{kind: images, parallel: [0]}", "at least 1"), ("{kind: images, side: 4}", "side"),
    ("{kind: images, endpoint: completions}", "endpoint: chat"),
])
def test_a_bad_entry_is_a_one_line_error_that_says_why(entry, words):
    with pytest.raises(UsageError) as err:
        _suite(entry)
    assert words in err.value.message and "\n" not in err.value.message.strip()


def test_a_text_request_then_a_warm_up_then_the_users():
    point = _point()
    program = program_for(point)
    (text,) = sends_in(program.start())
    assert (text.phase, text.extra, text.parallel) == (TEXT, {"images": 0, "side": 0}, 1)
    (warm,) = sends_in(program.ended(text, Outcome.of(record_of(text, sent=0.0)), 1.0))
    assert warm.warmup and warm.phase == IMAGES and warm.extra == {"images": 2, "side": 64}
    first = sends_in(program.ended(warm, Outcome.of(record_of(warm, sent=1.0)), 2.0))
    assert [s.slot for s in first] == [0, 1] and all(not s.warmup and s.parallel == 2 for s in first)
    more = sends_in(program.ended(first[0], Outcome.of(record_of(first[0], sent=2.0)), 3.0))
    more += sends_in(program.ended(first[1], Outcome.of(record_of(first[1], sent=2.0)), 3.0))
    assert len(more) == 2 and program.stop is None
    done = [sends_in(program.ended(s, Outcome.of(record_of(s, sent=3.0)), 4.0)) for s in more]
    assert done == [[], []] and program.stop == STOP_COMPLETE
    assert [s.repeat for s in first + more] == [0, 1, 2, 3]


def test_a_refused_warm_up_or_a_first_round_that_all_failed_stops_the_point():
    program = program_for(_point())
    (text,) = sends_in(program.start())
    (warm,) = sends_in(program.ended(text, Outcome.of(record_of(text, sent=0.0)), 1.0))
    assert sends_in(program.ended(warm, Outcome.of(record_of(warm, sent=1.0, ok=False)), 2.0)) == []
    assert program.stop == STOP_COMPLETE and "warm-up" in (program.detail or "")

    program = program_for(_point())
    (text,) = sends_in(program.start())
    (warm,) = sends_in(program.ended(text, Outcome.of(record_of(text, sent=0.0)), 1.0))
    first = sends_in(program.ended(warm, Outcome.of(record_of(warm, sent=1.0)), 2.0))
    assert sends_in(program.ended(first[0], Outcome.of(record_of(first[0], sent=2.0, ok=False)), 3.0)) != []
    program = program_for(_point())
    (text,) = sends_in(program.start())
    (warm,) = sends_in(program.ended(text, Outcome.of(record_of(text, sent=0.0)), 1.0))
    first = sends_in(program.ended(warm, Outcome.of(record_of(warm, sent=1.0)), 2.0))
    ends = [sends_in(program.ended(s, Outcome.of(record_of(s, sent=2.0, ok=False)), 3.0)) for s in first]
    assert ends[-1] == [] and "all failed" in (program.detail or "")


def test_the_completions_endpoint_is_not_run():
    program = program_for(_point(endpoint="completions"))
    assert program.start() == [] and (program.stop, program.detail) == (STOP_COMPLETE, NOT_CHAT)


def test_pictures_are_valid_pngs_the_same_for_a_seed_and_different_across_seeds():
    from PIL import Image

    data = png_bytes(100, 60, "a")
    image = Image.open(io.BytesIO(data))
    assert image.size == (100, 60) and image.mode == "RGB"
    assert (np.asarray(image) == pixels(100, 60, "a")).all()
    assert png_bytes(100, 60, "a") == data and png_bytes(100, 60, "b") != data
    assert zlib.crc32(data) == zlib.crc32(png_bytes(100, 60, "a"))  # deterministic to the byte
    uri = data_uri(8, 8, "a")
    assert uri.startswith("data:image/png;base64,") and base64.b64decode(uri.split(",", 1)[1]) == png_bytes(8, 8, "a")
    with pytest.raises(ValueError, match="1 to"):
        pixels(MAX_SIDE + 1, 1, "a")


def _body(text: str = "hello 1") -> dict:
    return {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": text}], "stream": True}


def test_the_shape_puts_the_images_before_the_text_each_request_its_own():
    point = _point()
    shape = request_shape(point)
    assert shape is not None
    send = Send(prompt_tokens=16, output_tokens=4, phase=IMAGES, extra={"images": 2, "side": 64})
    a, b, again = _body("request 1"), _body("request 2"), _body("request 1")
    for body in (a, b, again):
        shape.body(point, send, body)
    parts = a["messages"][0]["content"]
    assert [p["type"] for p in parts] == ["image_url", "image_url", "text"] and parts[2]["text"] == "request 1"
    urls = [p["image_url"]["url"] for p in parts[:2]]
    assert urls[0] != urls[1] and urls[0] not in [p["image_url"]["url"] for p in b["messages"][0]["content"][:2]]
    assert again == a  # the same text and seed: the same images
    text_only = _body()
    shape.body(point, Send(prompt_tokens=16, output_tokens=4, phase=TEXT, extra={"images": 0, "side": 0}), text_only)
    assert text_only == _body()


def test_the_virtual_cost_names_the_images_sizes():
    point = _point()
    shape = request_shape(point)
    assert shape is not None
    cost = shape.virtual(point, Send(prompt_tokens=16, output_tokens=4, extra={"images": 2, "side": 64}))
    assert cost.images == ((64, 64), (64, 64)) and cost.record == {"modelled": True} and cost.prompt_tokens == 0
    assert shape.virtual(point, Send(prompt_tokens=16, output_tokens=4, extra={"images": 0, "side": 0})).images == ()
