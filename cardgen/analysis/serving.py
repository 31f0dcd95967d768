"""vLLM's nightly serving table for the points that drew their requests from a dataset (seed 003's layout),
and the lengths those requests actually had (pure).

The table has exactly the nightly benchmark's columns, in its order (:data:`NIGHTLY_COLUMNS`), one row per
rate, named as the nightly names its tests (``<suite entry>_qps_01`` ... ``_qps_inf``). Its figures are the
open-loop scenario's (``cardgen.analysis.scenarios``), whose definitions are vLLM's ``calculate_metrics``:
requests/s and tokens/s over the point's duration (first send to last completion), total = prompt + output
tokens (the server's ``usage``), TTFT, TPOT = (E2E - TTFT) / (output tokens - 1) per request, ITL = every gap
between text chunks, pooled; mean, median and p99 by ``numpy.percentile`` (linear), in ms.

:func:`nightly_json` is the nightly's JSON: ``{"latency": {}, "throughput": {}, "serving": {column: {"0": v,
...}}}``, so ``pd.DataFrame.from_dict(json.loads(text)["serving"])`` loads it as the nightly's page says.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from cardgen.kinds.entry import SamplingParams
from cardgen.points import Point
from cardgen.schemas.run import RunInfo
from cardgen.schemas.summary import ScenarioSummary

NIGHTLY_COLUMNS = (
    "Test name", "GPU", "# of req.", "Tput (req/s)", "Output Tput (tok/s)", "Total Tput (tok/s)",
    "Mean TTFT (ms)", "Median TTFT (ms)", "P99 TTFT (ms)", "Mean TPOT (ms)", "Median TPOT (ms)", "P99 TPOT (ms)",
    "Mean ITL (ms)", "Median ITL (ms)", "P99 ITL (ms)",
)
NIGHTLY_JSON = "nightly_serving.json"
#: bins of the length histogram, in tokens: [0, 8), [8, 16) ... [1024, 2048), [2048, inf)
LENGTH_EDGES = (0, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)


@dataclass(frozen=True)
class DatasetGroup:
    """The points of one suite entry that drew their requests from a dataset."""

    group: str
    dataset: str
    num_requests: int
    seed: int
    endpoint: str
    points: tuple[str, ...]  # names, in run order
    rates: tuple[float, ...]


def dataset_groups(points: Iterable[Point]) -> list[DatasetGroup]:
    """The run's dataset entries, from the points of the suite it ran (run.json's ``suite_spec``, expanded)."""
    groups: dict[str, list[Point]] = {}
    for point in points:
        if point.dataset is not None and point.rate_rps is not None:  # a dataset's sample at an arrival rate
            groups.setdefault(point.group, []).append(point)
    samples = {g: ps[0].params_as(SamplingParams) for g, ps in groups.items()}
    return [DatasetGroup(group=g, dataset=ps[0].dataset or "", num_requests=samples[g].num_requests,
                         seed=samples[g].seed, endpoint=ps[0].endpoint, points=tuple(p.name for p in ps),
                         rates=tuple(p.rate_rps if p.rate_rps is not None else math.inf for p in ps))
            for g, ps in groups.items()]


def nightly_test_name(group: str, rate: float) -> str:
    """The nightly's name of a rate's test: ``<group>_qps_01``, ``_qps_16``, ``_qps_inf``, ``_qps_2.5``."""
    if math.isinf(rate):
        label = "inf"
    elif float(rate).is_integer():
        label = f"{int(rate):02d}"
    else:
        label = f"{rate:g}"
    return f"{group}_qps_{label}"


def gpu_label(info: RunInfo) -> str:
    """The GPU column: ``<name> x <count>`` as the nightly writes it; ``(modelled)`` for the virtual server."""
    gpu = info.gpu
    if not gpu.name:
        return "no GPU seen"
    label = f"{gpu.name} x {gpu.count}" if gpu.count else gpu.name
    return f"{label} (modelled)" if info.modelled or gpu.modelled else label


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1000


def nightly_serving_table(scenarios: Sequence[ScenarioSummary], info: RunInfo,
                          groups: Sequence[DatasetGroup]) -> pd.DataFrame:
    """Seed 003's table: one row per rate of every dataset entry (``groups``) that sent requests, its columns
    exactly."""
    by_name = {s.scenario: s for s in scenarios}
    gpu = gpu_label(info)
    rows = []
    for group in groups:
        for name, rate in zip(group.points, group.rates, strict=True):
            s = by_name.get(name)
            if s is None or s.requests == 0:
                continue
            row: dict[str, object] = {
                "Test name": nightly_test_name(group.group, rate), "GPU": gpu, "# of req.": s.requests - s.failed,
                "Tput (req/s)": s.req_s, "Output Tput (tok/s)": s.output_tok_s, "Total Tput (tok/s)": s.total_tok_s,
            }
            for label, dist in (("TTFT", s.ttft_s), ("TPOT", s.tpot_s), ("ITL", s.itl_s)):
                row[f"Mean {label} (ms)"] = _ms(dist.mean)
                row[f"Median {label} (ms)"] = _ms(dist.p50)
                row[f"P99 {label} (ms)"] = _ms(dist.p99)
            rows.append(row)
    return pd.DataFrame(rows, columns=list(NIGHTLY_COLUMNS))


def nightly_json(table: pd.DataFrame) -> str:
    """The nightly's JSON of the serving table (module docstring); NaN as null."""
    serving = json.loads(table.to_json(orient="columns", double_precision=10)) if not table.empty else {}
    return json.dumps({"latency": {}, "throughput": {}, "serving": serving})


@dataclass(frozen=True)
class LengthHistogram:
    """How many requests had a prompt / an output in each bin of :data:`LENGTH_EDGES` (the server's
    ``usage`` counts of the requests that succeeded), with mean, median, p99 and extremes."""

    requests: int
    bins: list[str]
    prompts: list[int]
    outputs: list[int]
    prompt_stats: dict[str, float] = field(default_factory=dict)
    output_stats: dict[str, float] = field(default_factory=dict)


def _bins() -> list[str]:
    edges = list(LENGTH_EDGES)
    return [f"{lo}–{hi - 1}" for lo, hi in zip(edges, edges[1:], strict=False)] + [f"{edges[-1]}+"]


def _stats(x: np.ndarray) -> dict[str, float]:
    return {"mean": float(x.mean()), "median": float(np.median(x)), "p99": float(np.percentile(x, 99)),
            "min": float(x.min()), "max": float(x.max())}


def sent_lengths(requests: pd.DataFrame, scenarios: Sequence[str]) -> LengthHistogram | None:
    """The prompt and output lengths of the successful requests of ``scenarios`` (None when there is none)."""
    if requests.empty:
        return None
    rows = requests[requests["scenario"].isin(list(scenarios)) & requests["ok"]]
    prompts = rows["prompt_tokens"].to_numpy(dtype=float)
    outputs = rows["output_tokens"].to_numpy(dtype=float)
    prompts, outputs = prompts[np.isfinite(prompts)], outputs[np.isfinite(outputs)]
    if not len(prompts) or not len(outputs):
        return None
    edges = [*LENGTH_EDGES, math.inf]

    def counts(x: np.ndarray) -> list[int]:
        return [int(((x >= lo) & (x < hi)).sum()) for lo, hi in zip(edges, edges[1:], strict=False)]

    return LengthHistogram(requests=len(rows), bins=_bins(), prompts=counts(prompts), outputs=counts(outputs),
                           prompt_stats=_stats(prompts), output_stats=_stats(outputs))
