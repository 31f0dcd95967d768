"""One generation request as the engine loop sees it: its state (``Seq.ctx``), and the SSE chunks of its
response, encoded as far as they can be when it arrives so that emitting a token costs one write.

A reasoning model's output (:mod:`cardgen.sim.reasoning`) is streamed as vLLM streams it: chat chunks carry the
reasoning in ``delta.reasoning`` and the answer in ``delta.content`` (one chunk may carry both, when a step's
tokens cross from one to the other), completions chunks carry the ``<think>`` span in their text."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

from cardgen.sim.reasoning import NONE, Thinking
from cardgen.sim.scheduler import Seq
from cardgen.sim.sse import WORDS, event, frame, token_text
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
    thinking: Thinking = NONE  # how its output divides into reasoning and answer
    reasoning_usage: bool = False  # usage says its reasoning tokens (a chat request to a reasoning model)
    answer_framed: tuple[bytes, ...] = ()  # the answer's word events, once the reasoning is over (chat)
    extra_tokens: int = 0  # tokens written beyond one per chunk (speculative decoding's steps)
    probe: bool = False  # cardgen's question before a load (``PROBE_HEADER``): stamped as such

    # --- pre-encoded SSE -----------------------------------------------------------------------------------
    def _base(self) -> str:
        obj = "chat.completion.chunk" if self.params.chat else "text_completion"
        return (
            f'{{"id":"{self.id}","object":"{obj}","created":{self.created},"model":{json.dumps(self.model)},'
        )

    def chunk(self, text: str, finish_reason: str | None = None, reasoning: str = "") -> str:
        """One chunk: ``text`` (the answer's), and in a chat chunk ``reasoning`` (the reasoning part's)."""
        finish = "null" if finish_reason is None else f'"{finish_reason}"'
        if self.params.chat:
            parts = ([f'"reasoning":"{reasoning}"'] if reasoning else []) + ([f'"content":"{text}"'] if text or
                                                                              not reasoning else [])
            choice = f'{{"index":0,"delta":{{{",".join(parts)}}},"logprobs":null,"finish_reason":{finish}}}'
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

    def usage_chunk(self, output_tokens: int, metrics: dict[str, float] | None = None) -> str:
        """The last chunk: ``usage``, and vLLM's per-request ``metrics`` (``--enable-per-request-metrics``)."""
        extra = f',"metrics":{json.dumps(metrics, separators=(",", ":"))}' if metrics else ""
        usage = json.dumps(self.usage(output_tokens), separators=(",", ":"))
        return f'{self._base()}"choices":[],"usage":{usage}{extra}}}'

    def usage(self, output_tokens: int) -> dict[str, object]:
        """The request's ``usage``: with a reasoning parser (chat), its reasoning tokens too."""
        p = self.params.prompt_tokens
        out: dict[str, object] = {"prompt_tokens": p, "total_tokens": p + output_tokens,
                                  "completion_tokens": output_tokens}
        if self.reasoning_usage:
            out["completion_tokens_details"] = {"reasoning_tokens": min(self.thinking.reasoning_tokens, output_tokens)}
        return out

    def texts(self, first: int, last: int) -> tuple[str, str]:
        """The answer's and the reasoning's text of output tokens ``first`` to ``last`` (a completion's reasoning
        is in its text, tags and all)."""
        think = self.thinking
        answer: list[str] = []
        reasoning: list[str] = []
        for n in range(first, last + 1):
            word = think.text_of(n, token_text(n))
            (reasoning if self.params.chat and think.is_reasoning(n) else answer).append(word)
        return "".join(answer), "".join(reasoning)

    def prepare_stream(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.framed = tuple(frame(event(self.chunk(w))) for w in WORDS)
        if self.params.chat and self.thinking.last:  # the reasoning's word events first, the answer's after it
            self.answer_framed = self.framed
            self.framed = tuple(frame(event(self.chunk("", reasoning=w))) for w in WORDS)

    def resolve(self, outcome: str) -> None:
        if not self.done.done():
            self.done.set_result(outcome)


def request_metrics(seq: Seq) -> dict[str, float]:
    """vLLM's per-request ``metrics`` of a finished sequence (``build_per_request_timing_metrics``): queue time
    (joining the queue to being scheduled), TTFT from scheduling, generation time (first to last token), mean ITL,
    in milliseconds."""
    out: dict[str, float] = {}
    if seq.scheduled_s is not None and seq.first_token_s is not None:
        out["time_to_first_token_ms"] = (seq.first_token_s - seq.scheduled_s) * 1000
    if seq.first_token_s is not None and seq.last_token_s is not None:
        out["generation_time_ms"] = (seq.last_token_s - seq.first_token_s) * 1000
    if seq.scheduled_s is not None:
        out["queue_time_ms"] = (seq.scheduled_s - seq.arrival_s) * 1000
    if seq.first_token_s is not None and seq.last_token_s is not None and seq.output_tokens > 1:
        out["mean_itl_ms"] = (seq.last_token_s - seq.first_token_s) / (seq.output_tokens - 1) * 1000
    return out
