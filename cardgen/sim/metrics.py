"""``/metrics`` of the virtual server: Prometheus text exposition with vLLM's metric names.

Written by hand rather than with prometheus_client: an observation is two list operations (the server makes
several per token), and the scheduler's gauges and counters are read when scraped instead of being mirrored.
The output parses with ``prometheus_client.parser.text_string_to_metric_families`` (tested).

Latency histograms are server-side and use the *modelled* times (arrival, admission, step ends), as a real
engine measures its own. ``cardgen_sim_emit_lag_seconds`` is the one real-time figure: how late each token
was written compared with the end of the step that produced it.
"""

from __future__ import annotations

import json
import math
import operator
import re
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from cardgen.sim.scheduler import SeqStatus

if TYPE_CHECKING:
    from cardgen.sim.scheduler import Scheduler, Seq

_FINISHED = SeqStatus.FINISHED  # a status at or past it: the sequence ended
_EXACT = float(2**53)  # a whole number below it is a float exactly, and repr writes that float as "%d.0"

# vLLM's buckets
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
REQUEST_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
LAG_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.00075,
    0.001,
    0.0015,
    0.002,
    0.003,
    0.005,
    0.0075,
    0.01,
    0.02,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def format_labels(labels: Mapping[str, object]) -> str:
    """``{a="1",b="x"}`` (empty string for no labels)."""
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items()) + "}"


def _json_float(value: float) -> str:
    """``value`` as :func:`json.dumps` writes a float."""
    if value != value:
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return float.__repr__(value)


def _num(value: float) -> str:
    return repr(float(value))


class Histogram:
    """A cumulative histogram; ``observe`` is one bisect and two additions."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(float(b) for b in bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def observe_many(self, value: float, n: int) -> None:
        """:meth:`observe` ``value`` ``n`` times (the sum added to one at a time, as ``n`` calls add it)."""
        self.counts[bisect_left(self.bounds, value)] += n
        total = self.sum
        for _ in range(n):
            total += value
        self.sum = total

    @property
    def count(self) -> int:
        return sum(self.counts)

    def samples(self, name: str, labels: Mapping[str, str]) -> list[Sample]:
        """The ``_bucket`` (cumulative, ``le`` last), ``_count`` and ``_sum`` samples of histogram ``name``."""
        out: list[Sample] = []
        cumulative = 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            cumulative += n
            le = "+Inf" if bound == float("inf") else repr(bound)
            out.append((f"{name}_bucket", {**labels, "le": le}, float(cumulative)))
        out.append((f"{name}_count", dict(labels), float(cumulative)))
        out.append((f"{name}_sum", dict(labels), float(self.sum)))
        return out


#: one sample of the exposition: (sample name, labels, value)
Sample = tuple[str, dict[str, str], float]


@dataclass(frozen=True, slots=True)
class Family:
    """One metric family as exposed: its ``# HELP`` and ``# TYPE`` lines and its samples."""

    name: str
    kind: str  # gauge | counter | histogram
    help: str
    samples: list[Sample]


@dataclass(frozen=True)
class Scraped:
    """A scrape of the virtual server as ``server_metrics.jsonl`` holds it (:attr:`line`, newline included) and,
    where every value is a number JSON writes as one, its values in the order the line writes them and its
    ``layout`` (the same object for every line of the same names, labels and places): what a reader of the line
    would read, without reading it (:meth:`cardgen.schemas.records.ScrapeSharer.add_written`). The line is written
    from the values when first asked for (:class:`LineFormat`), by whichever process writes it
    (:mod:`cardgen.sim.beside`); ``text``: the line made at once (a value JSON writes as a word)."""

    t: float
    t_end: float
    values: tuple[float, ...] | None = None
    layout: _Template | None = None
    whole: bool = False  # the layout's whole format writes it (see _Template)
    text: str | None = None

    @cached_property
    def line(self) -> str:
        if self.text is not None:
            return self.text
        assert self.layout is not None and self.values is not None
        return self.layout.written.line(self.t, self.t_end, self.values, whole=self.whole)


class LineFormat:
    """How one layout's scrape is written from its values (in text order): the JSON around them as a %-format of
    ``repr`` s (``format``) and as one that writes each value of a count as ``%d.0`` (``whole_format``: what
    ``repr`` writes for a whole float below 2**53, several times faster). Small, for another process to write
    the lines of a run computed in this one."""

    __slots__ = ("format", "whole_format")

    def __init__(self, format: str, whole_format: str) -> None:
        self.format, self.whole_format = format, whole_format

    def line(self, t: float, t_end: float, values: Sequence[float], *, whole: bool) -> str:
        """The scrape at ``t`` to ``t_end`` of ``values``, as ``server_metrics.jsonl``'s line; ``whole``: every
        value of a count is a whole number below 2**53 (``%d`` of its float writes what ``repr`` of the count
        does)."""
        head = f'{{"t":{_json_float(t)},"t_end":{_json_float(t_end)},"samples":'
        return head + (self.whole_format if whole else self.format) % tuple(values) + "}\n"


class _Template:
    """:meth:`SimMetrics.line`'s JSON of one layout around its values: which value comes where (``order``), the
    text before, between and after them (``fragments``), the formats that write a line of them (``written``), and
    each value's type where the whole format applies (``types``: a count's is int)."""

    __slots__ = ("fragments", "in_text_order", "types", "written")

    def __init__(self, order: list[int], fragments: list[str], types: Sequence[type]) -> None:
        self.fragments = fragments
        self.types = tuple(types)  # each value's type, in text order, where whole_format applies
        self.written = LineFormat(
            fragments[0].replace("%", "%%") + "".join("%r" + f.replace("%", "%%") for f in fragments[1:]),
            fragments[0].replace("%", "%%") + "".join(("%d.0" if t is int else "%r") + f.replace("%", "%%")
                                                     for t, f in zip(self.types, fragments[1:], strict=True)))
        self.in_text_order: Callable[[Sequence[float]], Sequence[float]]
        if len(order) > 1:
            self.in_text_order = operator.itemgetter(*order)
        else:  # itemgetter of one index gives the value, not a tuple of it
            self.in_text_order = lambda values: [values[i] for i in order]


class SimMetrics:
    """Every metric the virtual server exposes. The driver calls the ``observe_*`` methods; :meth:`families`
    reads the scheduler's gauges and counters at scrape time, and :meth:`render` (Prometheus text, what
    ``/metrics`` answers) and :meth:`samples` (what a scrape of it parses to) both write those families."""

    def __init__(self, *, model_name: str, cache_config: Mapping[str, object] | None) -> None:
        self.labels = {"engine": "0", "model_name": model_name}
        self.cache_config = {k: str(v) for k, v in cache_config.items()} if cache_config is not None else None
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(REQUEST_BUCKETS)
        self.queue = Histogram(REQUEST_BUCKETS)
        self.prefill = Histogram(REQUEST_BUCKETS)
        self.decode = Histogram(REQUEST_BUCKETS)
        self.emit_lag = Histogram(LAG_BUCKETS)
        self.recent_lags: deque[float] = deque(maxlen=1 << 16)  # raw, for exact quantiles
        self.faults: dict[str, int] = {}
        self._templates: dict[tuple[object, ...], _Template] = {}  # line()'s JSON around the values, per layout

    # --- observations (the driver's hot path) ----------------------------------------------------------
    def observe_lag(self, lag_s: float) -> None:
        self.emit_lag.observe(lag_s)
        self.recent_lags.append(lag_s)

    def observe_first_token(self, seq: Seq) -> None:
        """TTFT from when the request reached the server (vLLM's, from the API server's receipt), which is before it
        joined the queue when the server spends host time on it first."""
        assert seq.first_token_s is not None
        self.ttft.observe(seq.first_token_s - (seq.arrival_s if seq.received_s is None else seq.received_s))

    def observe_finished(self, seq: Seq) -> None:
        """A request that finished normally: request-level histograms (queue: from joining the queue)."""
        assert seq.end_s is not None and seq.first_token_s is not None and seq.scheduled_s is not None
        self.e2e.observe(seq.end_s - (seq.arrival_s if seq.received_s is None else seq.received_s))
        self.queue.observe(seq.scheduled_s - seq.arrival_s)
        self.prefill.observe(seq.first_token_s - seq.scheduled_s)
        self.decode.observe(seq.end_s - seq.first_token_s)

    def observe_tokens(self, seqs: Sequence[Seq]) -> None:
        """Each of ``seqs`` was just given its latest token (a step's emitted sequences, in its order): its first
        (TTFT) or the gap since the last (ITL), and the request-level histograms when that token finished it. The
        gaps are added to their histogram's sum one by one, in that order. (The real-time server inlines this in
        its emission loop, split into a fast path.)"""
        itl = self.itl
        bounds, counts, total = itl.bounds, itl.counts, itl.sum
        finished = _FINISHED
        for seq in seqs:
            if seq.output_tokens == 1:
                self.observe_first_token(seq)
            elif (gap := seq.gap_s) is not None:  # always, from the second token
                counts[bisect_left(bounds, gap)] += 1
                total += gap
            if seq.status >= finished:
                self.observe_finished(seq)
        itl.sum = total

    def observe_decode_run(self, last_token_s: float, ends: Sequence[float], seqs: int,
                           lasts: Sequence[float] | None = None) -> None:
        """Steps that each gave one token to ``seqs`` sequences whose tokens before came at ``last_token_s`` (or at
        ``lasts``, each its own, in the order of the batch), ended at ``ends``
        (:meth:`cardgen.sim.virtual.VirtualServer.decode_run`): each step's gap observed once per sequence, as
        :meth:`observe_tokens` observes them step by step."""
        itl = self.itl
        last = last_token_s
        if lasts is not None and ends:  # the first step's gaps, one per sequence
            first = ends[0]
            for before in lasts:
                itl.observe(first - before)
            last, ends = first, ends[1:]
        for end in ends:
            itl.observe_many(end - last, seqs)
            last = end

    def count_fault(self, kind: str) -> None:
        self.faults[kind] = self.faults.get(kind, 0) + 1

    def lag_summary(self, *, reset: bool = False) -> dict[str, float | int | None]:
        """Exact quantiles of the last 65,536 emission lags (seconds)."""
        values = sorted(self.recent_lags)
        if reset:
            self.recent_lags.clear()

        def q(p: float) -> float | None:
            return values[min(len(values) - 1, int(p * len(values)))] if values else None

        return {
            "count": len(values),
            "p50": q(0.5),
            "p90": q(0.9),
            "p99": q(0.99),
            "p999": q(0.999),
            "max": values[-1] if values else None,
        }

    # --- exposition --------------------------------------------------------------------------------------
    def families(self, sched: Scheduler) -> list[Family]:
        """Every family ``/metrics`` exposes now, in order."""
        lab = self.labels
        out: list[Family] = []
        if self.cache_config is not None:
            out.append(Family("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig",
                              [("vllm:cache_config_info", {**self.cache_config, "engine": "0"}, 1.0)]))
        scalars: list[tuple[str, str, str, float]] = [
            ("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
             len(sched.running)),
            ("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
             len(sched.waiting)),
            ("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", sched.kv_usage),
            ("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.",
             sched.num_preemptions),
            ("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
             sched.prompt_tokens_total),
            ("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
             sched.generation_tokens_total),
            ("vllm:prefix_cache_queries_total", "counter",
             "Prefix cache queries, in terms of number of queried tokens.", sched.prefix_queries),
            ("vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.",
             sched.prefix_hits),
        ]
        if sched.spec is not None:  # vLLM's names, as its speculative decoding exposes them
            c = sched.spec_counters
            scalars += [
                ("vllm:spec_decode_num_drafts_total", "counter", "Number of spec decoding drafts.", c.drafts),
                ("vllm:spec_decode_num_draft_tokens_total", "counter", "Number of draft tokens.", c.draft_tokens),
                ("vllm:spec_decode_num_accepted_tokens_total", "counter", "Number of accepted tokens.",
                 c.accepted_tokens),
            ]
        for name, kind, help_text, value in scalars:
            out.append(Family(name, kind, help_text, [(name, dict(lab), float(value))]))
        if sched.spec is not None:
            per_pos = sched.spec_counters.accepted_per_pos
            name = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
            out.append(Family(name, "counter", "Accepted tokens per draft position.",
                              [(name, {**lab, "position": str(i)},
                                float(per_pos[i] if i < len(per_pos) else 0)) for i in range(sched.spec.tokens)]))
        out.append(Family("vllm:request_success_total", "counter", "Count of successfully processed requests.",
                          [("vllm:request_success_total", {**lab, "finished_reason": reason}, float(n))
                           for reason, n in sched.finished_total.items()]))
        histograms = [
            ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", self.ttft),
            ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", self.itl),
            ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", self.e2e),
            ("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
             self.queue),
            ("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.",
             self.prefill),
            ("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.",
             self.decode),
            ("cardgen_sim_emit_lag_seconds",
             "How late each token was written, after the modelled end of its step (real time).", self.emit_lag),
        ]
        for name, help_text, hist in histograms:
            out.append(Family(name, "histogram", help_text, hist.samples(name, lab)))
        out.append(Family("cardgen_sim_faults_total", "counter", "Faults injected (--faults), by kind.",
                          [("cardgen_sim_faults_total", {**lab, "kind": kind}, float(n))
                           for kind, n in sorted(self.faults.items())]))
        out.append(Family("cardgen_sim_steps_total", "counter", "Engine steps modelled.",
                          [("cardgen_sim_steps_total", dict(lab), float(sched.num_steps))]))
        return out

    def render(self, sched: Scheduler) -> str:
        """The Prometheus text ``/metrics`` answers."""
        lines: list[str] = []
        for family in self.families(sched):
            lines.append(f"# HELP {family.name} {family.help}")
            lines.append(f"# TYPE {family.name} {family.kind}")
            lines.extend(f"{name}{format_labels(labels)} {_num(value)}" for name, labels, value in family.samples)
        return "\n".join(lines) + "\n"

    def values(self, sched: Scheduler) -> list[float]:
        """Every sample's value, in the order :meth:`families` gives them (the fast path of :meth:`line`: no
        family, label or sample is built)."""
        out: list[float] = [1.0] if self.cache_config is not None else []
        out += [len(sched.running), len(sched.waiting), sched.kv_usage, sched.num_preemptions,
                sched.prompt_tokens_total, sched.generation_tokens_total, sched.prefix_queries, sched.prefix_hits]
        if sched.spec is not None:
            c = sched.spec_counters
            out += [c.drafts, c.draft_tokens, c.accepted_tokens]
            per_pos = c.accepted_per_pos
            out += [per_pos[i] if i < len(per_pos) else 0 for i in range(sched.spec.tokens)]
        out += sched.finished_total.values()
        for hist in (self.ttft, self.itl, self.e2e, self.queue, self.prefill, self.decode, self.emit_lag):
            cumulative = 0
            for n in hist.counts:
                cumulative += n
                out.append(cumulative)
            out += (cumulative, hist.sum)
        out += (self.faults[fault] for fault in sorted(self.faults))
        out.append(sched.num_steps)
        return out

    def line(self, sched: Scheduler, *, t: float, t_end: float) -> str:
        """:meth:`scrape`'s line."""
        return self.scrape(sched, t=t, t_end=t_end).line

    def scrape(self, sched: Scheduler, *, t: float, t_end: float) -> Scraped:
        """The scrape at ``t`` as ``server_metrics.jsonl``'s line
        (``cardgen.schemas.records.metric_line(MetricSample(t=t, t_end=t_end, samples=self.samples(sched)))``,
        byte for byte): the JSON around the values is written once per set of sample names and labels
        (:meth:`_template`), then only the values are formatted."""
        key = (tuple(sched.finished_total), tuple(sorted(self.faults)), sched.spec is not None)
        template = self._templates.get(key)
        raw = self.values(sched)
        if template is None:
            order, fragments = self._template(sched)
            template = self._templates[key] = _Template(order, fragments, [type(raw[i]) for i in order])
        ordered = template.in_text_order(raw)
        values = tuple(map(float, ordered))
        if all(map(math.isfinite, values)):  # each as repr writes it, into the JSON around them at once
            whole = (tuple(map(type, ordered)) == template.types and max(values) < _EXACT and min(values) > -_EXACT)
            return Scraped(t=t, t_end=t_end, values=values, layout=template, whole=whole)
        texts = [_json_float(v) for v in values]  # json's words for inf and nan
        head = f'{{"t":{_json_float(t)},"t_end":{_json_float(t_end)},"samples":'
        parts = [head, template.fragments[0]]
        for text, fragment in zip(texts, template.fragments[1:], strict=True):
            parts.append(text)
            parts.append(fragment)
        parts.append("}\n")
        return Scraped(t=t, t_end=t_end, text="".join(parts))

    def _template(self, sched: Scheduler) -> tuple[list[int], list[str]]:
        """The JSON of :meth:`samples` with its values cut out: which value of :meth:`values` comes where (the
        samples of a name are written together), and the text before the first value, between each two and
        after the last."""
        marks: dict[str, list[dict[str, object]]] = {}
        n = 0
        for family in self.families(sched):
            for name, labels, _ in family.samples:
                marks.setdefault(name, []).append({"labels": labels, "value": f"@{n}@"})
                n += 1
        pieces = re.split(r'"@(\d+)@"', json.dumps(marks, separators=(",", ":")))
        return [int(i) for i in pieces[1::2]], pieces[0::2]

    def samples(self, sched: Scheduler) -> dict[str, list[dict[str, object]]]:
        """What a scrape of :meth:`render` parses to (``cardgen.promtext.parse_metrics``): ``{sample name:
        [{"labels": {...}, "value": v}]}``, without the text round trip."""
        out: dict[str, list[dict[str, object]]] = {}
        for family in self.families(sched):
            for name, labels, value in family.samples:
                out.setdefault(name, []).append({"labels": labels, "value": value})
        return out
