"""What a run saves, line by line: the schemas of ``requests.jsonl``, ``server_metrics.jsonl`` and
``loadgen.jsonl``.

The lines carry no version of their own: ``run.json``, written by the same load stage next to them, versions
them too (bump ``RUN_SCHEMA_VERSION`` when a line changes incompatibly). Unknown fields are ignored, so lines
written by a newer cardgen that only added fields still load. Every time is Unix seconds (float,
``time.time()``), comparable across processes on one host.
"""

from __future__ import annotations

import json
import re
import sys
from array import array
from collections.abc import Iterator, Mapping, Sequence
from enum import StrEnum
from typing import Any

import msgspec
import numpy as np
from pydantic import ConfigDict, Field, field_serializer, model_validator

from cardgen.schemas.saved import Saved


class ErrorKind(StrEnum):
    """Why a request failed. Every failure is recorded with one of these."""

    HTTP_STATUS = "http_status"  # the server answered with a non-2xx status
    CONNECT = "connect"  # connection refused or reset before any response
    TIMEOUT = "timeout"  # no byte for longer than the request timeout
    STREAM_DROPPED = "stream_dropped"  # the stream ended (or broke) before `data: [DONE]`
    MALFORMED_SSE = "malformed_sse"  # an event that is not JSON, or JSON that is not a completion chunk
    SERVER_ERROR_EVENT = "server_error_event"  # the stream carried an {"error": ...} object
    EMPTY = "empty"  # the stream finished without any text-bearing chunk
    CLIENT = "client"  # the load generator itself failed while sending (a bug or an overload of cardgen)
    LOST = "lost"  # in flight on a load worker the master lost (killed, its host gone): cardgen.load.fleet


# vLLM's per-request ``metrics``: each field of EngineTimings and the key that says it
VLLM_METRICS = (("queue_ms", "queue_time_ms"), ("prompt_ms", "time_to_first_token_ms"),
                ("predicted_ms", "generation_time_ms"), ("mean_itl_ms", "mean_itl_ms"),
                ("encode_ms", "encode_time_ms"))


class EngineTimings(Saved):
    """What the engine itself says one request cost, from its last chunk: llama.cpp's ``timings`` (``source``
    ``timings``), or vLLM's ``metrics`` (``--enable-per-request-metrics``; ``source`` ``metrics``). Milliseconds, as
    the engine counts them; None for what it does not say."""

    source: str | None = None  # timings (llama.cpp) | metrics (vLLM)
    queue_ms: float | None = None  # waiting before the engine scheduled it (vLLM's queue_time_ms)
    prompt_n: int | None = None  # prompt tokens the engine computed (the cached ones excluded)
    prompt_ms: float | None = None  # computing its prompt, to its first token (vLLM: time_to_first_token_ms,
    # from scheduling)
    predicted_n: int | None = None  # tokens it generated
    predicted_ms: float | None = None  # its time generating them, first to last (vLLM: generation_time_ms)
    cache_n: int | None = None  # prompt tokens it took from its cache
    mean_itl_ms: float | None = None  # vLLM: generation time / (tokens - 1)
    # its encoder's time on the request's images, before its prefill (``encode_time_ms``: the virtual server's,
    # which models it; no engine here says it per request)
    encode_ms: float | None = None

    @classmethod
    def of_response(cls, said: Mapping[str, Any] | None) -> EngineTimings | None:
        """From what the last chunk said: llama.cpp's ``timings`` (``source`` ``timings``) or vLLM's ``metrics``
        (``source`` ``metrics``), what of it is numbers; None when it said nothing."""
        if not said:
            return None

        def number(key: str) -> float | None:
            value = said.get(key)
            return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

        def whole(key: str) -> int | None:
            value = number(key)
            return int(value) if value is not None else None

        said_numbers: dict[str, Any]
        if said.get("source") == "metrics":
            source, said_numbers = "metrics", {field: number(key) for field, key in VLLM_METRICS}
        else:
            source, said_numbers = "timings", {
                "prompt_n": whole("prompt_n"), "prompt_ms": number("prompt_ms"), "predicted_n": whole("predicted_n"),
                "predicted_ms": number("predicted_ms"), "cache_n": whole("cache_n")}
        if all(value is None for value in said_numbers.values()):  # it said none of them
            return None
        # each value already of its field's type (a float, an int or None): the model validation would build
        return cls.model_construct(source=source, **said_numbers)

    @classmethod
    def of_vllm_numbers(cls, said: Mapping[str, float]) -> EngineTimings:
        """:meth:`of_response` of vLLM's ``metrics`` whose every value is a number and that says at least one of
        them (the virtual server's): made at once, none of them looked at again."""
        numbers: dict[str, Any] = {field: None if (value := said.get(key)) is None else float(value)
                                   for field, key in VLLM_METRICS}
        return cls.model_construct(source="metrics", **numbers)


class RequestRecord(Saved):
    """One request, as the load engine saw it. Written as one JSON line as soon as the request ends."""

    model_config = ConfigDict(extra="ignore", ser_json_inf_nan="strings")  # inf rate -> "Infinity": valid JSON

    # where it belongs
    scenario: str  # the point's name, unique within a run, e.g. "closed-in1024-out128-p10"
    kind: str  # the point's kind (cardgen.kinds: closed, open, ...)
    group: str = ""  # the suite entry the point was expanded from
    endpoint: str = "completions"  # completions | chat
    parallel: int | None = None  # the requests its point keeps in flight at once by design (users, a group's size)
    rate_rps: float | None = None  # open loop: Poisson rate (inf = all at once)
    repeat: int | None = None  # batch sweep / ingestion sweep repetition
    warmup: bool = False  # warm-up requests are kept on disk but left out of the figures
    prompt_tokens_target: int
    output_tokens_target: int
    # False: the request's output was not forced to its target (its own end is its length: Send.length_forced);
    # None: it was, as every request before the field
    length_forced: bool | None = None
    worker: str = "local"
    index: int = 0  # sequence number within the scenario, per worker
    # which run of the point sent it: 0 the first; ``cardgen resume`` reruns a cut-off point as attempt 1, 2...
    # Records of an attempt other than run.json's ``points[].attempt`` are superseded: kept, never counted
    attempt: int = 0
    # workload shape (cardgen.points): the dataset request sent (its number in the point's sample), the shared
    # prefix a prefix-cache request carries and its phase (cold | warm), a chat request's conversation and turn
    item: int | None = None
    prefix: int | None = None
    phase: str | None = None
    conversation: int | None = None
    turn: int | None = None

    # timing, Unix seconds
    scheduled_at: float | None = None  # open loop: when the Poisson process said to send
    sent_at: float  # just before the request was written
    headers_at: float | None = None  # response headers received
    first_token_at: float | None = None  # first chunk carrying text
    chunk_times: list[float] = Field(default_factory=list)  # arrival of every text-bearing chunk, in order
    end_at: float | None = None  # last byte of the stream (or the failure)

    # what the server said
    response_id: str | None = None
    status: int | None = None
    prompt_tokens: int | None = None  # from usage
    output_tokens: int | None = None  # from usage
    finish_reason: str | None = None

    error: str | None = None
    error_kind: ErrorKind | None = None

    # a reasoning model's stream: its answer's first chunk (None: the answer never started, or a record written
    # before cardgen told the parts apart), the chunks that carried reasoning (None: such an old record), its
    # reasoning tokens and where that count came from (``usage``: the server's
    # ``completion_tokens_details.reasoning_tokens``; ``tokenize``: the reasoning text through its ``/tokenize``)
    first_answer_at: float | None = None
    reasoning_chunks: int | None = None
    reasoning_tokens: int | None = None
    reasoning_tokens_source: str | None = None
    adapter: str | None = None  # the LoRA adapter the request asked for (its model name); None: the base model
    # its kind's own fields (a record written before they were its kind's own has them at the top level: the
    # one such field, moved here as it is read): what the program said of the request (``Send.extra``) and what the kind's shape read
    # of the answer (cardgen.kinds.shape); only that kind's analysis reads them. None: a plain request
    extra: dict[str, Any] | None = None
    # the prompt tokens the server took from its prefix cache (``usage.prompt_tokens_details.cached_tokens``)
    cached_tokens: int | None = None
    # the engine's own account of the request, as its last chunk gave it (llama.cpp's ``timings``): None when the
    # server gives none
    engine_timings: EngineTimings | None = None

    @model_validator(mode="before")
    @classmethod
    def _own_fields(cls, data: Any) -> Any:
        if isinstance(data, dict) and "wave" in data:
            data = dict(data)
            wave = data.pop("wave")
            if wave is not None:
                data["extra"] = {"wave": wave, **(data.get("extra") or {})}
        return data

    @property
    def ok(self) -> bool:
        return self.error is None

    @field_serializer("chunk_times")
    def _times(self, times: list[float] | np.ndarray) -> list[float]:
        """A record read back holds them as one array (:class:`RecordSharer`): written as the list it was."""
        return times.tolist() if isinstance(times, np.ndarray) else times


class RecordSharer:
    """Records as a reader holds them, read in order (:meth:`share`): each one's chunk times one read-only float64
    array (8 bytes a chunk, where a list of floats takes 32), the names records repeat (its point, kind, group,
    endpoint, worker, finish reason...) one string, and the set of fields each was read with one set per shape
    (pydantic keeps one per model: 2 KB of a record's 6). The same values: a long run's records take a third of
    the memory. A record read is not changed again; what reads its chunk times takes a sequence (len, index,
    iteration, ``np.asarray``: the same array, no copy)."""

    REPEATED = ("scenario", "kind", "group", "endpoint", "worker", "finish_reason", "phase", "adapter")

    def __init__(self) -> None:
        self._sets: dict[frozenset[str], set[str]] = {}

    def share(self, rec: RequestRecord) -> RequestRecord:
        """``rec`` with its chunk times an array and what it repeats shared (changed in place; returned)."""
        times = np.asarray(rec.chunk_times, dtype=np.float64)
        times.flags.writeable = False
        fields = rec.__dict__
        fields["chunk_times"] = times
        for name in self.REPEATED:
            if type(value := fields[name]) is str:
                fields[name] = sys.intern(value)
        self._share_set(rec)
        if rec.engine_timings is not None:
            self._share_set(rec.engine_timings)
        return rec

    def _share_set(self, model: Saved) -> None:
        fields_set = model.__pydantic_fields_set__
        object.__setattr__(model, "__pydantic_fields_set__", self._sets.setdefault(frozenset(fields_set), fields_set))


class MetricSample(Saved):
    """One scrape of the server's ``/metrics``, parsed. ``families`` maps a sample name (as written in the
    exposition, e.g. ``vllm:num_requests_running`` or ``vllm:prompt_tokens_total``) to its samples, each
    ``{"labels": {...}, "value": float}``."""

    t: float  # Unix time the scrape was sent
    t_end: float | None = None  # Unix time the scrape finished
    error: str | None = None
    samples: dict[str, list[dict[str, Any]]] = Field(default_factory=dict)

    def value(self, name: str, default: float | None = None, **labels: str) -> float | None:
        """First sample of ``name`` whose labels include ``labels``."""
        for sample in self.samples.get(name, ()):
            if all(sample.get("labels", {}).get(k) == v for k, v in labels.items()):
                return float(sample["value"])
        return default


class WrittenScrapes:
    """Scrapes as their writer hands them over (:meth:`ScrapeSharer.add_written`), held as a reader of the file
    holds them, but made objects only once every one is written (:meth:`held`): while a long run computes, each
    adds its values to their columns and its times to two arrays, so that no object of it lies among the run's
    own (which would keep the memory they free from being given back)."""

    def __init__(self) -> None:
        self._sharer = ScrapeSharer()
        self._t, self._t_end, self._rows = array("d"), array("d"), array("q")
        self._layouts: list[tuple[int, dict[str, _Segment | None]]] = []  # (first scrape, layout) as it changes
        self._read: dict[int, MetricSample] = {}  # the scrapes read from their line (a new layout's first)

    def add(self, line: bytes, *, t: float, t_end: float, values: Sequence[float] | None,
            layout: object | None) -> None:
        """One scrape, as :meth:`ScrapeSharer.add_written` takes it."""
        at = len(self._t)
        self._t.append(t)
        self._t_end.append(t_end)
        written = self._sharer.written(line, values=values, layout=layout)
        if isinstance(written, MetricSample):
            self._read[at] = written
            self._rows.append(-1)
            return
        columns, row = written
        if not self._layouts or self._layouts[-1][1] is not columns:
            self._layouts.append((at, columns))
        self._rows.append(row)

    def held(self) -> list[MetricSample]:
        """Every scrape so far, in order, as :meth:`ScrapeSharer.add_written` gives them."""
        out: list[MetricSample] = []
        changes, layout, following = self._layouts, None, 0
        for at, row in enumerate(self._rows):
            if row < 0:
                out.append(self._read[at])
                continue
            while following < len(changes) and changes[following][0] <= at:
                layout = changes[following][1]
                following += 1
            assert layout is not None
            sample = _without_samples(_Scrape(t=self._t[at], t_end=self._t_end[at]))
            sample.__dict__["samples"] = Samples(layout, row, None)
            out.append(sample)
        return out


class Entry(Mapping[str, Any]):
    """One sample of a scrape as a reader holds it: read-only ``{"labels": {...}, "value": float}`` in two slots
    (56 bytes, where the dict it was read as takes 184): :class:`ScrapeSharer` makes one of each sample it
    does not share."""

    __slots__ = ("labels", "value")

    def __init__(self, labels: Any, value: Any) -> None:
        self.labels, self.value = labels, value

    def __getitem__(self, key: str) -> Any:
        if key == "labels":
            return self.labels
        if key == "value":
            return self.value
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        return self.labels if key == "labels" else self.value if key == "value" else default

    def __iter__(self) -> Iterator[str]:
        return iter(("labels", "value"))

    def __len__(self) -> int:
        return 2

    def __repr__(self) -> str:
        return repr({"labels": self.labels, "value": self.value})


def _as_json(obj: Any) -> Any:
    if isinstance(obj, Entry):
        return {"labels": obj.labels, "value": obj.value}
    if isinstance(obj, Samples):
        return dict(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


class ScrapeSharer:
    """Scrapes as they are read, in order (:meth:`read_line`: a line of ``server_metrics.jsonl``; :meth:`read`: one
    as parsed), each held as a :class:`Samples` view of the run's columns of values (:class:`_Columns`), with the
    same contents: the labels of a place are one dict for every scrape that has them, and a name whose labels stay
    in place takes 8 bytes a value. A line written as the last one was but for its numbers (:class:`_Shape`: every
    name, label and place the same, every value a float in columns) has its numbers appended to their columns
    without parsing anything else, at a third of the cost. Any other line is parsed name by name, against the last
    scrape's samples (as :class:`Entry` objects, the only scrape kept as objects): a name written exactly as the
    last scrape wrote it is not parsed again, and one whose values alone moved is read at C speed. Nothing changes a
    scrape once read."""

    def __init__(self) -> None:
        self._last: dict[str, list[Any]] = {}  # the last scrape's samples as held (parsed name by name)
        self._text: dict[str, bytes] = {}  # ... and as written (read_line)
        self._labels: dict[tuple[tuple[str, Any], ...], dict[str, Any]] = {}
        self._columns = _Columns()  # where the scrapes' values are kept
        self._shape: _Shape | None = None  # the last line's, where its every value went to a column
        self._written: object | None = None  # the writer's layout of the last line given to add_written

    def add_written(self, line: bytes, *, t: float, t_end: float | None, values: Sequence[float] | None,
                    layout: object | None) -> MetricSample:
        """The scrape its writer wrote as ``line``, as :meth:`read_line` would read it (the same values, shared
        alike), given what the writer knows of it: its times, its values in the order the line writes them, and
        its ``layout`` (one object for every line of the same names, labels and places). A line of the last one's
        layout, every value of which went to a column, has its values appended to their columns without the line
        being read; any other line is read."""
        written = self.written(line, values=values, layout=layout)
        if isinstance(written, MetricSample):
            return written
        sample = _without_samples(_Scrape(t=t, t_end=t_end))
        sample.__dict__["samples"] = Samples(*written, None)
        return sample

    def written(self, line: bytes, *, values: Sequence[float] | None,
                layout: object | None) -> MetricSample | tuple[dict[str, _Segment | None], int]:
        """:meth:`add_written` but for its times: the scrape read from ``line``, or, where its values were
        appended to their columns, where (the columns' layout and the row), to be made a scrape later."""
        shape = self._shape
        if (values is not None and layout is not None and layout is self._written and shape is not None
                and self._columns.layout is shape.layout and len(values) == shape.width):
            return shape.layout, self._columns.append_row(shape.segments, list(values))
        sample = self.read_line(line)
        self._written = layout if values is not None and self._shape is not None else None
        return sample

    def read_line(self, line: bytes) -> MetricSample:
        """The scrape written as ``line`` (see :meth:`read`; :class:`json.JSONDecodeError` where it is no JSON)."""
        if self._shape is not None:
            sample = self._shape.read(line, self._columns)
            if sample is not None:
                return sample
        sample = self._read_line(line)
        self._shape = _Shape.of(line, sample)
        return sample

    def _read_line(self, line: bytes) -> MetricSample:
        """:meth:`read_line`, name by name."""
        try:
            top = _SCRAPE(line)
        except msgspec.DecodeError:  # no object, no object of samples, or what msgspec does not read (NaN)
            return self.read(decode_line(line))
        names = top.samples
        if names is msgspec.UNSET:
            return self.read(decode_line(line))
        last, text = self._last, self._text
        held: dict[str, list[Any]] = {}
        texts: dict[str, bytes] = {}
        relabelled: set[str] = set()  # names whose labels may not be the last scrape's
        for name, part in names.items():
            written = texts[name] = bytes(part)
            old = last.get(name)
            if old is not None and text.get(name) == written:
                held[name] = old
                continue
            row = self._moved(written, old) if old else None
            if row is None:
                relabelled.add(name)
                try:
                    row = self._held(_DECODE(written), old)
                except msgspec.DecodeError:
                    row = None
                if row is None:
                    return self.read(decode_line(line))
            held[name] = row
        sample = _without_samples(top)
        sample.__dict__["samples"] = self._columns.add(held, relabelled)
        self._last, self._text = held, texts
        return sample

    def read(self, data: Any) -> MetricSample:
        """The scrape ``data`` (a parsed line) with what it shares with the last one shared. What does not fit
        the schema is validated as :meth:`MetricSample.model_validate` would, failing as it would."""
        samples = data.get("samples") if isinstance(data, dict) else None
        if not isinstance(samples, dict):
            return MetricSample.model_validate(data)
        held: dict[str, list[Any]] = {}
        for name, entries in samples.items():
            row = self._held(entries, self._last.get(name))
            if row is None:
                return MetricSample.model_validate(data)
            held[name] = row
        sample = MetricSample.model_validate({k: v for k, v in data.items() if k != "samples"})
        sample.__dict__["samples"] = self._columns.add(held, set(held))
        self._last, self._text, self._shape = held, {}, None
        return sample

    @staticmethod
    def _moved(written: bytes, old: list[Any]) -> list[Any] | None:
        """The samples ``written`` as held where they are the last scrape's (``old``) with only values moved: the
        labels as they were, in the same places (the common case, read without a dict per sample); None where
        they are not."""
        try:
            now = _SAMPLES(written)
        except msgspec.DecodeError:
            return None
        if len(now) != len(old) or any(type(e) is not Entry for e in old) \
                or [s.labels for s in now] != [e.labels for e in old]:
            return None
        return [e if s.value == e.value else Entry(e.labels, s.value) for s, e in zip(now, old, strict=True)]

    def _held(self, entries: Any, old: list[Any] | None) -> list[Any] | None:
        """The samples ``entries`` (as parsed) as held, sharing what equals the last scrape's at the same place
        (``old``, where it had as many); None where they are not a list of samples (the schema decides)."""
        if not isinstance(entries, list):
            return None
        kept = old if old is not None and len(old) == len(entries) else ()
        row: list[Any] = []
        for i, entry in enumerate(entries):
            before = kept[i] if kept else None
            if type(entry) is not dict:
                return None
            if len(entry) == 2 and "labels" in entry and "value" in entry:
                labels, value = entry["labels"], entry["value"]
                if type(before) is Entry and before.labels == labels:  # a value moved, its labels did not
                    row.append(before if before.value == value else Entry(before.labels, value))
                    continue
                row.append(Entry(self._label(labels) if type(labels) is dict else labels, value))
            else:  # not a sample as cardgen writes them: kept as it was read
                row.append(before if before is not None and type(before) is not Entry and entry == before
                           else entry)
        return row

    def _label(self, labels: dict[str, Any]) -> dict[str, Any]:
        try:
            key = tuple(labels.items())
            return self._labels.setdefault(key, labels)
        except TypeError:  # a label value that cannot be a key: kept as it is
            return labels


# a sample's value written as a float (a fraction or an exponent: a whole number is JSON's integer, which the
# name-by-name way does not hold in a column, so it is left in the text), after "value": (a label is a string)
_VALUE = re.compile(rb'"value":(-?[0-9]+(?:\.[0-9]+(?:[eE][-+]?[0-9]+)?|[eE][-+]?[0-9]+))')


class _Shape:
    """A line of ``server_metrics.jsonl`` with its numbers cut out (:data:`_VALUE`), where every value of the scrape
    it held went to a column (:class:`_Columns`) and it had no error: a line of the same shape has the same names,
    labels and places, and after its samples only what closes them, so its numbers, in order, are the next row of
    the same segments, and what comes before its samples (its times, an error) is all the rest. What is not sure to
    read as the name-by-name way reads it is not read here (:meth:`read` gives None): another shape, a value
    written as a whole number or as no number (NaN), which leave fewer numbers than the shape has."""

    __slots__ = ("layout", "segments", "skeleton", "width")

    def __init__(self, skeleton: list[bytes], layout: dict[str, _Segment | None], segments: list[_Segment]) -> None:
        self.skeleton, self.layout, self.segments = skeleton, layout, segments
        self.width = sum(s.width for s in segments)

    @staticmethod
    def cut(line: bytes) -> tuple[bytes, list[bytes], list[bytes]] | None:
        """``line``'s text before its samples; its text from its samples on with the numbers cut out; the numbers."""
        at = line.find(b'"samples":')
        if at < 0:
            return None
        parts = _VALUE.split(line)
        skeleton = parts[0::2]
        skeleton[0] = skeleton[0][at:]
        return line[:at], skeleton, parts[1::2]

    @classmethod
    def of(cls, line: bytes, sample: MetricSample) -> _Shape | None:
        """The shape of ``line``, read as ``sample``, when each of its values went to a column (else None)."""
        samples = sample.__dict__.get("samples")
        if type(samples) is not Samples or samples._kept is not None or sample.error is not None:
            return None
        segments = list(samples._layout.values())
        if not segments or any(s is None for s in segments):
            return None
        cut = cls.cut(line)
        if cut is None:
            return None
        shape = cls(cut[1], samples._layout, [s for s in segments if s is not None])
        return shape if len(cut[2]) == shape.width else None

    def read(self, line: bytes, columns: _Columns) -> MetricSample | None:
        """``line`` as the next row of ``columns``, when it has this shape (None: it has not; nothing was read)."""
        cut = self.cut(line)
        if cut is None or cut[1] != self.skeleton or len(cut[2]) != self.width or columns.layout is not self.layout:
            return None
        head = cut[0].rstrip()
        if not head.endswith(b","):
            return None
        try:
            top = _SCRAPE(head[:-1] + b"}")  # its times (and an error), without scanning its samples again
            values = list(map(float, cut[2]))
        except (msgspec.DecodeError, ValueError):
            return None
        sample = _without_samples(top)
        sample.__dict__["samples"] = columns.add_row(self.layout, self.segments, values)
        return sample


class _Segment:
    """The values of one name over consecutive scrapes that gave it the same labels in the same places: a row of
    ``len(labels)`` float64 values per scrape from scrape ``start`` on (8 bytes a value)."""

    __slots__ = ("labels", "start", "values", "width")

    def __init__(self, labels: list[Any], start: int) -> None:
        self.labels, self.start, self.width = labels, start, len(labels)
        self.values = array("d")


class _Columns:
    """The scrapes read so far, a column of values per sample (:class:`_Segment`), each scrape a :class:`Samples`
    view of its row: a long run's scrapes in a tenth of the memory their samples take as objects."""

    def __init__(self) -> None:
        self.count = 0  # scrapes added
        self.current: dict[str, _Segment] = {}  # each name's segment, as the last scrape left it
        self.layout: dict[str, _Segment | None] = {}  # the last scrape's names: their segments (None: held as read)

    def add(self, held: dict[str, list[Any]], relabelled: set[str]) -> Samples:
        """The scrape whose samples are ``held`` (each name's list, as :class:`ScrapeSharer` holds it; the names in
        ``relabelled`` may have other labels than the last scrape's, the others have the same) as a view of its
        row, what fits columns kept there and the rest as it is."""
        row = self.count
        self.count += 1
        current = self.current
        layout: dict[str, _Segment | None] = {}
        kept: dict[str, list[Any]] = {}
        for name, entries in held.items():
            values = [e.value for e in entries] if all(type(e) is Entry for e in entries) else None
            if values is None or not all(type(v) is float for v in values):
                kept[name] = entries
                layout[name] = None
                current.pop(name, None)
                continue
            # a name in ``current`` was held the same way in the last scrape (else it left): its rows run on
            segment = current.get(name)
            if segment is None or (name in relabelled and [e.labels for e in entries] != segment.labels):
                segment = current[name] = _Segment([e.labels for e in entries], row)
            segment.values.extend(values)
            layout[name] = segment
        for name in list(current):
            if name not in held:
                del current[name]
        if layout == self.layout:  # the same segments: one layout for every scrape between changes
            layout = self.layout
        self.layout = layout
        return Samples(layout, row, kept or None)


    def add_row(self, layout: dict[str, _Segment | None], segments: list[_Segment], values: list[float]) -> Samples:
        """The scrape whose samples are all in ``segments`` (the last scrape's, ``layout``: the same names, labels
        and places), ``values`` their values in order, as a view of its row."""
        return Samples(layout, self.append_row(segments, values), None)

    def append_row(self, segments: list[_Segment], values: list[float]) -> int:
        """:meth:`add_row`'s values appended, without the view of them: the row they are."""
        at = 0
        for segment in segments:
            segment.values.extend(values[at:at + segment.width])
            at += segment.width
        row = self.count
        self.count += 1
        return row


class Samples(Mapping[str, list[Any]]):
    """One scrape's samples as a reader holds them (:class:`ScrapeSharer`): ``{name: [sample, ...]}`` read-only,
    each name's samples made (as :class:`Entry`) from its row of values when asked for."""

    __slots__ = ("_kept", "_layout", "_row")

    def __init__(self, layout: dict[str, _Segment | None], row: int, kept: dict[str, list[Any]] | None) -> None:
        self._layout, self._row, self._kept = layout, row, kept

    def __getitem__(self, name: str) -> list[Any]:
        segment = self._layout[name]
        if segment is None:
            assert self._kept is not None
            return self._kept[name]
        w = segment.width
        i = (self._row - segment.start) * w
        return [Entry(labels, value) for labels, value in zip(segment.labels, segment.values[i:i + w], strict=True)]

    def __iter__(self) -> Iterator[str]:
        return iter(self._layout)

    def __len__(self) -> int:
        return len(self._layout)

    def __contains__(self, name: object) -> bool:
        return name in self._layout

    def __repr__(self) -> str:
        return repr(dict(self))


class _Scrape(msgspec.Struct):
    """A line of ``server_metrics.jsonl`` as :meth:`ScrapeSharer.read_line` first reads it: each name's samples
    left as written (unknown fields ignored, as :class:`MetricSample` ignores them; the schema checks the rest)."""

    t: Any = msgspec.UNSET
    t_end: Any = msgspec.UNSET
    error: Any = msgspec.UNSET
    samples: dict[str, msgspec.Raw] | msgspec.UnsetType = msgspec.UNSET


class _Sample(msgspec.Struct, forbid_unknown_fields=True):
    """One sample as cardgen writes it: ``{"labels": {...}, "value": v}`` and nothing else."""

    labels: dict[str, Any]
    value: Any


_SCRAPE = msgspec.json.Decoder(_Scrape).decode


def _without_samples(top: _Scrape) -> MetricSample:
    """The scrape ``top`` (as :data:`_SCRAPE` read it) validated but for its samples, which its reader sets."""
    rest = {"t": top.t, "t_end": top.t_end, "error": top.error}
    return MetricSample.model_validate({k: v for k, v in rest.items() if v is not msgspec.UNSET})
_SAMPLES = msgspec.json.Decoder(list[_Sample]).decode
_DECODE = msgspec.json.Decoder().decode


def decode_line(line: bytes) -> Any:
    """One JSON value from a line of a JSON-lines file: msgspec's decoder (two to four times Python's on a long
    run's files, the same values), Python's where msgspec refuses what Python reads (``NaN``, which a scrape of
    a real server may hold). Raises :class:`json.JSONDecodeError` where neither reads it."""
    try:
        return _DECODE(line)
    except msgspec.DecodeError:
        return json.loads(line)


class LoadgenSample(Saved):
    """The load generator measuring itself: event-loop lag and CPU, every ``interval`` seconds, per process."""

    t: float
    worker: str = "local"
    loop_lag_s: float  # how late a sleep(interval) woke up
    cpu_percent: float | None = None  # this process, 100 = one core
    in_flight: int = 0


def metric_line(sample: MetricSample) -> str:
    """One line of ``server_metrics.jsonl``: the scrape as compact JSON, unset fields left out."""
    fields = {"t": sample.t, "t_end": sample.t_end, "error": sample.error, "samples": sample.samples}
    return json.dumps({k: v for k, v in fields.items() if v is not None}, separators=(",", ":"),
                      default=_as_json) + "\n"
