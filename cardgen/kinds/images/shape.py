"""What an image request carries (:data:`SHAPE`, a :class:`cardgen.kinds.shape.RequestShape`).

An image request (``Send.extra["images"]`` k > 0, ``side`` s) carries its text and k images of s x s px as one chat
message: ``content`` = k ``image_url`` parts (PNG data URIs, :mod:`cardgen.kinds.images.picture`) then the text
part. Each image's seed is the point's ``seed``, the image's number and the request's text, which holds the load
engine's fresh request id: every image of a run is its own (a server's cache of encoded images never answers for
one) and the same run's text gives the same images. The record keeps nothing more of the answer than any request's
(its ``usage.prompt_tokens`` holds the image tokens). The virtual server is told the images' sizes
(:attr:`VirtualCost.images <cardgen.kinds.shape.VirtualCost.images>`): it models their tokens and the vision
encoder's work from the model's preset; its records say ``modelled``.
"""

from __future__ import annotations

from typing import Any

from cardgen.kinds.images.picture import data_uri
from cardgen.kinds.images.schema import ImagesParams
from cardgen.kinds.program import Send
from cardgen.kinds.shape import NO_COST, Answer, VirtualCost
from cardgen.kinds.view import PointView


def image_count(send: Send) -> tuple[int, int]:
    """The images a request carries and their side (px): (0, 0) for a text-only one."""
    extra = send.extra or {}
    return int(extra.get("images") or 0), int(extra.get("side") or 0)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


class ImagesShape:
    def body(self, point: PointView, send: Send, body: dict[str, Any]) -> None:
        count, side = image_count(send)
        messages = body.get("messages")
        if not count or not isinstance(messages, list) or not messages:
            return
        seed = point.params_as(ImagesParams).seed
        message = messages[-1]
        text = _text(message.get("content"))
        parts: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": data_uri(side, side, f"{seed}|{i}|{text}")}}
                                       for i in range(count)]
        message["content"] = [*parts, {"type": "text", "text": text}]

    def read(self, point: PointView, send: Send, answer: Answer) -> dict[str, Any]:
        return {}

    def virtual(self, point: PointView, send: Send) -> VirtualCost:
        count, side = image_count(send)
        if not count:
            return NO_COST
        return VirtualCost(images=((side, side),) * count, record={"modelled": True})


SHAPE = ImagesShape()
