"""The virtual server's HTTP API, answering like vLLM's OpenAI-compatible server: ``POST /v1/completions``,
``POST /v1/chat/completions`` (streaming or not), ``POST /tokenize``, ``POST /detokenize``, ``GET /v1/models``,
``/version``, ``/health``, ``/ping``, ``/metrics``, and ``GET /cardgen/sim`` (what is modelled) and
``GET /cardgen/sim/lag`` (exact emission-lag quantiles; ``?reset=1`` starts a new window)."""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import secrets
import time
from typing import Any

from aiohttp import web

from cardgen.prompts import PROBE_HEADER
from cardgen.sim import tokenizer
from cardgen.sim.answers import describe, models_answer, version_answer
from cardgen.sim.config import SimConfig
from cardgen.sim.engine import Engine
from cardgen.sim.live import Live
from cardgen.sim.perf import PerfModel
from cardgen.sim.reasoning import thinking
from cardgen.sim.scheduler import Seq, block_hashes
from cardgen.sim.sse import SSE_HEADERS
from cardgen.sim.validate import ApiError, GenParams, check_model, error_body, parse_generation, read_json

_REQUEST_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def _client_request_id(request: web.Request) -> str | None:
    """The client's ``X-Request-Id``, which names the response as vLLM does (``cmpl-<id>``): a benchmark client
    that sends one (``vllm bench serve``) can then be matched to the stamp log. Only plain ids are taken."""
    rid = request.headers.get("X-Request-Id", "")
    return rid if 0 < len(rid) <= 128 and set(rid) <= _REQUEST_ID_CHARS else None



class SimServer(Engine):
    """The virtual server: the engine loop (:class:`~cardgen.sim.engine.Engine`) and the HTTP app around it."""

    def __init__(self, config: SimConfig, perf: PerfModel | None = None) -> None:
        super().__init__(config, perf)
        self.started_at = time.time()
        self.url: str | None = None
        self._index = 0
        self._adapters = config.served.lora.adapters if config.served.lora is not None else ()
        self._names = (config.model_name, config.model, *self._adapters)

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
        app.on_startup.append(self.start)
        app.on_shutdown.append(self.stop)
        return app

    def describe(self) -> dict[str, Any]:
        """What this server models (``GET /cardgen/sim``)."""
        return describe(self.config, self.perf, self.scheduler, max_model_len=self.max_model_len, faults=self.faults,
                        started_at=self.started_at, url=self.url, pid=os.getpid())

    # --- small endpoints -------------------------------------------------------------------------------------
    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response(version_answer())

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response(models_answer(self.config, max_model_len=self.max_model_len,
                                               started_at=self.started_at))

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
            body = await read_json(request)
            check_model(body, self._names)
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
            body = await read_json(request)
            check_model(body, self._names)
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

    def parse(self, body: dict[str, Any], *, chat: bool) -> GenParams:
        """Validate a generation request as vLLM would (the subset the simulator models)."""
        return parse_generation(body, chat=chat, names=self._names, max_model_len=self.max_model_len,
                                vision=getattr(self.scheduler.perf, "vision", None))

    def _block_hashes(self, body: dict[str, Any], params: GenParams) -> tuple[int, ...]:
        """The chain hashes of the prompt's full KV blocks, for the scheduler's prefix cache (none when it is
        off or the prompt is shorter than a block)."""
        sched = self.scheduler
        if not sched.prefix_caching or params.prompt_tokens < sched.block_size:
            return ()
        units = tokenizer.chat_ids(body["messages"]) if params.chat else tokenizer.prompt_units(body["prompt"])
        # a request's image tokens stand first, each keyed by its image's bytes: a prompt's blocks match another's
        # only where their images are the same
        images = [key for key, tokens in params.images for _ in range(tokens)]
        return block_hashes([*images, *units], sched.block_size)

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
            body = await read_json(request)
            params = self.parse(body, chat=chat)
        except ApiError as exc:
            return exc.response()
        probe = PROBE_HEADER in request.headers  # cardgen's own question before a load: not counted, never faulted
        if not probe:
            self._index += 1
        index = self._index
        fault = self.faults.fault_for(index) if self.faults and not probe else None
        loop = self._loop
        adapter = body.get("model") if body.get("model") in self._adapters else None
        share = self.config.served.reasoning_share
        live = Live(
            index=index,
            id=f"{'chatcmpl' if chat else 'cmpl'}-{_client_request_id(request) or secrets.token_hex(16)}",
            params=params,
            created=int(time.time()),
            model=adapter or self.config.model_name,
            fault=fault,
            fault_at=self.faults.fault_token(params.max_tokens) if fault else 0,
            done=loop.create_future(),
            thinking=thinking(share, params.max_tokens, chat=chat),
            reasoning_usage=chat and share > 0,
            probe=probe,
        )
        if fault is not None:
            self.metrics.count_fault(fault)
        if fault == "http500":
            self.stamp(live, None)
            return web.json_response(
                error_body(500, "injected fault (http500)", "InternalServerError"), status=500
            )
        seq = Seq(
            params.prompt_tokens, params.max_tokens, stop_at=self._stop_at(params, index, fault), ctx=live,
            block_hashes=self._block_hashes(body, params), adapter=adapter, encode_flops=params.encode_flops,
        )
        live.seq = seq
        response: web.StreamResponse | None = None
        with self.tracked(live):
            host = self.config.served.host_delay_s(params.prompt_tokens)
            if host:  # time in the server before the request joins the queue, outside compute: no headers yet
                seq.received_s = self._loop.time()
                await asyncio.sleep(host)
            if fault == "slow_first":
                await asyncio.sleep(self.faults.slow_first_s)
            if params.stream:
                response = web.StreamResponse(headers=SSE_HEADERS)
                await response.prepare(request)
                assert request.transport is not None
                live.prepare_stream(request.transport)
            else:
                live.transport = request.transport
            outcome = await self.submit(live)
        if response is not None:
            if outcome in ("ok", "error_event"):
                await response.write_eof()
            return response
        return self._final_response(live, outcome)

    def _final_response(self, live: Live, outcome: str) -> web.StreamResponse:
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
        text, reasoning = live.texts(1, n)
        if live.params.chat:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if live.reasoning_usage:
                message["reasoning"] = reasoning or None
            choice: dict[str, Any] = {
                "index": 0,
                "message": message,
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
                "usage": live.usage(n),
            }
        )
        if live.malformed:
            body = body[: len(body) // 2]
        return web.Response(text=body, content_type="application/json")
