"""One generation request as the engine loop sees it: its state (``Seq.ctx``), and the SSE chunks of its
response, encoded as far as they can be when it arrives so that emitting a token costs one write."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

from cardgen.sim.scheduler import Seq
from cardgen.sim.sse import WORDS, event, frame
from cardgen.sim.validate import GenParams


@dataclass(eq=False, slots=True)
class Live:
    """The driver's state of one generation request (``Seq.ctx``)."""

    index: int
    id: str
    params: GenParams
    created: int
    model: str
    fault: str | None
    fault_at: int  # output token at whose due time the fault strikes; 0: none
    done: asyncio.Future[str]
    transport: asyncio.Transport | None = None
    framed: tuple[bytes, ...] = ()  # the framed SSE event of each output word
    next_special: int = 1  # the next output token the slow path handles
    times: list[float] = field(default_factory=list)
    malformed: bool = False
    seq: Seq | None = None
    queued: bool = False  # handed to the scheduler
    arrived: float | None = None  # time.time() when it joined the scheduler's queue

    # --- pre-encoded SSE -----------------------------------------------------------------------------------
    def _base(self) -> str:
        obj = "chat.completion.chunk" if self.params.chat else "text_completion"
        return (
            f'{{"id":"{self.id}","object":"{obj}","created":{self.created},"model":{json.dumps(self.model)},'
        )

    def chunk(self, text: str, finish_reason: str | None = None) -> str:
        finish = "null" if finish_reason is None else f'"{finish_reason}"'
        if self.params.chat:
            choice = f'{{"index":0,"delta":{{"content":"{text}"}},"logprobs":null,"finish_reason":{finish}}}'
        else:
            choice = (
                f'{{"index":0,"text":"{text}","logprobs":null,"finish_reason":{finish},"stop_reason":null}}'
            )
        return f'{self._base()}"choices":[{choice}]}}'

    def role_chunk(self) -> str:
        return (
            f'{self._base()}"choices":[{{"index":0,"delta":{{"role":"assistant","content":""}},'
            f'"logprobs":null,"finish_reason":null}}]}}'
        )

    def usage_chunk(self, output_tokens: int) -> str:
        p = self.params.prompt_tokens
        return (
            f'{self._base()}"choices":[],"usage":{{"prompt_tokens":{p},'
            f'"total_tokens":{p + output_tokens},"completion_tokens":{output_tokens}}}}}'
        )

    def prepare_stream(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.framed = tuple(frame(event(self.chunk(w))) for w in WORDS)

    def resolve(self, outcome: str) -> None:
        if not self.done.done():
            self.done.set_result(outcome)
