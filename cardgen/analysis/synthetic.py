"""Synthetic runs with known truth: a test double for the analysis, the figures and the card.

A tiny continuous-batching server is simulated in virtual time (no sockets, no sleeping): paged KV blocks,
admission while blocks last, preemption with recompute when they run out, ``max_num_seqs``, a prefill budget
per step. A step takes ``step_overhead_s + per_seq_s x decoding sequences + prompt tokens / prefill_tok_s``,
times a little seeded noise. Clients follow a :class:`cardgen.suite.Suite` (closed, open, waves, ingest, batch)
and are recorded exactly as the load engine records them (``RequestRecord``, ``MetricSample`` every 0.5 s with the
engine's metric names, vLLM's latency histograms included, ``run.json``). So an analysis of a synthetic run can be
checked against the truth: the prefill rate, the KV capacity and the server-side emission times
(:class:`SyntheticTruth`).

Not a model of any real GPU (that is ``cardgen.sim``): only a source of realistic, fully known records.
"""

from __future__ import annotations

import datetime as _dt
import heapq
import itertools
import json
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cardgen import __version__
from cardgen.analysis.rundata import RunData
from cardgen.records import ErrorKind, MetricSample, RequestRecord
from cardgen.rundir import GPU_METRICS_JSONL, REQUESTS_JSONL, SERVER_METRICS_JSONL
from cardgen.runinfo import RunInfo, ServerInfo, save_run_info
from cardgen.sim.metrics import ITL_BUCKETS, REQUEST_BUCKETS, TTFT_BUCKETS
from cardgen.suite import BatchSweep, ClosedLoop, Ingest, OpenLoop, Suite, Waves, parse_suite

ENGINES = ("vllm", "vllm-old", "tgi", "llamacpp", "none")
T0 = 1_790_000_000.0  # 2026-09-21T14:13:20Z: fixed, so synthetic runs are byte-for-byte reproducible

SMALL_SUITE = """
name: synthetic-small
description: a small suite covering every scenario kind, for fixtures and tests
scenarios:
  - kind: ingest
    prompt_tokens: [16, 256, 512, 768, 1024, 1536, 2048, 3072, 4000]
    repeats: 2
  - kind: closed
    prompt_tokens: [1024]
    output_tokens: [128]
    parallel: [1, 4, 10]
    min_requests: 20
  - kind: closed
    prompt_tokens: [128]
    output_tokens: [32]
    parallel: [1, 4, 10]
    min_requests: 12
  - kind: waves
    prompt_tokens: 1024
    output_tokens: 128
    max_wave: 12
  - kind: open
    prompt_tokens: 256
    output_tokens: 32
    rates: [2, 8, inf]
    num_requests: 16
  - kind: batch
    prompt_tokens: 128
    output_tokens: 16
    batch_sizes: [1, 2, 4, 8]
    warmups: 1
    runs: 3
"""


@dataclass(frozen=True, kw_only=True)
class SyntheticServer:
    """The simulated server's constants (the truth an analysis should recover)."""

    prefill_tok_s: float = 8000.0
    step_overhead_s: float = 0.008
    per_seq_s: float = 0.0004
    kv_capacity_tokens: int = 12288
    block_size: int = 16
    max_num_seqs: int = 64
    max_batched_tokens: int = 8192
    network_s: float = 0.001
    jitter: float = 0.02  # relative standard deviation of a step's duration
    fail_every: int = 0  # every n-th request fails with HTTP 500 (0: none)
    engine: str = "vllm"  # which metric names to publish: see ENGINES
    expose_cache_config: bool = True
    expose_usage: bool = True
    expose_histograms: bool = True  # vLLM's TTFT, ITL, E2E and queue-time histograms (vllm engines only)
    scrape_interval_s: float = 0.5

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}")
        if self.kv_capacity_tokens % self.block_size:
            raise ValueError("kv_capacity_tokens must be a multiple of block_size")

    @property
    def num_blocks(self) -> int:
        return self.kv_capacity_tokens // self.block_size


@dataclass
class _Seq:
    n: int
    params: dict[str, Any]  # RequestRecord fields fixed at creation
    prompt: int
    output: int
    arrive: float  # server time the request arrives
    sent: float
    scheduled: float | None = None
    generated: int = 0
    blocks: int = 0
    prefilled: bool = False
    emits: list[float] = field(default_factory=list)
    queued_for_kv: bool = False
    preempted: int = 0
    failed: bool = False
    admitted: float | None = None  # server time it was first scheduled (end of its queue time)


@dataclass(frozen=True)
class ServerStamp:
    """When the server received a request and emitted each of its tokens (the test server's own stamps)."""

    scenario: str
    arrive: float
    emits: tuple[float, ...]

    @property
    def speed_from_start_tok_s(self) -> float:
        return len(self.emits) / (self.emits[-1] - self.arrive)

    @property
    def decode_tok_s(self) -> float:
        return (len(self.emits) - 1) / (self.emits[-1] - self.emits[0]) if len(self.emits) > 1 else math.nan


@dataclass(frozen=True)
class SyntheticTruth:
    server: SyntheticServer
    stamps: tuple[ServerStamp, ...]
    preemptions: int

    def median(self, scenario: str, metric: str) -> float:
        """Median over the scenario's successful requests of a :class:`ServerStamp` property."""
        values = [getattr(s, metric) for s in self.stamps if s.scenario == scenario]
        return float(np.median(values))


class _Simulator:
    def __init__(self, server: SyntheticServer, seed: int) -> None:
        self.s = server
        self.rng = np.random.default_rng(seed)
        self.t = T0
        self.free = server.num_blocks
        self.waiting: deque[_Seq] = deque()
        self.running: list[_Seq] = []
        self.pending: list[tuple[float, int, _Seq]] = []
        self.snapshots: list[tuple[float, int, int, int, int, int, int]] = []
        self.preemptions = 0
        self.prompt_total = 0
        self.gen_total = 0
        self.done: list[_Seq] = []
        self.counter = itertools.count()
        self.observations: list[tuple[float, str, float]] = []  # (server time, histogram role, value)

    def _blocks(self, tokens: int) -> int:
        return -(-tokens // self.s.block_size)

    def _snapshot(self) -> None:
        self.snapshots.append((self.t, self.s.num_blocks - self.free, len(self.running), len(self.waiting),
                               self.preemptions, self.prompt_total, self.gen_total))

    def submit(self, seq: _Seq) -> None:
        heapq.heappush(self.pending, (seq.arrive, seq.n, seq))

    def _preempt(self, victim: _Seq) -> None:
        self.running.remove(victim)
        self.free += victim.blocks
        victim.blocks = 0
        victim.prefilled = False
        victim.preempted += 1
        self.preemptions += 1
        self.waiting.appendleft(victim)

    def _step(self) -> list[_Seq]:
        s = self.s
        decode = [q for q in self.running if q.prefilled]
        for q in list(decode):  # grow: room for the token this step produces
            if q not in self.running:
                continue
            need = self._blocks(q.prompt + q.generated + 1) - q.blocks
            while need > self.free and q in self.running:
                self._preempt(self.running[-1])
            if q in self.running:
                self.free -= need
                q.blocks += need
        decode = [q for q in self.running if q.prefilled]
        prefill: list[_Seq] = []
        budget = s.max_batched_tokens - len(decode)
        while self.waiting and len(self.running) < s.max_num_seqs:
            q = self.waiting[0]
            tokens = q.prompt + q.generated
            need = self._blocks(tokens + 1)
            if need > self.free:
                q.queued_for_kv = True
                break
            if tokens > budget and prefill:
                break
            self.waiting.popleft()
            if q.admitted is None:
                q.admitted = self.t
            self.free -= need
            q.blocks = need
            budget -= tokens
            self.running.append(q)
            prefill.append(q)
        if not prefill and not decode:
            raise ValueError("a request needs more KV blocks than the synthetic server has")
        prompt_tokens = sum(q.prompt + q.generated for q in prefill)
        dt = s.step_overhead_s + s.per_seq_s * len(decode) + prompt_tokens / s.prefill_tok_s
        self.t += dt * max(0.5, 1 + s.jitter * float(self.rng.standard_normal()))
        finished = []
        for q in prefill:
            self.prompt_total += q.prompt
            q.prefilled = True
        for q in decode + prefill:
            q.generated += 1
            self.gen_total += 1
            q.emits.append(self.t)
            if len(q.emits) == 1:
                self.observations.append((self.t, "ttft", self.t - q.arrive))
            else:
                self.observations.append((self.t, "itl", q.emits[-1] - q.emits[-2]))
            if q.generated >= q.output:
                finished.append(q)
                self.observations.append((self.t, "e2e", self.t - q.arrive))
                self.observations.append((self.t, "queue", (q.admitted or q.arrive) - q.arrive))
        for q in finished:
            self.running.remove(q)
            self.free += q.blocks
            q.blocks = 0
        self._snapshot()
        return finished

    def run(self, on_done: Callable[[_Seq, float], list[_Seq]]) -> None:
        """Run until no request is pending, waiting or running."""
        while self.pending or self.waiting or self.running:
            if not self.waiting and not self.running and self.pending and self.pending[0][0] > self.t:
                self.t = self.pending[0][0]
            while self.pending and self.pending[0][0] <= self.t:
                q = heapq.heappop(self.pending)[2]
                if q.failed:
                    self.done.append(q)
                    for nxt in on_done(q, q.sent + 0.005):
                        self.submit(nxt)
                    continue
                self.waiting.append(q)
            if not self.waiting and not self.running:
                continue
            for q in self._step():
                self.done.append(q)
                for nxt in on_done(q, q.emits[-1] + self.s.network_s):
                    self.submit(nxt)


class _Clients:
    """Turns suite scenarios into arrivals, reacting to completions like the load engine."""

    def __init__(self, sim: _Simulator, server: SyntheticServer, seed: int) -> None:
        self.sim, self.server = sim, server
        self.rng = np.random.default_rng(seed + 1)
        self.numbers = itertools.count()

    def seq(self, params: dict[str, Any], sent: float, scheduled: float | None = None) -> _Seq:
        n = next(self.numbers)
        failed = bool(self.server.fail_every) and (n + 1) % self.server.fail_every == 0
        return _Seq(n=n, params=params, prompt=params["prompt_tokens_target"], output=params["output_tokens_target"],
                    arrive=sent + self.server.network_s, sent=sent, scheduled=scheduled, failed=failed)

    def run_point(self, start: float, initial: list[_Seq], on_done: Callable[[_Seq, float], list[_Seq]]) -> float:
        for q in initial:
            self.sim.submit(q)
        if self.sim.t < start:
            self.sim.t = start
        before = len(self.sim.done)
        self.sim.run(on_done)
        ends = [self._end(q) for q in self.sim.done[before:]]
        return max(ends) if ends else start

    def _end(self, q: _Seq) -> float:
        return q.sent + 0.005 if q.failed else q.emits[-1] + self.server.network_s

    def closed(self, e: ClosedLoop, start: float) -> float:
        t = start
        for prompt, output, users in itertools.product(e.prompt_tokens, e.output_tokens, e.parallel):
            params = dict(scenario=f"closed-in{prompt}-out{output}-p{users}", kind="closed", parallel=users,
                          prompt_tokens_target=prompt, output_tokens_target=output)
            sent = users
            point_start = t

            def on_done(q: _Seq, end: float, params: dict = params, point_start: float = point_start) -> list[_Seq]:
                nonlocal sent
                if sent >= e.min_requests and end - point_start >= e.min_duration_s:
                    return []
                sent += 1
                return [self.seq(params, end + 0.0005)]

            t = self.run_point(t, [self.seq(params, t + 0.0002 * i) for i in range(users)], on_done) + 1.0
        return t

    def open(self, e: OpenLoop, start: float) -> float:
        t = start
        rng = np.random.default_rng(e.seed)
        for rate in e.rates:
            label = "inf" if math.isinf(rate) else f"{rate:g}"
            params = dict(scenario=f"open-in{e.prompt_tokens}-out{e.output_tokens}-r{label}", kind="open",
                          rate_rps=rate, prompt_tokens_target=e.prompt_tokens, output_tokens_target=e.output_tokens)
            gaps = np.zeros(e.num_requests) if math.isinf(rate) else rng.exponential(1 / rate, e.num_requests)
            scheduled = t + np.cumsum(gaps)
            lags = self.rng.uniform(0.0001, 0.0015, e.num_requests)
            seqs = [self.seq(params, float(s + lag), float(s)) for s, lag in zip(scheduled, lags, strict=True)]
            t = self.run_point(t, seqs, lambda q, end: []) + 1.0
        return t

    def waves(self, e: Waves, start: float) -> float:
        t = start
        for size in range(1, e.max_wave + 1, e.step):
            params = dict(scenario=f"waves-in{e.prompt_tokens}-out{e.output_tokens}", kind="waves", wave=size,
                          parallel=size, prompt_tokens_target=e.prompt_tokens, output_tokens_target=e.output_tokens)
            pre = self.sim.preemptions
            seqs = [self.seq(params, t) for _ in range(size)]
            t = self.run_point(t, seqs, lambda q, end: []) + 0.5
            if e.stop_at_saturation and (self.sim.preemptions > pre or any(q.queued_for_kv for q in seqs)):
                break
        return t + 0.5

    def ingest(self, e: Ingest, start: float) -> float:
        queue = [(length, r) for r in range(e.repeats) for length in e.lengths()]
        make = iter(queue)

        def params(length: int, repeat: int) -> dict[str, Any]:
            return dict(scenario="ingest", kind="ingest", repeat=repeat, prompt_tokens_target=length,
                        output_tokens_target=e.output_tokens)

        def on_done(q: _Seq, end: float) -> list[_Seq]:
            nxt = next(make, None)
            return [] if nxt is None else [self.seq(params(*nxt), end + 0.05)]

        first = next(make)
        return self.run_point(start, [self.seq(params(*first), start)], on_done) + 1.0

    def batch(self, e: BatchSweep, start: float) -> float:
        t = start
        for size in e.batch_sizes:
            for run in range(e.warmups + e.runs):
                warm = run < e.warmups
                params = dict(scenario=f"batch-in{e.prompt_tokens}-out{e.output_tokens}-b{size}", kind="batch",
                              parallel=size, repeat=run - e.warmups if not warm else run, warmup=warm,
                              prompt_tokens_target=e.prompt_tokens, output_tokens_target=e.output_tokens)
                t = self.run_point(t, [self.seq(params, t) for _ in range(size)], lambda q, end: []) + 0.1
        return t + 0.9


def _r(t: float) -> float:
    return round(t, 6)


def _record(q: _Seq, server: SyntheticServer, rng: np.random.Generator) -> RequestRecord:
    base = dict(q.params, sent_at=_r(q.sent), scheduled_at=_r(q.scheduled) if q.scheduled is not None else None,
                index=q.n)
    if q.failed:
        return RequestRecord(**base, headers_at=_r(q.sent + 0.004), end_at=_r(q.sent + 0.005), status=500,
                             error="HTTP 500: Internal Server Error", error_kind=ErrorKind.HTTP_STATUS)
    arrivals = [_r(t + server.network_s + float(d)) for t, d in
                zip(q.emits, rng.uniform(0, 0.0002, len(q.emits)), strict=True)]
    arrivals = list(np.maximum.accumulate(arrivals))
    return RequestRecord(**base, headers_at=_r(q.sent + 0.002), first_token_at=arrivals[0], chunk_times=arrivals,
                         end_at=_r(arrivals[-1] + 0.0003), response_id=f"cmpl-{q.n}", status=200,
                         prompt_tokens=q.prompt, output_tokens=q.output, finish_reason="length")


def _metric(value: float, model: str, **labels: str) -> list[dict[str, Any]]:
    return [{"labels": {"model_name": model, "engine": "0", **labels}, "value": float(value)}]


class _Histograms:
    """vLLM's latency histograms over the simulator's observations: cumulative bucket counts at any time."""

    BUCKETS = {"ttft": TTFT_BUCKETS, "itl": ITL_BUCKETS, "e2e": REQUEST_BUCKETS, "queue": REQUEST_BUCKETS}

    def __init__(self, observations: list[tuple[float, str, float]]) -> None:
        self.tables: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for role, bounds in self.BUCKETS.items():
            rows = sorted((t, v) for t, r, v in observations if r == role)
            times = np.array([t for t, _ in rows], dtype=float)
            values = np.array([v for _, v in rows], dtype=float)
            edges = np.array([*bounds, np.inf])
            hits = (values[:, None] <= edges[None, :]).astype(float) if rows else np.zeros((0, len(edges)))
            self.tables[role] = (times, np.cumsum(hits, axis=0), np.cumsum(values))

    def samples(self, role: str, name: str, t: float, model: str) -> dict[str, list[dict[str, Any]]]:
        """The ``_bucket``, ``_count`` and ``_sum`` samples of histogram ``name`` as scraped at ``t``."""
        times, cumulative, sums = self.tables[role]
        i = int(np.searchsorted(times, t, side="right"))
        counts = cumulative[i - 1] if i else np.zeros(cumulative.shape[1])
        total = float(sums[i - 1]) if i else 0.0
        bounds = [*(repr(float(b)) for b in self.BUCKETS[role]), "+Inf"]
        return {
            f"{name}_bucket": [{"labels": {"model_name": model, "engine": "0", "le": le}, "value": float(c)}
                               for le, c in zip(bounds, counts, strict=True)],
            f"{name}_count": _metric(counts[-1], model),
            f"{name}_sum": _metric(round(total, 9), model),
        }


def _histogram_names(engine: str) -> dict[str, str]:
    """vLLM's names; before 0.9 the inter-token histogram was ``vllm:time_per_output_token_seconds``."""
    itl = "vllm:inter_token_latency_seconds" if engine == "vllm" else "vllm:time_per_output_token_seconds"
    return {"ttft": "vllm:time_to_first_token_seconds", "itl": itl, "e2e": "vllm:e2e_request_latency_seconds",
            "queue": "vllm:request_queue_time_seconds"}


def _scrapes(sim: _Simulator, server: SyntheticServer, model: str, end: float) -> list[MetricSample]:
    if server.engine == "none":
        return []
    histograms = _Histograms(sim.observations) if server.expose_histograms else None
    times = np.array([s[0] for s in sim.snapshots])
    out = []
    t = T0 + 0.25
    config = {"block_size": str(server.block_size), "num_gpu_blocks": str(server.num_blocks),
              "enable_prefix_caching": "False", "gpu_memory_utilization": "0.9"}
    while t <= end:
        i = int(np.searchsorted(times, t + 0.001, side="right")) - 1
        _, used, running, waiting, pre, ptot, gtot = sim.snapshots[i] if i >= 0 else (t, 0, 0, 0, 0, 0, 0)
        samples: dict[str, list[dict[str, Any]]] = {}
        usage = used / server.num_blocks
        if server.engine in ("vllm", "vllm-old"):
            usage_name = "vllm:kv_cache_usage_perc" if server.engine == "vllm" else "vllm:gpu_cache_usage_perc"
            if server.expose_usage:
                samples[usage_name] = _metric(usage, model)
            samples["vllm:num_requests_running"] = _metric(running, model)
            samples["vllm:num_requests_waiting"] = _metric(waiting, model)
            samples["vllm:num_preemptions_total"] = _metric(pre, model)
            samples["vllm:prompt_tokens_total"] = _metric(ptot, model)
            samples["vllm:generation_tokens_total"] = _metric(gtot, model)
            if server.expose_cache_config:
                labels = dict(config)
                if server.engine == "vllm":
                    labels["kv_cache_size_tokens"] = str(server.kv_capacity_tokens)
                samples["vllm:cache_config_info"] = [{"labels": labels, "value": 1.0}]
            if histograms is not None:
                for role, name in _histogram_names(server.engine).items():
                    samples.update(histograms.samples(role, name, t + 0.001, model))
        elif server.engine == "tgi":
            samples["tgi_batch_current_size"] = [{"labels": {}, "value": float(running)}]
            samples["tgi_queue_size"] = [{"labels": {}, "value": float(waiting)}]
            if server.expose_cache_config:
                samples["tgi_batch_max_total_tokens"] = [{"labels": {}, "value": float(server.kv_capacity_tokens)}]
        else:
            samples["llamacpp:requests_processing"] = [{"labels": {}, "value": float(running)}]
            samples["llamacpp:requests_deferred"] = [{"labels": {}, "value": float(waiting)}]
            samples["llamacpp:prompt_tokens_total"] = [{"labels": {}, "value": float(ptot)}]
        out.append(MetricSample(t=_r(t), t_end=_r(t + 0.002), samples=samples))
        t += server.scrape_interval_s
    return out


def _iso(t: float) -> str:
    return _dt.datetime.fromtimestamp(t, _dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def synthetic_run(*, suite: Suite | str = SMALL_SUITE, server: SyntheticServer | None = None,
                  model: str = "synthetic/Llama-tiny", seed: int = 0, modelled: bool = False,
                  ) -> tuple[RunData, SyntheticTruth]:
    """Simulate ``suite`` (a :class:`Suite` or its YAML text) against ``server``: the run's parsed data and the
    truth behind it. Same arguments, same records."""
    server = server or SyntheticServer()
    suite = parse_suite(suite, source="synthetic suite") if isinstance(suite, str) else suite
    sim = _Simulator(server, seed)
    clients = _Clients(sim, server, seed)
    t = T0 + 0.5
    for entry in suite.scenarios:
        t = getattr(clients, entry.kind)(entry, t)
    end = t
    rng = np.random.default_rng(seed + 2)
    done = sorted(sim.done, key=lambda q: (q.sent, q.n))
    records = [_record(q, server, rng) for q in done]
    metrics = _scrapes(sim, server, model, end)
    extra: dict[str, Any] = {}
    if server.engine == "llamacpp" and server.expose_cache_config:
        extra["props"] = {"total_slots": server.max_num_seqs, "model_path": model,
                          "default_generation_settings": {"n_ctx": server.kv_capacity_tokens // server.max_num_seqs}}
    engine = {"vllm-old": "vllm", "none": "openai-compatible"}.get(server.engine, server.engine)
    failed = sum(1 for r in records if not r.ok)
    info = RunInfo(
        cardgen_version=__version__, command=["cardgen", "build", model, "--url", "http://127.0.0.1:8000"],
        model=model, suite=suite.name, suite_spec=suite.model_dump(mode="json"),
        started_at=_iso(T0), ended_at=_iso(end), started_unix=T0, ended_unix=_r(end), status="complete",
        server=ServerInfo(url="http://127.0.0.1:8000", engine=engine, engine_version="synthetic",
                          served_model=model, extra=extra, tokenizer="server /tokenize",
                          launch={"args": ["--block-size", str(server.block_size),
                                           "--max-num-seqs", str(server.max_num_seqs)]}),
        modelled=modelled, gpu={"name": "Synthetic-GPU", "count": 1, "driver": "none"},
        sim={"gpu": "Synthetic-GPU", "engine_profile": "synthetic"} if modelled else None,
        workers=1, requests_total=len(records), requests_failed=failed,
        failures_by_kind={"http_status": failed} if failed else {},
    )
    stamps = tuple(ServerStamp(scenario=q.params["scenario"], arrive=q.arrive, emits=tuple(q.emits))
                   for q in done if not q.failed and not q.params.get("warmup"))
    return (RunData(info=info, requests=records, metrics=metrics),
            SyntheticTruth(server=server, stamps=stamps, preemptions=sim.preemptions))


def write_run(run_dir: Path, data: RunData) -> Path:
    """Write ``data`` as a run directory (run.json, requests.jsonl, server_metrics.jsonl, and gpu_metrics.jsonl
    when ``data`` has GPU records)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    save_run_info(run_dir, data.info)
    with (run_dir / REQUESTS_JSONL).open("w", encoding="utf-8") as fh:
        for r in data.requests:  # json, not pydantic: the rate inf stays Infinity (pydantic writes null)
            fh.write(json.dumps(r.model_dump(mode="python", exclude_defaults=True), separators=(",", ":")) + "\n")
    with (run_dir / SERVER_METRICS_JSONL).open("w", encoding="utf-8") as fh:
        for m in data.metrics:
            fh.write(m.model_dump_json(exclude_defaults=True) + "\n")
    if data.gpu_metrics:
        with (run_dir / GPU_METRICS_JSONL).open("w", encoding="utf-8") as fh:
            for record in data.gpu_metrics:
                fh.write(json.dumps(record) + "\n")
    return run_dir
