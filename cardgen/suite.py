"""Benchmark suites: YAML files that declare scenarios; built-in ones ship in ``cardgen/suites/``.

A suite is a list of scenario entries. Each entry expands into *points* (one point = one run of the load
engine with fixed parameters, e.g. the closed loop at 10 parallel users), executed in order.

Input models forbid unknown keys, so a typo in a suite file is an error that names the key.
"""

from __future__ import annotations

import math
import re
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)

from cardgen.errors import UsageError
from cardgen.kinds import (
    KINDS,
    BatchParams,
    ChatParams,
    ClosedParams,
    IngestParams,
    OpenParams,
    PrefixParams,
    SloParams,
    WavesParams,
)
from cardgen.slo import parse_targets

BUILTIN_SUITES = ("quick", "standard", "full", "sharegpt")
SEARCH_REQUESTS = 200_000  # an SLO search's requests in all, by default (a p99 near the limit needs tens of thousands)
SHAREGPT = "sharegpt"  # the dataset vLLM's serving benchmarks sample (cardgen.datasets reads it)
# the sample traces cardgen makes and ships (cardgen.traces), by the name a suite gives them, and their files
TRACE_SAMPLES = {"mooncake-sample": "mooncake_sample.jsonl", "azure-sample": "azure_sample.csv",
                 "burstgpt-sample": "burstgpt_sample.csv"}

Endpoint = Literal["completions", "chat"]


def check_source(source: str) -> str:
    """``source`` if it names a dataset cardgen reads (``sharegpt``, a .json or .jsonl file, a trace: a .csv
    file or a shipped sample); else a one-line UsageError. Whether the file or the extra is there, and which
    format it holds, is checked when it is read."""
    if source == SHAREGPT or source in TRACE_SAMPLES:
        return source
    if Path(source).suffix.lower() not in (".json", ".jsonl", ".csv"):
        raise UsageError(f"dataset '{source}': use 'sharegpt', a ShareGPT-format .json file, a .jsonl file of "
                         "{prompt, output_tokens}, or a trace (Mooncake .jsonl, Azure or BurstGPT .csv, "
                         f"{', '.join(TRACE_SAMPLES)})")
    return source


def lengths_or_dataset(prompt_tokens: int | None, output_tokens: int | None, dataset: str | None) -> None:
    """An entry's requests: fixed lengths or a dataset, not both; a ValueError that says which to give."""
    if dataset is not None:
        if prompt_tokens is not None or output_tokens is not None:
            raise ValueError("give either 'dataset' or 'prompt_tokens' and 'output_tokens', not both")
        try:
            check_source(dataset)
        except UsageError as exc:
            raise ValueError(exc.message) from None
    elif prompt_tokens is None or output_tokens is None:
        raise ValueError("give 'prompt_tokens' and 'output_tokens', or a 'dataset'")


def slug(source: str) -> str:
    """The dataset's short name in point names: ``sharegpt``, or the file's stem."""
    if source == SHAREGPT:
        return SHAREGPT
    return re.sub(r"[^a-z0-9]+", "-", Path(source).stem.lower()).strip("-") or "dataset"


def _rate_label(rate: float) -> str:
    return "inf" if math.isinf(rate) else f"{rate:g}"


# a point's own fields (cardgen.points.Point's: its header and ``params``, the kind's), as an entry expands into them
PointFields = dict[str, Any]


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    endpoint: Endpoint | None = None  # overrides the suite's endpoint
    timeout_s: float | None = Field(default=None, gt=0)
    # LoRA adapters the entry's requests ask for (each a model name the server serves); ``adapter_counts``: one
    # point per count, its requests picking among the first N adapters (0: the base model); ``adapter_pick``: in
    # turn, at random, or one adapter per user
    adapters: list[str] | None = Field(default=None, min_length=1)
    adapter_counts: list[int] | None = Field(default=None, min_length=1)
    adapter_pick: Literal["round-robin", "random", "per-user"] = "round-robin"

    def point_fields(self) -> list[PointFields]:
        """The entry's points in order, each as its own fields: its name, header and its kind's ``params``
        (:func:`cardgen.points.expand` adds the group, the suite's endpoint and timeout, the adapters)."""
        raise NotImplementedError

    @model_validator(mode="after")
    def _adapter_counts(self) -> _Entry:
        if self.adapters is not None and (len(set(self.adapters)) < len(self.adapters) or not all(self.adapters)):
            raise ValueError("'adapters' must name each adapter once")
        if self.adapter_counts is not None:
            if self.adapters is None:
                raise ValueError("'adapter_counts' needs 'adapters'")
            if any(not 0 <= k <= len(self.adapters) for k in self.adapter_counts):
                raise ValueError(f"'adapter_counts' must be 0 to {len(self.adapters)} (the adapters named)")
        return self


class ClosedLoop(_Entry):
    """N parallel users; each sends its next request when the last ends, until both ``min_requests`` and
    ``min_duration_s`` are reached. One point per (prompt, output, parallel) combination."""

    kind: Literal["closed"]
    prompt_tokens: list[int]
    output_tokens: list[int]
    parallel: list[int]
    min_requests: int = Field(default=20, ge=1)
    min_rounds: int = Field(default=1, ge=1)  # at least this many requests per user: min_requests >= parallel * this
    min_duration_s: float = Field(default=0.0, ge=0)
    max_duration_s: float | None = Field(default=None, gt=0)  # hard stop; requests in flight still finish
    # precision target: stop once the 95 % intervals of the median speed from start and the median TTFT are
    # each within +-target_ci of the median (after min_requests; see cardgen.precision); None runs to the minimum
    target_ci: float | None = Field(default=None, gt=0, lt=1)
    max_requests: int | None = Field(default=None, ge=1)  # hard cap on requests, whatever the precision
    # once a parallel count saturates the server, the larger counts of the same prompt/output pair are not run
    stop_at_saturation: bool = True

    _as_list = field_validator("prompt_tokens", "output_tokens", "parallel", mode="before")(
        lambda v: v if isinstance(v, list) else [v]
    )

    def point_fields(self) -> list[PointFields]:
        return [dict(name=f"closed-in{p}-out{o}-p{par}", prompt_tokens=p, output_tokens=o, parallel=par,
                     params=ClosedParams(min_requests=max(self.min_requests, par * self.min_rounds),
                                         min_duration_s=self.min_duration_s, max_duration_s=self.max_duration_s,
                                         max_requests=self.max_requests, target_ci=self.target_ci,
                                         stop_at_saturation=self.stop_at_saturation))
                for p in self.prompt_tokens for o in self.output_tokens for par in self.parallel]


class OpenLoop(_Entry):
    """Poisson arrivals at ``rates`` requests/s, independent of completions; ``inf`` sends all at once.

    Requests have ``prompt_tokens`` / ``output_tokens``, or are ``num_requests`` drawn from a ``dataset``
    (``sharegpt``, a ShareGPT-format .json file or a .jsonl of ``{prompt, output_tokens}``: ``cardgen.datasets``)
    with ``seed``; every rate then sends the same requests, in the same order.

    A trace as the ``dataset`` (``cardgen.traces``) given without ``rates`` is replayed: its requests leave at the
    trace's own offsets divided by ``speedup``, the first ``max_requests`` of them (all by default)."""

    kind: Literal["open"]
    prompt_tokens: int | None = Field(default=None, ge=1)
    output_tokens: int | None = Field(default=None, ge=1)
    dataset: str | None = None
    rates: list[float] | None = None
    num_requests: int = Field(default=100, ge=1)
    seed: int = 0
    speedup: float = Field(default=1.0, gt=0)  # a replayed trace: its offsets are divided by this
    max_requests: int | None = Field(default=None, ge=1)  # a replayed trace: its first requests only

    @model_validator(mode="after")
    def _lengths_or_dataset(self) -> OpenLoop:
        lengths_or_dataset(self.prompt_tokens, self.output_tokens, self.dataset)
        if self.rates is None and self.dataset is None:
            raise ValueError("give 'rates', or a trace as the 'dataset' to replay it at its own times")
        if self.rates is not None and (self.speedup != 1.0 or self.max_requests is not None):
            raise ValueError("'speedup' and 'max_requests' are for a trace replayed at its own times: drop 'rates'")
        return self

    @property
    def replay(self) -> bool:
        """A trace replayed at its own offsets (no rates): whether the dataset is a trace is checked when it is
        read (``cardgen.datasets.resolve``)."""
        return self.rates is None

    @field_validator("rates", mode="before")
    @classmethod
    def _rates(cls, v: object) -> object:
        if v is None:
            return None
        items = v if isinstance(v, list) else [v]
        return [math.inf if str(x).strip().lower() in ("inf", "infinity") else x for x in items]

    @field_serializer("rates")
    def _rates_out(self, rates: list[float] | None) -> list[float | str] | None:
        return None if rates is None else ["inf" if math.isinf(r) else r for r in rates]

    def point_fields(self) -> list[PointFields]:
        """One point per rate (a dataset's sample, or sized prompts), or one replaying the trace."""
        if self.replay:
            return [dict(name=f"{self.name or 'replay'}-{slug(self.dataset or '')}-x{self.speedup:g}",
                         dataset=self.dataset,
                         params=OpenParams(num_requests=self.max_requests or 0, replay=True, speedup=self.speedup))]
        params = OpenParams(num_requests=self.num_requests, seed=self.seed)
        if self.dataset is not None:
            return [dict(name=f"open-{slug(self.dataset)}-r{_rate_label(rate)}", dataset=self.dataset, rate_rps=rate,
                         params=params) for rate in self.rates or ()]
        return [dict(name=f"open-in{self.prompt_tokens}-out{self.output_tokens}-r{_rate_label(rate)}",
                     prompt_tokens=self.prompt_tokens, output_tokens=self.output_tokens, rate_rps=rate, params=params)
                for rate in self.rates or ()]


class Waves(_Entry):
    """1 request, then 2 at once, then 3 ... up to ``max_wave`` (or until the server queues or preempts when
    ``stop_at_saturation``): profiles the KV cache."""

    kind: Literal["waves"]
    prompt_tokens: int
    output_tokens: int
    max_wave: int = Field(default=32, ge=1)
    step: int = Field(default=1, ge=1)
    stop_at_saturation: bool = True
    # bisect: double the wave until one saturates, then bisect to one request (see points.WaveSearch);
    # step: 1, 1 + step, 1 + 2 step ... up to max_wave
    search: Literal["bisect", "step"] = "bisect"
    resolution: int = Field(default=1, ge=1)  # bisect: how many requests apart the bracket may end

    def point_fields(self) -> list[PointFields]:
        return [dict(name=f"waves-in{self.prompt_tokens}-out{self.output_tokens}",
                     prompt_tokens=self.prompt_tokens, output_tokens=self.output_tokens,
                     params=WavesParams(max_wave=self.max_wave, step=self.step,
                                        stop_at_saturation=self.stop_at_saturation, search=self.search,
                                        resolution=self.resolution))]


class Ingest(_Entry):
    """Single requests, one at a time, with growing prompt lengths and ``output_tokens`` (default 1)."""

    kind: Literal["ingest"]
    prompt_tokens: list[int] | None = None
    min_prompt_tokens: int = Field(default=16, ge=1)
    max_prompt_tokens: int = Field(default=4000, ge=1)
    points: int = Field(default=20, ge=2)
    output_tokens: int = Field(default=1, ge=1)
    repeats: int = Field(default=1, ge=1)
    # precision target for the slope (seconds per prompt token): after each full sweep, stop once its 95 %
    # interval is within +-target_ci; repeats is then the most sweeps run
    target_ci: float | None = Field(default=None, gt=0, lt=1)

    def lengths(self) -> list[int]:
        """The prompt lengths, in the order they are sent."""
        if self.prompt_tokens:
            return list(self.prompt_tokens)
        lo, hi, n = self.min_prompt_tokens, self.max_prompt_tokens, self.points
        return sorted({round(lo + (hi - lo) * i / (n - 1)) for i in range(n)})

    def point_fields(self) -> list[PointFields]:
        return [dict(name="ingest", output_tokens=self.output_tokens,
                     params=IngestParams(lengths=tuple(self.lengths()), repeats=self.repeats,
                                         target_ci=self.target_ci))]


class BatchSweep(_Entry):
    """B simultaneous requests of fixed lengths, ``warmups`` unrecorded-in-figures runs, then ``runs`` repeats
    (TGI's batch table)."""

    kind: Literal["batch"]
    prompt_tokens: int
    output_tokens: int
    batch_sizes: list[int]
    warmups: int = Field(default=1, ge=0)
    runs: int = Field(default=3, ge=1)
    # precision target for each batch size's mean: after ``runs``, keep running rounds until the 95 % interval
    # of the mean decode speed is within +-target_ci, at most max_runs
    target_ci: float | None = Field(default=None, gt=0, lt=1)
    max_runs: int | None = Field(default=None, ge=1)

    def point_fields(self) -> list[PointFields]:
        params = BatchParams(warmups=self.warmups, runs=self.runs, max_runs=self.max_runs, target_ci=self.target_ci)
        return [dict(name=f"batch-in{self.prompt_tokens}-out{self.output_tokens}-b{b}",
                     prompt_tokens=self.prompt_tokens, output_tokens=self.output_tokens, parallel=b, params=params)
                for b in self.batch_sizes]


class SharedPrefix(_Entry):
    """``prefixes`` distinct prefixes of ``prefix_tokens`` tokens; every request is one prefix and a unique
    suffix of ``suffix_tokens`` tokens, sent one at a time: first a cold pass (each prefix once, never seen by
    the server: the run's nonce is in it), then ``warm_rounds`` warm passes over the same prefixes (cached,
    unless the server evicted them). Measures the prefix cache (the card's "Prefix cache" section)."""

    kind: Literal["prefix"]
    prefixes: int = Field(default=16, ge=1)
    prefix_tokens: int = Field(default=1024, ge=1)
    suffix_tokens: int = Field(default=64, ge=1)
    output_tokens: int = Field(default=16, ge=1)
    warm_rounds: int = Field(default=2, ge=1)

    def point_fields(self) -> list[PointFields]:
        return [dict(name=f"prefix-n{self.prefixes}-in{self.prefix_tokens}+{self.suffix_tokens}-out{self.output_tokens}",
                     prompt_tokens=self.prefix_tokens + self.suffix_tokens, output_tokens=self.output_tokens,
                     params=PrefixParams(prefixes=self.prefixes, prefix_tokens=self.prefix_tokens,
                                         suffix_tokens=self.suffix_tokens, warm_rounds=self.warm_rounds))]


class Chat(_Entry):
    """Multi-turn chat on ``/v1/chat/completions``: ``users`` users at once, together holding ``conversations``
    conversations (default one each) of ``turns`` turns. A turn sends the whole history (every earlier message
    and the model's own replies) and a new message, then the user thinks ``think_time_s`` before the next. The
    first message has ``first_tokens`` tokens, every later one ``message_tokens`` (each counted as a
    one-message conversation); every message starts with its request id. With ``compare_no_cache`` the same
    conversations run again with the history made new every turn (no prefix to reuse)."""

    kind: Literal["chat"]
    users: int = Field(default=4, ge=1)
    conversations: int | None = Field(default=None, ge=1)
    turns: int = Field(default=4, ge=1)
    first_tokens: int = Field(default=256, ge=1)
    message_tokens: int = Field(default=64, ge=1)
    output_tokens: int = Field(default=64, ge=1)
    think_time_s: float = Field(default=1.0, ge=0)
    # also run the same conversations with the cache defeated (the history starts with a new id every turn),
    # so the card can say what the prefix cache saves per turn, measured
    compare_no_cache: bool = True

    def point_fields(self) -> list[PointFields]:
        """The conversations, then (``compare_no_cache``) the same with a new history every turn; always on the
        chat endpoint."""
        conversations = self.conversations or self.users
        base = f"chat-u{self.users}-t{self.turns}-in{self.first_tokens}+{self.message_tokens}-out{self.output_tokens}"
        return [dict(name=base + ("-nocache" if fresh else ""), endpoint="chat", prompt_tokens=self.first_tokens,
                     output_tokens=self.output_tokens, parallel=min(self.users, conversations),
                     params=ChatParams(conversations=conversations, turns=self.turns,
                                       message_tokens=self.message_tokens, think_time_s=self.think_time_s,
                                       fresh_history=fresh))
                for fresh in ((False, True) if self.compare_no_cache else (False,))]


class SloSearch(_Entry):
    """The highest load whose percentiles meet ``slo`` with 95 % confidence (:mod:`cardgen.slo`): open-loop
    rates (``load: rate``, Poisson arrivals, requests/s) or closed-loop concurrencies (``load: parallel``),
    grown from ``start`` by doubling until a probe misses, then bisected until the bracket is within
    ``resolution`` (relative) of its lower end, the loads near the limit given what is left of ``max_requests``
    (for the whole search: :mod:`cardgen.scenarios.loadsearch`). A probe stops on its verdict (at least
    ``min_requests``), or once its share of the requests could not decide it. Requests have ``prompt_tokens`` /
    ``output_tokens``, or are drawn from a ``dataset`` as an open loop's (``num_requests``, ``seed``; the
    sample is sent over and over)."""

    kind: Literal["slo"]
    load: Literal["rate", "parallel"]
    slo: dict[str, float]
    prompt_tokens: int | None = Field(default=None, ge=1)
    output_tokens: int | None = Field(default=None, ge=1)
    dataset: str | None = None
    num_requests: int = Field(default=100, ge=1)
    resolution: float = Field(default=0.05, gt=0, lt=1)
    start: float | None = Field(default=None, gt=0)  # the first probe (default 1 request/s, or 1 parallel)
    min_load: float | None = Field(default=None, gt=0)  # the search goes no lower (default start / 64, or 1)
    max_load: float | None = Field(default=None, gt=0)  # ... and no higher (default 1024)
    min_requests: int = Field(default=20, ge=1)  # per probe, before a verdict
    max_requests: int = Field(default=SEARCH_REQUESTS, ge=1)  # for the whole search
    seed: int = 0

    @model_validator(mode="after")
    def _check(self) -> SloSearch:
        parse_targets(self.slo)
        lengths_or_dataset(self.prompt_tokens, self.output_tokens, self.dataset)
        start, low, high = self.start_load, self.lowest, self.highest
        if not low <= start <= high:
            raise ValueError(f"the search's loads must be ordered: min_load {low:g} <= start {start:g} <= "
                             f"max_load {high:g}")
        if self.load == "parallel" and any(v != int(v) for v in (start, low, high)):
            raise ValueError("load: parallel takes whole numbers of parallel requests for start, min_load and max_load")
        if self.min_requests > self.max_requests:
            raise ValueError("min_requests must not exceed max_requests")
        return self

    def point_fields(self) -> list[PointFields]:
        """The search's one point: its probes are its program's (``cardgen.scenarios.slosearch``)."""
        what = f"in{self.prompt_tokens}-out{self.output_tokens}" if self.dataset is None else slug(self.dataset)
        return [dict(name=f"slo-{self.load}-{what}", prompt_tokens=self.prompt_tokens or 0,
                     output_tokens=self.output_tokens or 1, dataset=self.dataset,
                     params=SloParams(num_requests=self.num_requests if self.dataset is not None else 0,
                                      seed=self.seed, min_requests=self.min_requests, max_requests=self.max_requests,
                                      load=self.load, slo=tuple(t.as_tuple() for t in parse_targets(self.slo)),
                                      resolution=self.resolution, start_load=self.start_load, min_load=self.lowest,
                                      max_load=self.highest))]

    @property
    def start_load(self) -> float:
        return self.start if self.start is not None else 1.0

    @property
    def lowest(self) -> float:
        if self.min_load is not None:
            return self.min_load
        return 1.0 if self.load == "parallel" else self.start_load / 64

    @property
    def highest(self) -> float:
        return self.max_load if self.max_load is not None else max(1024.0, self.start_load)


Scenario = Annotated[ClosedLoop | OpenLoop | Waves | Ingest | BatchSweep | SharedPrefix | Chat | SloSearch,
                     Field(discriminator="kind")]


class Suite(BaseModel):
    """A named list of scenarios."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    endpoint: Endpoint = "completions"
    timeout_s: float = Field(default=300.0, gt=0)
    scenarios: list[Scenario] = Field(min_length=1)


def _format_validation_error(err: ValidationError, source: str) -> str:
    first = err.errors()[0]
    where = ".".join(str(p) for p in first["loc"] if not (isinstance(p, str) and p in KINDS))
    if first["type"] == "extra_forbidden":
        return f"{source}: unknown key '{where}'; remove it or fix its spelling"
    return f"{source}: {where or 'suite'}: {first['msg']}"


def parse_suite(text: str, *, source: str = "suite") -> Suite:
    """Parse YAML text into a :class:`Suite`; any problem is a one-line :class:`UsageError`."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark else ""
        raise UsageError(f"{source} is not valid YAML{at}: fix its syntax") from None
    if not isinstance(data, dict):
        raise UsageError(f"{source} must be a YAML mapping with 'name' and 'scenarios'")
    try:
        return Suite.model_validate(data)
    except ValidationError as err:
        raise UsageError(_format_validation_error(err, source)) from None


def load_suite(name_or_path: str) -> Suite:
    """A built-in suite by name (``quick``, ``standard``, ``full``) or a YAML file by path."""
    if name_or_path in BUILTIN_SUITES:
        text = resources.files("cardgen.suites").joinpath(f"{name_or_path}.yaml").read_text("utf-8")
        return parse_suite(text, source=f"built-in suite '{name_or_path}'")
    path = Path(name_or_path)
    if path.suffix.lower() not in (".yaml", ".yml") and not path.exists():
        raise UsageError(f"unknown suite '{name_or_path}': use one of {', '.join(BUILTIN_SUITES)} or a .yaml file")
    if not path.is_file():
        raise UsageError(f"suite file '{name_or_path}' does not exist")
    return parse_suite(path.read_text("utf-8"), source=str(path))
