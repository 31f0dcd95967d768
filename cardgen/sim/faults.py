"""Injected faults, deterministic by request arrival index, so a test knows which request fails and how.

``--faults http500=7,drop=11`` means: the 7th, 14th, 21st ... generation request is answered with HTTP 500,
the 11th, 22nd ... stream is cut. The index counts generation requests (completions and chat) whose body was
valid, from 1, in arrival order. A request gets at most one fault: when several periods divide its index, the
kind listed first in :data:`FAULT_KINDS` wins. A faulted request never stops at a modelled EOS.

"After K tokens" below is ``min(after_tokens, max_tokens - 1)`` text chunks (``after_tokens`` defaults to 3).

================  ================================================================================================
kind              what the client sees (streaming; non-streaming in brackets)
================  ================================================================================================
``http500``       HTTP 500 with a JSON error body, at once; the request never reaches the scheduler.
``drop``          after K tokens the connection is closed: no usage chunk, no ``data: [DONE]``, an unterminated
                  chunked body. [the connection is closed without a response when token K+1 would be due]
``error_event``   after K tokens, ``data: {"error": {...}}`` then ``data: [DONE]``; no usage chunk (vLLM's way of
                  reporting a failure mid-stream). [HTTP 500 with a JSON error body when token K+1 would be due]
``malformed``     after K tokens, one event whose data is not JSON (a truncated chunk); then the stream continues
                  normally to its last token, usage and ``[DONE]``. [HTTP 200 with a truncated JSON body]
``stall``         after K tokens nothing more is sent for ``stall_s`` seconds, then the connection is closed with
                  no ``[DONE]``. The sequence leaves the scheduler at once. [same, with no response at all]
``slow_first``    the request is held ``slow_first_s`` seconds before it joins the queue (a slow front end): its
                  TTFT grows by that much; otherwise a normal response.
================  ================================================================================================

Every injected fault is counted in ``cardgen_sim_faults_total{kind=...}`` and noted as ``"fault"`` in the
stamp log.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

FAULT_KINDS: tuple[str, ...] = ("http500", "drop", "error_event", "malformed", "stall", "slow_first")


@dataclass(frozen=True)
class FaultPlan:
    """Which requests get which fault: ``every[fault] = N`` faults every N-th request."""

    every: dict[str, int] = field(default_factory=dict)
    after_tokens: int = 3
    slow_first_s: float = 1.0
    stall_s: float = 60.0

    def __post_init__(self) -> None:
        for fault, n in self.every.items():
            if fault not in FAULT_KINDS:
                raise ValueError(f"unknown fault kind {fault!r}; known: {', '.join(FAULT_KINDS)}")
            if not isinstance(n, int) or n < 1:
                raise ValueError(f"fault {fault}: the period must be a whole number >= 1, not {n!r}")
        if self.after_tokens < 0 or self.slow_first_s < 0 or self.stall_s < 0:
            raise ValueError("fault timings must not be negative")

    @classmethod
    def parse(cls, spec: str | None, **timings: Any) -> FaultPlan:
        """``"http500=7,drop=11"`` (empty or None: no faults). Raises ValueError with what is wrong."""
        every: dict[str, int] = {}
        for item in (spec or "").split(","):
            item = item.strip()
            if not item:
                continue
            fault, eq, period = item.partition("=")
            fault = fault.strip()
            if not eq:
                raise ValueError(f"fault {item!r}: write KIND=N, e.g. drop=11")
            try:
                every[fault] = int(period)
            except ValueError:
                raise ValueError(f"fault {item!r}: N must be a whole number") from None
        return cls(every=every, **timings)

    def __bool__(self) -> bool:
        return bool(self.every)

    def fault_for(self, index: int) -> str | None:
        """The fault of the ``index``-th generation request (1-based), or None."""
        for fault in FAULT_KINDS:
            n = self.every.get(fault)
            if n and index % n == 0:
                return fault
        return None

    def fault_token(self, max_tokens: int) -> int:
        """The output token (1-based) at whose due time a mid-stream fault strikes: after K were sent."""
        return min(self.after_tokens, max_tokens - 1) + 1

    def spec(self) -> str:
        return ",".join(f"{kind}={n}" for kind, n in self.every.items())
