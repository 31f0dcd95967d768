"""Where the fit begins: the starting engine profile on the named GPU, scaled to two measurements.

The starting profile may be orders of magnitude away from the server (an A100 profile for vLLM's CPU build),
and where a constant does not show at the starting values (a decode step that is all overhead leaves the
bandwidth without a gradient) a local fit would leave it there. Two measurements put every constant within a
factor of a few first:

- the ingestion sweep's slope (seconds per prompt token, least squares over its median TTFTs) gives the compute
  rate: the architecture's FLOPs per prompt token / the slope;
- what the line's intercept leaves beyond a one-token step is the request overhead;
- the decode-alone point's step (1 / its median speed from start: output tokens / E2E latency, which a stream
  delivered in bursts leaves intact, where TTFT and decode speed may not) is split between reading memory (the
  bandwidth) and the fixed costs (step and per-sequence overheads, scaled together). One point cannot tell how:
  the split is tried as the profile makes it and at each share of :data:`MEMORY_SHARES` (an A100 profile puts a tiny model's decode step at
  nearly all overhead, where vLLM's CPU build spends half of it reading weights and KV cache; starting from the
  profile's split, the bandwidth had no gradient and stayed three orders of magnitude off).

The fit starts from the candidate that fits the measurements best, and its prior is centred there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from cardgen.calibrated.figures import INGEST_FIGURE
from cardgen.calibrated.perf import NAMES, Constants, FittedPerf
from cardgen.calibrated.settings import ServerSettings
from cardgen.kinds import GENERATION, gives
from cardgen.points import Point
from cardgen.sim.perf import SeqWork
from cardgen.sim.roofline import RooflinePerf

_PREFIX = INGEST_FIGURE.split("{")[0]
MEMORY_SHARES = (0.1, 0.5, 0.9)


def ingest_slope(figures: Mapping[str, float]) -> tuple[float, float, float] | None:
    """Least-squares slope (s / token) of an ingestion sweep's median TTFTs, its median length and its
    intercept (s)."""
    pairs = sorted((int(k[len(_PREFIX):]), v) for k, v in figures.items() if k.startswith(_PREFIX))
    if len(pairs) < 3:
        return None
    n = np.array([p[0] for p in pairs], dtype=float)
    t = np.array([p[1] for p in pairs], dtype=float)
    slope, intercept = (float(x) for x in np.polyfit(n, t, 1))
    return (slope, float(np.median(n)), intercept) if slope > 0 else None


def initial_constants(shape: RooflinePerf, start: Constants, settings: ServerSettings, points: Sequence[Point],
                      measured: Mapping[str, Mapping[str, float]]) -> list[Constants]:
    """``start`` scaled to the measurements (see the module docstring), once per split of the decode step in
    :data:`MEMORY_SHARES`; a measurement missing leaves its constants as they were."""
    values = dict(zip(NAMES, start.values, strict=True))
    ingest = next((p for p in points if p.measures_prefill and p.name in measured), None)
    fitted = ingest_slope(measured[ingest.name]) if ingest is not None else None
    if fitted is not None:
        slope, length, intercept = fitted
        n = max(1, int(length))
        values["compute_flop_s"] = shape.cost([SeqWork(n, 0)], []).flops / n / slope
    closed = sorted((p for p in points if gives(p, GENERATION) and p.name in measured
                     and measured[p.name].get("speed_from_start_tok_s")),
                    key=lambda p: (p.parallel or 1, p.prompt_tokens))
    candidates = [dict(values)]
    if closed:
        p = closed[0]
        step = 1.0 / measured[p.name]["speed_from_start_tok_s"]
        decode = [SeqWork(1, p.prompt_tokens + p.output_tokens // 2) for _ in range(p.parallel or 1)]
        cost = shape.cost([], decode)
        fixed = values["step_overhead_s"] + values["per_seq_overhead_s"] * len(decode)
        modelled = FittedPerf(shape, Constants(tuple(values[n] for n in NAMES)), settings).step_time_s([], decode)
        factor = step / modelled  # the profile's own split, scaled
        scaled = dict(values)
        scaled["bandwidth_byte_s"] /= factor
        scaled["step_overhead_s"] *= factor
        scaled["per_seq_overhead_s"] *= factor
        candidates = [scaled]
        for share in MEMORY_SHARES:  # the step's time reading memory; the fixed costs take the rest
            c = dict(values)
            c["bandwidth_byte_s"] = cost.bytes / (share * step)
            scale = (1 - share) * step / fixed
            c["step_overhead_s"] *= scale
            c["per_seq_overhead_s"] *= scale
            candidates.append(c)
    out = []
    for c in candidates:
        if fitted is not None:  # what the line's intercept leaves beyond a one-token step
            model = FittedPerf(shape, Constants(tuple(c[n] for n in NAMES)), settings)
            c["request_overhead_s"] = max(1e-4, fitted[2] - model.step_time_s([SeqWork(1, 0)], []))
        out.append(Constants(tuple(c[n] for n in NAMES)))
    return out
