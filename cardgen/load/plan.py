"""Expand a suite into points: the unit the load engine runs, one after another.

A point is plain data (a dict-able dataclass) so it can travel to Locust workers over msgpack.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from cardgen.suite import BatchSweep, ClosedLoop, Ingest, OpenLoop, Suite, Waves


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
    # open
    num_requests: int = 0
    seed: int = 0
    # waves
    max_wave: int = 0
    step: int = 1
    stop_at_saturation: bool = True
    # ingest
    lengths: list[int] = field(default_factory=list)
    repeats: int = 1
    # batch
    warmups: int = 0
    runs: int = 0

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
        return 0

    def prompt_lengths(self) -> list[int]:
        return list(self.lengths) if self.kind == "ingest" else [self.prompt_tokens]


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
                            min_duration_s=entry.min_duration_s, max_duration_s=entry.max_duration_s, **common))
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
                step=entry.step, stop_at_saturation=entry.stop_at_saturation, **common))
        elif isinstance(entry, Ingest):
            points.append(Point(
                name="ingest", kind="ingest", group=group,
                output_tokens=entry.output_tokens, lengths=entry.lengths(), repeats=entry.repeats, **common))
        elif isinstance(entry, BatchSweep):
            for b in entry.batch_sizes:
                points.append(Point(
                    name=f"batch-in{entry.prompt_tokens}-out{entry.output_tokens}-b{b}", kind="batch", group=group,
                    prompt_tokens=entry.prompt_tokens, output_tokens=entry.output_tokens, parallel=b,
                    warmups=entry.warmups, runs=entry.runs, **common))
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
