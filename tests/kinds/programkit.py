"""What the kinds' program tests share (tests/kinds/<kind>/test_<kind>_program.py and
tests/kinds/test_kind_programs.py): a point of any kind, a record of a request as if the server answered it,
and the sends among a program's commands. No clock, no socket, no server: a request "ends" when the test says
so, at the time the test says.

Importable by name from any test module under tests/kinds: tests/kinds/conftest.py puts this folder on the
path."""

from __future__ import annotations

from dataclasses import fields, replace

from cardgen.kinds.batch.schema import BatchParams
from cardgen.kinds.chat.schema import ChatParams
from cardgen.kinds.closed.schema import ClosedParams
from cardgen.kinds.depth.schema import DepthParams
from cardgen.kinds.images.schema import ImagesParams
from cardgen.kinds.ingest.schema import IngestParams
from cardgen.kinds.openloop.schema import OpenParams
from cardgen.kinds.prefix.schema import PrefixParams
from cardgen.kinds.program import Send
from cardgen.kinds.slosearch.schema import SloParams
from cardgen.kinds.waves.schema import WavesParams
from cardgen.points import Point
from cardgen.schemas.records import RequestRecord

PARAMS = {p.kind: p for p in (ClosedParams(), OpenParams(), WavesParams(), IngestParams(), BatchParams(),
                                PrefixParams(), ChatParams(), SloParams(), DepthParams(),
                                ImagesParams())}
HEADER = {f.name for f in fields(Point)}


def point_of(kind: str = "closed", **kw) -> Point:
    """A point of ``kind``: the header's fields of ``kw`` on the point, the others on its kind's params."""
    own = {k: kw.pop(k) for k in list(kw) if k not in HEADER}
    base = dict(name="p", group="g", endpoint="completions", timeout_s=10.0)
    return Point(**{**base, **kw}, params=replace(PARAMS[kind], **own))


def record_of(send: Send, *, sent: float, ttft: float = 0.1, duration: float = 1.0, ok: bool = True,
              ) -> RequestRecord:
    """A record of ``send`` as if the server answered it: first token ``ttft`` after ``sent``, the last
    ``duration`` after it, ``output_tokens`` tokens."""
    n = send.output_tokens
    end = sent + duration
    return RequestRecord(scenario="p", kind="closed", prompt_tokens_target=send.prompt_tokens,
                         output_tokens_target=n, sent_at=sent, first_token_at=sent + ttft, end_at=end,
                         chunk_times=[sent + ttft + (duration - ttft) * i / max(n - 1, 1) for i in range(n)],
                         output_tokens=n, prompt_tokens=send.prompt_tokens, status=200 if ok else 500,
                         error=None if ok else "HTTP 500", error_kind=None if ok else "http_status")


def sends_in(commands) -> list[Send]:
    """The :class:`Send` commands among ``commands``, in order."""
    return [c for c in commands if isinstance(c, Send)]
