"""The virtual GPU server: an aiohttp app that answers like vLLM, with tokens emitted in real time at the
modelled step ends of a :class:`~cardgen.sim.scheduler.Scheduler`. Its public names, from the modules that
hold them: :mod:`~cardgen.sim.api` (the HTTP API, :class:`SimServer`), :mod:`~cardgen.sim.engine` (the engine
loop), :mod:`~cardgen.sim.live` (one request's state), :mod:`~cardgen.sim.sse` (SSE framing),
:mod:`~cardgen.sim.stamps` (the stamp log), :mod:`~cardgen.sim.validate` (requests and errors) and
:mod:`~cardgen.sim.lifecycle` (the process: :func:`serve`, :func:`run_server`).

One driver task runs the engine loop::

    plan a step -> sleep until its modelled end -> write every emitted token -> plan the next step

Tokens are written straight to each response's transport by the driver, from SSE frames pre-encoded when the
request arrived: no per-token task wake-up, no JSON encoding in the hot path. The wait for a step's end sleeps
on the event loop (whose timer rounds up to whole milliseconds) until ``fine_sleep_s`` before the deadline,
then blocks in ``time.sleep`` (microsecond timer) for the rest: tokens leave about 0.1 ms after their
modelled time on an idle machine, with no busy-waiting (measured: ``cardgen_sim_emit_lag_seconds``).

Endpoints: ``POST /v1/completions``, ``POST /v1/chat/completions`` (streaming or not), ``POST /tokenize``,
``POST /detokenize``, ``GET /v1/models``, ``/version``, ``/health``, ``/ping``, ``/metrics``, and
``GET /cardgen/sim`` (what is modelled) and ``GET /cardgen/sim/lag`` (exact emission-lag quantiles;
``?reset=1`` starts a new window).

Stamp log (``--stamp-log``): one JSON line per generation request once it is over: ``id`` (the response's id:
``cmpl-<X-Request-Id>`` when the client sent a plain one, as vLLM names it), ``index`` (arrival
index, as faults count it), ``arrived`` (``time.time()`` when it joined the queue; null for ``http500``),
``times`` (``time.time()`` just before each text-bearing chunk was written; for a
non-streaming request, when each token was due), ``prompt_tokens``, ``output_tokens`` (tokens sent),
``finish_reason``, and ``fault`` or ``"aborted": true`` when that happened.
"""


from __future__ import annotations

from cardgen.sim.answers import ENGINE_NAME
from cardgen.sim.api import SimServer
from cardgen.sim.engine import MAX_CATCH_UP_S, Engine
from cardgen.sim.lifecycle import run_server, serve
from cardgen.sim.live import Live
from cardgen.sim.sse import SSE_HEADERS, token_text
from cardgen.sim.stamps import StampLog
from cardgen.sim.validate import ApiError, GenParams, error_body

__all__ = ["ENGINE_NAME", "MAX_CATCH_UP_S", "SSE_HEADERS", "ApiError", "Engine", "GenParams", "Live", "SimServer",
           "StampLog", "error_body", "run_server", "serve", "token_text"]
