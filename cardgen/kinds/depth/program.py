"""Speed at context depth, one request at a time: the fill (the point's prompt once, as its requests are: the
server computes the whole of it and keeps its ``depth``-token prefix), a pause of :data:`PHASE_PAUSE_S`, then
``repeats`` requests of the same prefix and a suffix of their own, each decoding the point's output. The pause is
longer than a scrape interval, so that a scrape of the server's prefix-cache counters falls between the fill and
the requests at depth (the hit rate of the requests alone, where the server reports no per-request count).

The fill is the point's warm-up: the figures every point has (summary.json's ``scenarios``, what ``cardgen diff``
compares) are the requests at depth alone. At depth 0 the fill shares nothing with the requests (only its id's few tokens): it is a warm-up, as
``llama-bench``'s."""

from __future__ import annotations

from cardgen.kinds.depth.schema import DepthParams
from cardgen.kinds.program import Command, Program, Send
from cardgen.kinds.view import PointView
from cardgen.outcome import Outcome

PHASE_PAUSE_S = 1.0
FILL, AT_DEPTH = "fill", "depth"  # the records' ``phase``


class DepthProgram(Program):
    kind = "depth"

    def __init__(self, point: PointView, *, index: int = 0, parts: int = 1) -> None:
        super().__init__(point, index=index, parts=parts)
        self.params = point.params_as(DepthParams)

    def start(self) -> list[Command]:
        return [self.item(0, prefix=0, phase=FILL, slot=0, parallel=1, warmup=True)]

    def ended(self, send: Send, outcome: Outcome, now: float) -> list[Command]:
        done = self.issued - 1  # the requests at depth sent so far
        if done >= self.params.repeats:
            return self.finish()
        at = now + PHASE_PAUSE_S if done == 0 else None
        return [self.item(0, prefix=0, phase=AT_DEPTH, slot=0, at=at, parallel=1)]
