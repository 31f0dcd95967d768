"""What a kind's requests carry beyond a prompt and an output length, and what it reads of their answers.

A kind whose requests are more than a sized prompt (a JSON schema or tools to constrain the answer, images in the
message, a context the server already holds) names a :class:`RequestShape` in its :class:`~cardgen.kinds.kind.Kind`
(``shape = "module:attribute"``, imported only where a request is made). Each interpreter asks it, and nothing else
knows the kind:

    program --Send(extra={...})--> interpreter
        load engine (cardgen.load.agent)      shape.body(point, send, body)     the request's JSON body, changed
                                              shape.read(point, send, answer)   the record's own fields of the answer
        virtual server (cardgen.sim.drive)    shape.virtual(point, send)        what the request costs the engine
                                                                                and its record's modelled fields

``Send.extra`` is the program's own description of one request (``{"constrained": true, "schema": "flat"}``,
``{"images": 2, "side": 448}``); it is recorded as :attr:`cardgen.schemas.records.RequestRecord.extra`, to which
the answer's fields (``read`` or ``virtual``) are added. Its keys are the kind's own: no other module reads them
but the kind's analysis.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from cardgen.kinds.program import Send
from cardgen.kinds.view import PointView


@dataclass(frozen=True, slots=True)
class Answer:
    """What the server answered to one request, as the load engine parsed its stream: its HTTP status (None: no
    answer), the answer's text, the tool calls it made (OpenAI's ``tool_calls``, each ``{"name", "arguments"}``
    with the arguments as the text the server streamed), its error (None: it ended well) and why it ended
    (``finish_reason``: ``length`` when ``max_tokens`` cut it off)."""

    status: int | None
    text: str = ""
    tool_calls: tuple[dict[str, str], ...] = ()
    error: str | None = None
    finish_reason: str | None = None


@dataclass(frozen=True, slots=True)
class VirtualCost:
    """What one request costs the virtual server beyond its text prompt and output, and what its record says that
    the server's answer would have told (the text is not modelled).

    ``prompt_tokens``: tokens the server adds to the prompt (an image's tokens); ``encode_flops``: work done on the
    request before its prefill (a vision encoder), timed on the modelled GPU; ``decode_factor``: each decode
    step's time for this sequence, relative to an unconstrained one (constrained decoding's mask: a step of the
    virtual server that decodes it takes its decode work's time that many times, the batch waiting for its slowest
    sequence, :mod:`cardgen.sim.scheduler`); ``images``: the
    images the request carries, each (width, height) in px, of which the virtual server makes the tokens and the
    encoder's work of the modelled model's vision encoder (:class:`cardgen.sim.catalog.VisionEncoder`: the
    preset's, else a stated default), added to ``prompt_tokens`` and ``encode_flops``; ``record``: the fields of
    :attr:`RequestRecord.extra <cardgen.schemas.records.RequestRecord.extra>` a modelled answer has."""

    prompt_tokens: int = 0
    encode_flops: float = 0.0
    images: tuple[tuple[int, int], ...] = ()
    decode_factor: float = 1.0
    record: dict[str, Any] = field(default_factory=dict)


NO_COST = VirtualCost()


class RequestShape(Protocol):
    """A kind's requests' own shape: see the module."""

    def body(self, point: PointView, send: Send, body: dict[str, Any]) -> None:
        """Change the request's JSON ``body`` (an OpenAI-style streaming request the load engine made: ``model``,
        ``max_tokens``, ``messages`` or ``prompt`` ...) in place."""

    def read(self, point: PointView, send: Send, answer: Answer) -> dict[str, Any]:
        """The record's own fields of ``answer`` (added to ``RequestRecord.extra``)."""

    def virtual(self, point: PointView, send: Send) -> VirtualCost:
        """What the request costs the virtual server, and its modelled record fields."""
