"""Points: the one home of a suite's expansion into runs and of each scenario's rules.

A point is one run of fixed parameters (e.g. the closed loop at 10 parallel users). :func:`expand` turns a
suite into points and names them; the methods of :class:`Point` say how each kind of scenario sends its
requests (when a closed loop stops, when open-loop requests arrive, how waves grow, in which order ingestion
prompts go). The load agent (real time) and the virtual-time driver (``cardgen.sim.drive``) both obey these
rules, so what the virtual server predicts is what the load engine does.

A point is plain data (a dict-able dataclass) so it can travel to Locust workers.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field
from typing import Any

from cardgen.suite import BatchSweep, Chat, ClosedLoop, Ingest, OpenLoop, SharedPrefix, Suite, Waves

#: scenario kinds whose timing is a barrier (all of a wave, a batch, one prompt at a time): never split
#: across load-generating processes, because spreading them would blur their timing
BARRIER_KINDS = ("waves", "ingest", "batch", "prefix", "chat")
#: shared prefix: the pause before the cold pass and between it and the warm ones, longer than a scrape
#: interval, so that a scrape of the server's prefix-cache counters falls before each phase and each phase has
#: its own hit rate
PHASE_PAUSE_S = 1.0


def share(total: int, index: int, parts: int) -> int:
    """Worker ``index``'s share of ``total`` items split as evenly as possible over ``parts`` workers."""
    return total // parts + (1 if index < total % parts else 0)


@dataclass
class Point:
    name: str
    kind: str  # closed | open | waves | ingest | batch
    group: str
    endpoint: str
    timeout_s: float
    prompt_tokens: int = 0  # for ingest: see `lengths`
    output_tokens: int = 1
    parallel: int | None = None
    rate_rps: float | None = None
    # closed
    min_requests: int = 0
    min_duration_s: float = 0.0
    max_duration_s: float | None = None
    max_requests: int | None = None
    target_ci: float | None = None  # closed, ingest, batch: stop once the figure is this precise
    stop_at_saturation: bool = True  # closed: skip larger counts of the pair; waves: stop at saturation
    # open
    num_requests: int = 0
    seed: int = 0
    # waves
    max_wave: int = 0
    step: int = 1
    search: str = "step"  # waves: bisect | step
    resolution: int = 1  # waves, bisect: stop once the saturating size is known within this many requests
    # ingest
    lengths: list[int] = field(default_factory=list)
    repeats: int = 1
    # batch
    warmups: int = 0
    runs: int = 0
    max_runs: int | None = None
    # dataset (open loop): the requests are drawn from this dataset (cardgen.datasets); once sampled
    # (cardgen.datasets.resolve) ``items`` holds each request's [prompt tokens, output tokens] in send order
    dataset: str | None = None
    items: list[list[int]] = field(default_factory=list)
    # shared prefix: ``prefixes`` prefixes of ``prefix_tokens``, each request one of them and a unique suffix of
    # ``suffix_tokens``; a cold pass then ``warm_rounds`` warm ones (``items``: each prefix's request lengths)
    prefixes: int = 0
    prefix_tokens: int = 0
    suffix_tokens: int = 0
    warm_rounds: int = 0
    # chat: ``parallel`` users hold ``conversations`` conversations of ``turns`` turns; the first message is
    # ``prompt_tokens`` long, later ones ``message_tokens``; ``think_time_s`` between a reply and the next turn
    conversations: int = 0
    turns: int = 0
    message_tokens: int = 0
    think_time_s: float = 0.0
    fresh_history: bool = False  # chat: every turn's history starts with a new id (nothing for the cache to reuse)

    def to_wire(self) -> dict[str, Any]:
        data = asdict(self)
        if data["rate_rps"] is not None and math.isinf(data["rate_rps"]):
            data["rate_rps"] = "inf"
        return data

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Point:
        data = dict(data)
        if data.get("rate_rps") == "inf":
            data["rate_rps"] = math.inf
        return cls(**data)

    def expected_requests(self) -> int:
        """How many requests the point sends at least (for progress bars)."""
        if self.kind == "closed":
            return self.min_requests
        if self.kind == "open":
            return self.num_requests
        if self.kind == "waves":
            return sum(range(1, self.max_wave + 1, self.step))
        if self.kind == "ingest":
            return len(self.lengths) * self.repeats
        if self.kind == "batch":
            return (self.parallel or 1) * (self.warmups + self.runs)
        if self.kind == "prefix":
            return self.prefixes * (1 + self.warm_rounds)
        if self.kind == "chat":
            return self.conversations * self.turns
        return 0

    def prompt_lengths(self) -> list[int]:
        """The lengths of the sized prompt templates the point sends (none for a dataset's own prompts)."""
        if self.dataset is not None or self.kind == "prefix":
            return []
        if self.kind == "chat":
            return sorted({self.prompt_tokens, self.message_tokens})
        return list(self.lengths) if self.kind == "ingest" else [self.prompt_tokens]

    # -- dataset requests ------------------------------------------------------------------------------------
    def dataset_key(self) -> str:
        """Which sample of a dataset the point sends: points with the same key send the same requests (the
        rates of one suite entry)."""
        return f"{self.dataset}|seed {self.seed}|{self.num_requests} requests|{self.endpoint}"

    def text_key(self) -> str:
        """Where the agents find the point's own prompt texts (``Setup.dataset_texts``): a dataset's sample
        (:meth:`dataset_key`), or a shared-prefix point's prefixes."""
        return self.dataset_key() if self.dataset is not None else f"{self.name}|prefixes"

    def prefix_order(self) -> list[tuple[int, str]]:
        """Shared prefix: ``(prefix, phase)`` of each request, sent one at a time in this order: every prefix
        once ``cold`` (its first request), then ``warm_rounds`` passes over them ``warm``, after a pause
        (:meth:`pause_before`)."""
        cold = [(k, "cold") for k in range(self.prefixes)]
        return cold + [(k, "warm") for _ in range(self.warm_rounds) for k in range(self.prefixes)]

    def chat_conversations(self, user: int) -> list[int]:
        """Chat: the conversations user ``user`` of ``parallel`` holds, one after another (round robin)."""
        return list(range(user, self.conversations, self.parallel or 1))

    def chat_message_tokens(self, turn: int) -> int:
        """Chat: the length of the message a turn (1, 2 ...) adds: ``prompt_tokens`` first, then
        ``message_tokens``."""
        return self.prompt_tokens if turn == 1 else self.message_tokens

    def pause_before(self, n: int) -> float:
        """Shared prefix: seconds to wait before request ``n`` of :meth:`prefix_order`: :data:`PHASE_PAUSE_S`
        before the first cold one and before the first warm one (a scrape then separates each phase from what
        came before it)."""
        return PHASE_PAUSE_S if n in (0, self.prefixes) else 0.0

    def request_numbers(self, index: int = 0, parts: int = 1) -> list[int]:
        """Open loop: which of the point's requests (0 .. num_requests - 1) process ``index`` of ``parts``
        sends, in the order of its :meth:`arrival_offsets` (round robin: every process its :func:`share`)."""
        return list(range(index, self.num_requests, parts))

    def item_lengths(self, number: int) -> tuple[int, int]:
        """A dataset point's request ``number``: (prompt tokens, output tokens) as sampled."""
        if not self.items:
            raise RuntimeError(f"{self.name}: its dataset was not sampled (cardgen.datasets.resolve)")
        prompt, output = self.items[number]
        return int(prompt), int(output)

    # -- the scenario rules: what every driver of a point obeys --------------------------------------------
    def runs_on(self, index: int) -> bool:
        """Whether load-generating process ``index`` takes part: barrier kinds run on process 0 only."""
        return index == 0 or self.kind not in BARRIER_KINDS

    def closed_slots(self, index: int, parts: int) -> int:
        """Closed loop: the parallel users process ``index`` of ``parts`` runs."""
        return share(self.parallel or 1, index, parts)

    def _closed_share(self, total: int, index: int, parts: int) -> int:
        """``total`` split over the processes that have users (the first ``min(parallel, parts)``)."""
        active = min(self.parallel or 1, parts)
        return share(total, index, active) if index < active else 0

    def closed_quota(self, index: int, parts: int) -> int:
        """Closed loop: the requests process ``index`` of ``parts`` must send at least (none for a process
        without users)."""
        return self._closed_share(self.min_requests, index, parts)

    def closed_cap(self, index: int, parts: int) -> int | None:
        """Closed loop: the most requests process ``index`` of ``parts`` may send (None: no cap)."""
        return None if self.max_requests is None else self._closed_share(self.max_requests, index, parts)

    def closed_continues(self, *, issued: int, quota: int, elapsed_s: float, cap: int | None = None,
                         precise: bool = False) -> bool:
        """Closed loop: whether a user sends another request, ``elapsed_s`` after the point started, when its
        process has sent ``issued`` requests (``quota`` at least, ``cap`` at most: :meth:`closed_quota`,
        :meth:`closed_cap`). Past ``max_duration_s`` or the cap never; before the quota and ``min_duration_s``
        always; after them, a point with a ``target_ci`` goes on until its driver finds it ``precise``
        (``cardgen.precision``), one without stops."""
        if self.max_duration_s is not None and elapsed_s >= self.max_duration_s:
            return False
        if cap is not None and issued >= cap:
            return False
        if issued < quota or elapsed_s < self.min_duration_s:
            return True
        return self.target_ci is not None and not precise

    def closed_stop(self, *, issued: int, elapsed_s: float, cap: int | None = None, precise: bool = False,
                    ) -> tuple[str, str | None]:
        """Closed loop: why the point stopped sending, once :meth:`closed_continues` said no — the stop reason
        (``cardgen.schemas.run``'s ``STOP_*``) and its words, in ``closed_continues``' own order."""
        from cardgen.schemas.run import STOP_MAX_DURATION, STOP_MAX_REQUESTS, STOP_MINIMUM, STOP_PRECISION

        if self.max_duration_s is not None and elapsed_s >= self.max_duration_s:
            return STOP_MAX_DURATION, f"{self.max_duration_s:g} s"
        if cap is not None and issued >= cap:
            return STOP_MAX_REQUESTS, f"{self.max_requests} requests"
        if precise and self.target_ci is not None:
            return STOP_PRECISION, f"within +-{self.target_ci:.0%}"
        return STOP_MINIMUM, None

    def skips_after_saturation(self, later: Point) -> bool:
        """Whether ``later`` is not run once this closed-loop point saturated the server (when this point has
        ``stop_at_saturation``): a closed-loop point of the same suite entry and prompt/output pair with more
        parallel users, which would measure only queueing."""
        return (self.kind == later.kind == "closed" and self.stop_at_saturation and self.group == later.group
                and self.endpoint == later.endpoint and self.prompt_tokens == later.prompt_tokens
                and self.output_tokens == later.output_tokens and (later.parallel or 1) > (self.parallel or 1))

    def arrival_offsets(self, index: int = 0, parts: int = 1) -> list[float]:
        """Open loop: when process ``index`` of ``parts`` sends each of its requests, in seconds after the
        point's start. Poisson arrivals (exponential gaps, seeded per process) at ``rate_rps / parts``; all at
        0 for an infinite rate."""
        n = share(self.num_requests, index, parts)
        rate = (self.rate_rps or math.inf) / parts
        if math.isinf(rate):
            return [0.0] * n
        rng = random.Random(self.seed * 1000 + index)
        t, out = 0.0, []
        for _ in range(n):
            t += rng.expovariate(rate)
            out.append(t)
        return out

    def wave_sizes(self) -> list[int]:
        """Waves stepped by a fixed count (``search: step``): the number of requests sent at once in each
        wave, in order (the run may stop early when ``stop_at_saturation`` and the server queued or
        preempted). A searching point (``search: bisect``) asks :meth:`wave_search` instead."""
        return list(range(1, self.max_wave + 1, self.step))

    def wave_search(self) -> WaveSearch:
        """Waves that find the saturating size: see :class:`WaveSearch`."""
        return WaveSearch(max_wave=self.max_wave, resolution=self.resolution)

    def ingest_order(self) -> list[tuple[int, int]]:
        """Ingestion: ``(prompt_tokens, repeat)`` of each request, sent one at a time in this order (a point
        with a ``target_ci`` may end after any complete sweep: :meth:`more_sweeps`)."""
        return [(length, rep) for rep in range(self.repeats) for length in self.lengths]

    def more_sweeps(self, sweeps: int, *, precise: bool) -> bool:
        """Ingestion: whether another sweep of ``lengths`` follows ``sweeps`` complete ones. ``repeats`` sweeps
        at most; with a ``target_ci``, none once the slope is ``precise`` (``precision.ingest_precise``)."""
        if sweeps >= self.repeats:
            return False
        return sweeps == 0 or self.target_ci is None or not precise

    def more_batch_rounds(self, measured: int, *, precise: bool) -> bool:
        """Batch table: whether another measured round follows ``measured`` of them (after the warm-ups): until
        ``runs``; with a ``target_ci``, then on until the round means are ``precise``
        (``precision.batch_precise``), ``max_runs`` at most."""
        if measured < self.runs:
            return True
        if self.target_ci is None or precise:
            return False
        return measured < (self.max_runs or self.runs)

    def batch_rounds(self) -> list[tuple[int, bool]]:
        """Batch table: ``(repeat, warmup)`` of each round of ``parallel`` simultaneous requests; warm-up
        rounds count 0, 1, ... and so do the measured ones after them (a point with a ``target_ci`` may add
        rounds after these: :meth:`more_batch_rounds`)."""
        return [(run if run < self.warmups else run - self.warmups, run < self.warmups)
                for run in range(self.warmups + self.runs)]


class WaveSearch:
    """The sizes of growing waves that find the smallest wave that saturates the server (a wave = that many
    requests sent at once). Sizes double from 1 until one saturates (or ``max_wave`` is reached), then bisect
    between the largest size that did not saturate and the smallest that did, until they are ``resolution``
    requests apart (1 by default: the KV capacity is then bracketed within one request's tokens).

    ``next_size()`` gives the next wave (None when done); ``report(size, saturated)`` tells what it did.
    """

    def __init__(self, *, max_wave: int, resolution: int = 1) -> None:
        self.max_wave = max(1, max_wave)
        self.resolution = max(1, resolution)
        self.low = 0  # largest size seen not to saturate
        self.high: int | None = None  # smallest size seen to saturate
        self.sizes: list[int] = []
        self._pending: int | None = None

    def next_size(self) -> int | None:
        if self._pending is not None:
            raise RuntimeError("report the last wave before asking for the next")
        if self.high is None:
            if self.low >= self.max_wave:
                return None
            size = min(max(1, self.low * 2), self.max_wave)
        else:
            if self.high - self.low <= self.resolution:
                return None
            size = (self.low + self.high) // 2
        self._pending = size
        return size

    def report(self, size: int, saturated: bool) -> None:
        if size != self._pending:
            raise RuntimeError(f"wave of {size} reported, {self._pending} was asked for")
        self._pending = None
        self.sizes.append(size)
        if saturated:
            self.high = size if self.high is None else min(self.high, size)
        else:
            self.low = max(self.low, size)

    @property
    def bracketed(self) -> bool:
        """Whether the saturating size is known to within ``resolution`` requests."""
        return self.high is not None and self.high - self.low <= self.resolution


def _rate_label(rate: float) -> str:
    return "inf" if math.isinf(rate) else f"{rate:g}"


def expand(suite: Suite) -> list[Point]:
    """Every point of the suite, in order. Names are unique within the suite."""
    points: list[Point] = []
    for n, entry in enumerate(suite.scenarios):
        common = {
            "endpoint": entry.endpoint or suite.endpoint,
            "timeout_s": entry.timeout_s or suite.timeout_s,
        }
        group = entry.name or f"{entry.kind}-{n + 1}"
        if isinstance(entry, ClosedLoop):
            for p in entry.prompt_tokens:
                for o in entry.output_tokens:
                    for par in entry.parallel:
                        points.append(Point(
                            name=f"closed-in{p}-out{o}-p{par}", kind="closed", group=group, prompt_tokens=p,
                            output_tokens=o, parallel=par, min_requests=max(entry.min_requests, par * entry.min_rounds),
                            min_duration_s=entry.min_duration_s, max_duration_s=entry.max_duration_s,
                            max_requests=entry.max_requests, target_ci=entry.target_ci,
                            stop_at_saturation=entry.stop_at_saturation, **common))
        elif isinstance(entry, SharedPrefix):
            points.append(Point(
                name=f"prefix-n{entry.prefixes}-in{entry.prefix_tokens}+{entry.suffix_tokens}-out{entry.output_tokens}",
                kind="prefix", group=group, prompt_tokens=entry.prefix_tokens + entry.suffix_tokens,
                output_tokens=entry.output_tokens, prefixes=entry.prefixes, prefix_tokens=entry.prefix_tokens,
                suffix_tokens=entry.suffix_tokens, warm_rounds=entry.warm_rounds, **common))
        elif isinstance(entry, Chat):
            conversations = entry.conversations or entry.users
            base = (f"chat-u{entry.users}-t{entry.turns}-in{entry.first_tokens}+{entry.message_tokens}"
                    f"-out{entry.output_tokens}")
            for fresh in (False, True) if entry.compare_no_cache else (False,):
                points.append(Point(
                    name=base + ("-nocache" if fresh else ""), kind="chat", group=group,
                    prompt_tokens=entry.first_tokens, output_tokens=entry.output_tokens,
                    parallel=min(entry.users, conversations), conversations=conversations, turns=entry.turns,
                    message_tokens=entry.message_tokens, think_time_s=entry.think_time_s, fresh_history=fresh,
                    **{**common, "endpoint": "chat"}))
        elif isinstance(entry, OpenLoop) and entry.dataset is not None:
            from cardgen.datasets import slug

            for rate in entry.rates:
                points.append(Point(
                    name=f"open-{slug(entry.dataset)}-r{_rate_label(rate)}", kind="open", group=group,
                    dataset=entry.dataset, rate_rps=rate, num_requests=entry.num_requests, seed=entry.seed,
                    **common))
        elif isinstance(entry, OpenLoop):
            for rate in entry.rates:
                points.append(Point(
                    name=f"open-in{entry.prompt_tokens}-out{entry.output_tokens}-r{_rate_label(rate)}", kind="open",
                    group=group, prompt_tokens=entry.prompt_tokens, output_tokens=entry.output_tokens,
                    rate_rps=rate, num_requests=entry.num_requests, seed=entry.seed, **common))
        elif isinstance(entry, Waves):
            points.append(Point(
                name=f"waves-in{entry.prompt_tokens}-out{entry.output_tokens}", kind="waves", group=group,
                prompt_tokens=entry.prompt_tokens, output_tokens=entry.output_tokens, max_wave=entry.max_wave,
                step=entry.step, stop_at_saturation=entry.stop_at_saturation, search=entry.search,
                resolution=entry.resolution, **common))
        elif isinstance(entry, Ingest):
            points.append(Point(
                name="ingest", kind="ingest", group=group,
                output_tokens=entry.output_tokens, lengths=entry.lengths(), repeats=entry.repeats,
                target_ci=entry.target_ci, **common))
        elif isinstance(entry, BatchSweep):
            for b in entry.batch_sizes:
                points.append(Point(
                    name=f"batch-in{entry.prompt_tokens}-out{entry.output_tokens}-b{b}", kind="batch", group=group,
                    prompt_tokens=entry.prompt_tokens, output_tokens=entry.output_tokens, parallel=b,
                    warmups=entry.warmups, runs=entry.runs, target_ci=entry.target_ci,
                    max_runs=entry.max_runs, **common))
    seen: dict[str, int] = {}
    for point in points:  # make names unique when two entries expand to the same parameters
        if point.name in seen:
            seen[point.name] += 1
            point.name = f"{point.name}-{seen[point.name]}"
        else:
            seen[point.name] = 1
    return points


def fit_context(points: list[Point], max_model_len: int | None) -> tuple[list[Point], list[str]]:
    """Leave out what cannot fit the server's context (prompt + output > ``max_model_len``): every such
    request would fail with HTTP 400. Returns the points to run and one warning per point changed."""
    if not max_model_len:
        return points, []
    kept: list[Point] = []
    warnings: list[str] = []
    for point in points:
        if point.kind == "ingest":
            lengths = [n for n in point.lengths if n + point.output_tokens <= max_model_len]
            if len(lengths) < len(point.lengths):
                warnings.append(f"{point.name}: prompts over {max_model_len - point.output_tokens} tokens left out "
                                f"(the server's max_model_len is {max_model_len})")
            if len(lengths) >= 2:
                point.lengths = lengths
                kept.append(point)
            continue
        if point.prompt_tokens + point.output_tokens > max_model_len:
            warnings.append(f"{point.name} left out: {point.prompt_tokens} + {point.output_tokens} tokens exceed "
                            f"the server's max_model_len of {max_model_len}")
            continue
        kept.append(point)
    return kept, warnings
