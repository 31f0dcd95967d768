"""The virtual GPU server: an aiohttp app that answers like vLLM, with tokens emitted in real time at the
modelled step ends of a :class:`~cardgen.sim.scheduler.Scheduler`.

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

Stamp log (``--stamp-log``): one JSON line per generation request once it is over: ``id``, ``index`` (arrival
index, as faults count it), ``arrived`` (``time.time()`` when it joined the queue; null for ``http500``),
``times`` (``time.time()`` just before each text-bearing chunk was written; for a
non-streaming request, when each token was due), ``prompt_tokens``, ``output_tokens`` (tokens sent),
``finish_reason``, and ``fault`` or ``"aborted": true`` when that happened.
"""

from __future__ import annotations

import asyncio
import gc
import json
import math
import os
import random
import secrets
import signal
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from cardgen import __version__
from cardgen.errors import UsageError
from cardgen.sim import tokenizer
from cardgen.sim.config import SimConfig, build_perf, cache_config_labels, max_model_len
from cardgen.sim.metrics import SimMetrics
from cardgen.sim.perf import PerfModel
from cardgen.sim.scheduler import Scheduler, Seq, SeqStatus, block_hashes

ENGINE_NAME = "cardgen-sim"
SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
_WORDS = tuple(f" {w}" for w in tokenizer.OUTPUT_WORDS)
_NWORDS = len(_WORDS)
_DONE = b"data: [DONE]\n\n"
MAX_CATCH_UP_S = 1.0  # a driver later than this (the process was stopped) restarts the clock instead


def _frame(payload: bytes) -> bytes:
    """One HTTP/1.1 chunk (the response is chunked; the driver writes to the transport itself)."""
    return b"%x\r\n%b\r\n" % (len(payload), payload)


def _event(data: str) -> bytes:
    return b"data: " + data.encode() + b"\n\n"


def token_text(n: int) -> str:
    """Text of output token ``n`` (1-based): one word with a leading space."""
    return _WORDS[n % _NWORDS]


def error_body(status: int, message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


class ApiError(Exception):
    """A request the server refuses, answered as vLLM does: ``{"error": {...}}`` with an HTTP status."""

    def __init__(self, status: int, message: str, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind

    def response(self) -> web.Response:
        return web.json_response(error_body(self.status, self.message, self.kind), status=self.status)


@dataclass(frozen=True, slots=True)
class GenParams:
    """A validated generation request."""

    chat: bool
    prompt_tokens: int
    max_tokens: int
    min_tokens: int
    ignore_eos: bool
    stream: bool
    include_usage: bool


@dataclass(eq=False, slots=True)
class _Live:
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
        self.framed = tuple(_frame(_event(self.chunk(w))) for w in _WORDS)

    def resolve(self, outcome: str) -> None:
        if not self.done.done():
            self.done.set_result(outcome)


class StampLog:
    """The ``--stamp-log`` file. ``add`` only queues the record: encoding a long ``times`` list costs ~0.1 ms,
    too much inside a step's emission loop; :meth:`drain` encodes the queue one record per event-loop turn."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._fh = self.path.open("a", encoding="utf-8")
        self._pending: deque[dict[str, Any]] = deque()

    def add(self, record: dict[str, Any]) -> None:
        self._pending.append(record)

    @staticmethod
    def _line(record: dict[str, Any]) -> str:
        return json.dumps(record, separators=(",", ":")) + "\n"

    async def drain(self) -> None:
        """Encode and write what is queued, yielding to the event loop between records."""
        lines = []
        try:
            while self._pending:
                lines.append(self._line(self._pending.popleft()))
                await asyncio.sleep(0)
        finally:  # also when cancelled at shutdown: nothing encoded is lost
            if lines:
                self._fh.write("".join(lines))
                self._fh.flush()

    def close(self) -> None:
        lines = [self._line(r) for r in self._pending]
        self._pending.clear()
        self._fh.write("".join(lines))
        self._fh.close()


class SimServer:
    """The virtual server: scheduler, metrics, faults and the HTTP app around them."""

    def __init__(self, config: SimConfig, perf: PerfModel | None = None) -> None:
        self.config = config
        self.perf = perf if perf is not None else build_perf(config)
        self.max_model_len = max_model_len(config, self.perf)
        self.scheduler = Scheduler(self.perf, chunked_prefill=config.chunked_prefill)
        cache = cache_config_labels(self.perf, max_len=self.max_model_len) if config.cache_config else None
        self.metrics = SimMetrics(model_name=config.model_name, cache_config=cache)
        self.faults = config.faults
        self.stamp_log = StampLog(config.stamp_log) if config.stamp_log else None
        self.started_at = time.time()
        self.url: str | None = None
        self._index = 0
        self._live: set[_Live] = set()
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._wall_offset = 0.0
        self.failed: BaseException | None = None
        self.on_failure: Callable[[], None] | None = None

    # --- the app ---------------------------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.add_routes(
            [
                web.post("/v1/completions", self.completions),
                web.post("/v1/chat/completions", self.chat_completions),
                web.get("/v1/models", self.models),
                web.get("/version", self.version),
                web.get("/health", self.health),
                web.get("/ping", self.health),
                web.get("/cardgen/sim", self.describe_handler),
                web.get("/cardgen/sim/lag", self.lag),
            ]
        )
        if self.config.tokenize:
            app.add_routes([web.post("/tokenize", self.tokenize), web.post("/detokenize", self.detokenize)])
        if self.config.metrics:
            app.add_routes([web.get("/metrics", self.metrics_handler)])
        app.on_startup.append(self._on_startup)
        app.on_shutdown.append(self._on_shutdown)
        return app

    async def _on_startup(self, app: web.Application) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._wall_offset = time.time() - loop.time()
        self._tasks.append(asyncio.create_task(self._drive(), name="cardgen-sim-driver"))
        if self.stamp_log is not None:
            self._tasks.append(asyncio.create_task(self._flush_stamps(), name="cardgen-sim-stamps"))

    async def _on_shutdown(self, app: web.Application) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for live in list(self._live):
            if live.seq is not None and live.queued:
                self.scheduler.abort(live.seq, self._loop.time())
            if live.transport is not None:
                live.transport.close()
            live.resolve("shutdown")
        if self.stamp_log is not None:
            self.stamp_log.close()

    def describe(self) -> dict[str, Any]:
        """What this server models (``GET /cardgen/sim``)."""
        cfg = self.config
        sched = self.scheduler
        return {
            "engine": ENGINE_NAME,
            "version": __version__,
            "modelled": True,
            "model": cfg.model,
            "served_model_name": cfg.model_name,
            "gpu": cfg.gpu if cfg.perf == "roofline" else None,
            "tp": cfg.tp,
            "engine_profile": cfg.engine,
            "perf": self.perf.describe(),
            "scheduler": {
                "policy": "chunked-prefill" if cfg.chunked_prefill else "prefill-first",
                "block_size": sched.block_size,
                "num_gpu_blocks": sched.total_blocks,
                "kv_cache_size_tokens": sched.total_blocks * sched.block_size,
                "max_num_seqs": sched.max_num_seqs,
                "max_num_batched_tokens": sched.max_num_batched_tokens,
                "max_model_len": self.max_model_len,
            },
            "eos_rate": cfg.eos_rate,
            "seed": cfg.seed,
            "faults": self.faults.spec() or None,
            "pid": os.getpid(),
            "started_at": self.started_at,
            "url": self.url,
        }

    # --- small endpoints -------------------------------------------------------------------------------------
    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": __version__, "engine": ENGINE_NAME})

    async def models(self, request: web.Request) -> web.Response:
        card = {
            "id": self.config.model_name,
            "object": "model",
            "created": int(self.started_at),
            "owned_by": ENGINE_NAME,
            "root": self.config.model,
            "parent": None,
            "max_model_len": self.max_model_len,
            "permission": [],
        }
        return web.json_response({"object": "list", "data": [card]})

    async def describe_handler(self, request: web.Request) -> web.Response:
        return web.json_response(self.describe())

    async def lag(self, request: web.Request) -> web.Response:
        reset = request.query.get("reset", "") not in ("", "0", "false")
        return web.json_response(self.metrics.lag_summary(reset=reset))

    async def metrics_handler(self, request: web.Request) -> web.Response:
        text = self.metrics.render(self.scheduler)
        return web.Response(
            text=text,
            content_type="text/plain",
            charset="utf-8",
            headers={"X-Content-Type-Options": "nosniff"},
        )

    async def tokenize(self, request: web.Request) -> web.Response:
        try:
            body = await self._json(request)
            self._check_model(body)
            if "messages" in body:
                ids = tokenizer.chat_ids(body["messages"])
            elif "prompt" in body:
                ids = tokenizer.prompt_ids(body["prompt"])
            else:
                raise ApiError(400, "give 'prompt' or 'messages'")
        except tokenizer.PromptError as exc:
            return ApiError(400, str(exc)).response()
        except ApiError as exc:
            return exc.response()
        return web.json_response({"count": len(ids), "max_model_len": self.max_model_len, "tokens": ids})

    async def detokenize(self, request: web.Request) -> web.Response:
        try:
            body = await self._json(request)
            self._check_model(body)
            ids = body.get("tokens")
            if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
                raise ApiError(400, "'tokens' must be a list of token ids")
        except ApiError as exc:
            return exc.response()
        return web.json_response({"prompt": tokenizer.decode_ids(ids)})

    # --- generation ------------------------------------------------------------------------------------------
    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def _json(self, request: web.Request) -> dict[str, Any]:
        try:
            body = json.loads(await request.read())
        except (ValueError, UnicodeDecodeError):
            raise ApiError(400, "the request body is not JSON") from None
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be a JSON object")
        return body

    def _check_model(self, body: dict[str, Any]) -> None:
        model = body.get("model")
        if model is not None and model not in (self.config.model_name, self.config.model):
            raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError")

    def parse(self, body: dict[str, Any], *, chat: bool) -> GenParams:
        """Validate a generation request as vLLM would (the subset the simulator models)."""
        self._check_model(body)
        try:
            if chat:
                if "messages" not in body:
                    raise ApiError(400, "'messages' is required")
                prompt_tokens = tokenizer.count_chat(body["messages"])
            else:
                if "prompt" not in body:
                    raise ApiError(400, "'prompt' is required")
                prompt_tokens = tokenizer.count_prompt(body["prompt"])
        except tokenizer.PromptError as exc:
            raise ApiError(400, str(exc)) from None
        if prompt_tokens < 1:
            raise ApiError(400, "The prompt cannot be empty.")
        if body.get("n") not in (None, 1):
            raise ApiError(400, "this server generates one choice per request (n=1)")

        def integer(name: str, value: Any, minimum: int) -> int:
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ApiError(400, f"'{name}' must be an integer >= {minimum}")
            return value

        raw_max = body.get("max_completion_tokens") if chat else None
        if raw_max is None:
            raw_max = body.get("max_tokens")
        if raw_max is None:
            max_tokens = self.max_model_len - prompt_tokens
        else:
            max_tokens = integer("max_tokens", raw_max, 1)
        if prompt_tokens + max_tokens > self.max_model_len or max_tokens < 1:
            raise ApiError(
                400,
                f"This model's maximum context length is {self.max_model_len} tokens. However, you requested "
                f"{prompt_tokens + max(max_tokens, 1)} tokens ({prompt_tokens} in the messages, "
                f"{max(max_tokens, 1)} in the completion). Please reduce the length of the messages or completion.",
            )
        min_tokens = integer("min_tokens", body.get("min_tokens") or 0, 0)
        if min_tokens > max_tokens:
            raise ApiError(
                400, f"min_tokens ({min_tokens}) must be less than or equal to max_tokens ({max_tokens})"
            )
        stream = bool(body.get("stream", False))
        options = body.get("stream_options")
        if options is not None and not stream:
            raise ApiError(400, "Stream options can only be defined when `stream=True`.")
        include_usage = bool(isinstance(options, dict) and options.get("include_usage"))
        return GenParams(
            chat=chat,
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            min_tokens=min_tokens,
            ignore_eos=bool(body.get("ignore_eos", False)),
            stream=stream,
            include_usage=include_usage,
        )

    def _block_hashes(self, body: dict[str, Any], params: GenParams) -> tuple[int, ...]:
        """The chain hashes of the prompt's full KV blocks, for the scheduler's prefix cache (none when it is
        off or the prompt is shorter than a block)."""
        sched = self.scheduler
        if not sched.prefix_caching or params.prompt_tokens < sched.block_size:
            return ()
        ids = tokenizer.chat_ids(body["messages"]) if params.chat else tokenizer.prompt_ids(body["prompt"])
        return block_hashes(ids, sched.block_size)

    def _stop_at(self, params: GenParams, index: int, fault: str | None) -> int | None:
        """Output length at which the modelled EOS ends the request (None: it runs to max_tokens)."""
        rate = self.config.eos_rate
        if params.ignore_eos or fault is not None or rate <= 0 or params.min_tokens >= params.max_tokens:
            return None
        u = random.Random(f"{self.config.seed}:{index}").random()
        # geometric: each token after min_tokens ends the output with probability `rate`
        length = params.min_tokens + 1 + int(math.log1p(-u) / math.log1p(-rate))
        return length if length < params.max_tokens else None

    async def _generate(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        try:
            body = await self._json(request)
            params = self.parse(body, chat=chat)
        except ApiError as exc:
            return exc.response()
        self._index += 1
        index = self._index
        fault = self.faults.fault_for(index) if self.faults else None
        loop = self._loop
        live = _Live(
            index=index,
            id=f"{'chatcmpl' if chat else 'cmpl'}-{secrets.token_hex(16)}",
            params=params,
            created=int(time.time()),
            model=self.config.model_name,
            fault=fault,
            fault_at=self.faults.fault_token(params.max_tokens) if fault else 0,
            done=loop.create_future(),
        )
        if fault is not None:
            self.metrics.count_fault(fault)
        if fault == "http500":
            self._stamp(live, None)
            return web.json_response(
                error_body(500, "injected fault (http500)", "InternalServerError"), status=500
            )
        seq = Seq(
            params.prompt_tokens, params.max_tokens, stop_at=self._stop_at(params, index, fault), ctx=live,
            block_hashes=self._block_hashes(body, params),
        )
        live.seq = seq
        self._live.add(live)
        response: web.StreamResponse | None = None
        try:
            if fault == "slow_first":
                await asyncio.sleep(self.faults.slow_first_s)
            if params.stream:
                response = web.StreamResponse(headers=SSE_HEADERS)
                await response.prepare(request)
                assert request.transport is not None
                live.prepare_stream(request.transport)
            else:
                live.transport = request.transport
            self.scheduler.add(seq, loop.time())
            live.arrived = time.time()
            live.queued = True
            self._wake.set()
            outcome = await live.done
        except asyncio.CancelledError:  # the client went away (or the server is stopping)
            self._abort(live)
            raise
        finally:
            self._live.discard(live)
        if response is not None:
            if outcome in ("ok", "error_event"):
                await response.write_eof()
            return response
        return self._final_response(live, outcome)

    def _final_response(self, live: _Live, outcome: str) -> web.StreamResponse:
        """The body of a non-streaming request."""
        seq = live.seq
        assert seq is not None
        if outcome == "error_event":
            return web.json_response(
                error_body(500, "injected fault (error_event)", "InternalServerError"), status=500
            )
        if outcome != "ok":  # dropped, stalled, shut down: the connection is already closed
            return web.Response(status=500)
        n = seq.output_tokens
        text = "".join(token_text(i) for i in range(1, n + 1))
        p = live.params.prompt_tokens
        if live.params.chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": seq.finish_reason,
            }
            obj = "chat.completion"
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": seq.finish_reason,
                "stop_reason": None,
            }
            obj = "text_completion"
        body = json.dumps(
            {
                "id": live.id,
                "object": obj,
                "created": live.created,
                "model": live.model,
                "choices": [choice],
                "usage": {"prompt_tokens": p, "total_tokens": p + n, "completion_tokens": n},
            }
        )
        if live.malformed:
            body = body[: len(body) // 2]
        return web.Response(text=body, content_type="application/json")

    def _abort(self, live: _Live) -> None:
        """The client went away: free the sequence's blocks at once."""
        seq = live.seq
        if seq is None or seq.finished:
            return
        if live.queued:
            self.scheduler.abort(seq, self._loop.time())
        self._stamp(live, seq, aborted=True)
        live.resolve("aborted")

    def _stamp(self, live: _Live, seq: Seq | None, *, aborted: bool = False) -> None:
        if self.stamp_log is None:
            return
        record: dict[str, Any] = {
            "id": live.id,
            "index": live.index,
            "arrived": live.arrived,
            "times": live.times,
            "prompt_tokens": live.params.prompt_tokens,
            "output_tokens": len(live.times),
            "finish_reason": seq.finish_reason
            if seq is not None and seq.status == SeqStatus.FINISHED
            else None,
        }
        if live.fault is not None:
            record["fault"] = live.fault
        if aborted:
            record["aborted"] = True
        self.stamp_log.add(record)

    # --- the engine loop -------------------------------------------------------------------------------------
    async def _drive(self) -> None:
        try:
            await self._drive_loop()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a broken driver must not leave a server that accepts requests
            self.failed = exc
            traceback.print_exc(file=sys.stderr)
            if self.on_failure is not None:
                self.on_failure()
            raise

    async def _drive_loop(self) -> None:
        loop = self._loop
        sched = self.scheduler
        wake = self._wake
        fine = self.config.fine_sleep_s
        sleep = asyncio.sleep
        clock = loop.time
        prev_end = clock()
        busy = False  # the last step ran back to back with this one
        while True:
            if not sched.has_work:
                busy = False
                wake.clear()
                await wake.wait()
                continue
            now = clock()
            # back to back, a step starts when the previous one ended in modelled time, however late this loop
            # is: lateness shows in the emission lag and never accumulates into the modelled timeline
            start = prev_end if busy and now - prev_end < MAX_CATCH_UP_S else now
            step = sched.next_step(start)
            if step is None:  # only waiting requests that cannot be admitted yet: wait for a change
                busy = False
                wake.clear()
                await wake.wait()
                continue
            busy = True
            deadline = step.end_s
            remaining = deadline - clock()
            if remaining > fine:
                await sleep(remaining - fine)
                remaining = deadline - clock()
            if remaining > 0:
                time.sleep(remaining)  # blocks the loop for at most fine_sleep_s (+ the loop timer's slack)
            emitted = sched.finish_step(step)
            self._emit(deadline + self._wall_offset, emitted)
            prev_end = deadline
            # let requests that came during the blocking sleep join the queue before the next step is planned
            await sleep(0)

    def _emit(self, target_wall: float, emitted: list[Seq]) -> None:
        """Write every emitted token; the common case (a streamed token mid-way) is the first branch."""
        now = time.time
        observe_lag = self.metrics.observe_lag
        observe_itl = self.metrics.itl.observe
        for seq in emitted:
            live: _Live = seq.ctx
            n = seq.output_tokens
            if n != live.next_special:
                observe_itl(seq.gap_s)  # type: ignore[arg-type]
                t = now()
                if live.framed:
                    live.transport.write(live.framed[n % _NWORDS])  # type: ignore[union-attr]
                    observe_lag(t - target_wall)
                live.times.append(t)
            else:
                self._emit_special(seq, live, n, target_wall)

    def _emit_special(self, seq: Seq, live: _Live, n: int, target_wall: float) -> None:
        """First token, last token, or a fault."""
        metrics = self.metrics
        if n == 1:
            metrics.observe_first_token(seq)
        else:
            metrics.itl.observe(seq.gap_s)  # type: ignore[arg-type]
        stream = bool(live.framed)
        transport = live.transport
        out: list[bytes] = []
        if n == live.fault_at:
            fault = live.fault
            if fault == "malformed":
                if stream:
                    out.append(b'data: {"id":"' + live.id.encode() + b'","choices":[{"index":0,"text":\n\n')
                live.malformed = True
            elif fault in ("drop", "error_event", "stall"):
                self.scheduler.abort(seq, self._loop.time())
                if fault == "error_event" and stream:
                    err = json.dumps(error_body(500, "injected fault (error_event)", "InternalServerError"))
                    assert transport is not None
                    transport.write(_frame(_event(err) + _DONE))
                if fault == "drop" and transport is not None:
                    transport.close()
                self._stamp(live, seq)
                if fault == "stall":
                    self._loop.call_later(self.faults.stall_s, self._end_stall, live)
                else:
                    live.resolve("dropped" if fault == "drop" else "error_event")
                return
        if stream:
            if n == 1 and live.params.chat:
                out.append(_event(live.role_chunk()))
            if seq.finished:
                out.append(_event(live.chunk(token_text(n), seq.finish_reason)))
                if live.params.include_usage:
                    out.append(_event(live.usage_chunk(n)))
                out.append(_DONE)
            else:
                out.append(_event(live.chunk(token_text(n))))
            t = time.time()
            assert transport is not None
            transport.write(_frame(b"".join(out)))
            metrics.observe_lag(t - target_wall)
        else:
            t = time.time()
        live.times.append(t)
        if seq.finished:
            metrics.observe_finished(seq)
            self._stamp(live, seq)
            live.resolve("ok")
            return
        candidates = [seq.max_tokens]
        if seq.stop_at is not None:
            candidates.append(seq.stop_at)
        if live.fault_at > n:
            candidates.append(live.fault_at)
        live.next_special = min(candidates)

    def _end_stall(self, live: _Live) -> None:
        if live.transport is not None:
            live.transport.close()
        live.resolve("stalled")

    async def _flush_stamps(self) -> None:
        assert self.stamp_log is not None
        while True:
            await asyncio.sleep(0.5)
            await self.stamp_log.drain()


# --- running it ------------------------------------------------------------------------------------------------
def _write_port_file(path: Path, port: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{port}\n", encoding="utf-8")
    os.replace(tmp, path)


async def run_server(
    config: SimConfig, *, perf: PerfModel | None = None, on_ready: Callable[[SimServer], None] | None = None
) -> None:
    """Serve until SIGTERM/SIGINT, ``max_lifetime_s``, the parent process's death, or a driver failure."""
    server = SimServer(config, perf)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    reason: list[str] = []

    def request_stop(why: str) -> None:
        if not stop.is_set():
            reason.append(why)
            stop.set()

    server.on_failure = lambda: request_stop("driver failure")
    runner = web.AppRunner(server.app(), access_log=None, handler_cancellation=True, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, config.host, config.port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise UsageError(f"cannot listen on {config.host}:{config.port}: {exc.strerror or exc}") from None
    port = int(runner.addresses[0][1])  # the bound port, also when asked for 0
    server.url = f"http://{config.host}:{port}"
    signals = (signal.SIGTERM, signal.SIGINT) if threading.current_thread() is threading.main_thread() else ()
    for sig in signals:
        loop.add_signal_handler(sig, request_stop, sig.name)
    if config.max_lifetime_s > 0:
        loop.call_later(config.max_lifetime_s, request_stop, "max lifetime reached")
    watcher = asyncio.create_task(_watch_parent(request_stop)) if config.watch_parent else None
    gc.collect()
    gc.freeze()  # start-up objects leave the collector's view: fewer, shorter pauses in the hot path
    if config.port_file is not None:
        _write_port_file(config.port_file, port)
    if on_ready is not None:
        on_ready(server)
    try:
        await stop.wait()
    finally:
        if watcher is not None:
            watcher.cancel()
        for sig in signals:
            loop.remove_signal_handler(sig)
        await runner.cleanup()
    print(f"cardgen-sim: stopped ({reason[0] if reason else 'done'})", file=sys.stderr, flush=True)
    if server.failed is not None:
        raise RuntimeError(f"the virtual server's engine loop failed: {server.failed!r}") from server.failed


async def _watch_parent(request_stop: Callable[[str], None]) -> None:
    parent = os.getppid()
    while True:
        await asyncio.sleep(0.5)
        if os.getppid() != parent:
            request_stop("parent process exited")
            return


def _prefer_cpu_when_due() -> str:
    """Ask the OS to wake this process on time: it sleeps most of each step and works for well under a
    millisecond, so a real-time (round-robin) priority costs others nothing and cuts the wake-up latency that
    dominates token-emission lag on a busy machine. Falls back silently (an unprivileged user gets EPERM)."""
    if os.environ.get("CARDGEN_SIM_NO_RT"):
        return "default"
    try:
        os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(1))
        return "SCHED_RR"
    except (AttributeError, PermissionError, OSError):
        try:
            os.nice(-5)
            return "nice -5"
        except (PermissionError, OSError):
            return "default"


def serve(config: SimConfig, *, on_ready: Callable[[SimServer], None] | None = None) -> None:
    """Build the PerfModel and run the server in this thread until it stops (see :func:`run_server`)."""
    perf = build_perf(config)  # errors (unknown model or GPU) before any socket is opened
    policy = _prefer_cpu_when_due()
    print(f"cardgen-sim: process scheduling: {policy}", file=sys.stderr, flush=True)
    asyncio.run(run_server(config, perf=perf, on_ready=on_ready))
