"""Which points to measure first: the few that identify the server, each for what it tells the fit.

The step of the fitted server has four free constants (:mod:`cardgen.calibrated.perf`); each measured point
below pins one or two of them down, from the suite's own points where it has one (it is then a measured point of
the card), at the cheapest output length that is mostly decode (the one nearest :data:`DECODE_OUTPUT` of at
least :data:`MIN_DECODE_OUTPUT` tokens):

- the ingestion sweep: single requests of growing prompts, one output token. The slope of TTFT against prompt
  tokens is the compute rate (long prefills are compute-bound); its intercept, the fixed cost of a step plus one
  read of the weights. A suite without one gets a short sweep of its own.
- decode alone: the shortest prompt, fewest parallel requests. Each step reads the weights once and serves one
  sequence: the memory bandwidth and the step overhead, together.
- decode batched: the shortest prompt at a larger count (the largest up to :data:`BATCH_PARALLEL` that is not the
  pair's largest, which a spot check keeps for itself). The step grows with the sequences in it: the
  per-sequence overhead, apart from the bandwidth.
- decode over long contexts: the longest prompt at a few parallel requests (the largest up to
  :data:`CONTEXT_PARALLEL`, not the pair's largest). Each step also reads every sequence's KV cache: the
  bandwidth, apart from the step overhead; and prefills that interrupt decodes.
- the headline point (10 parallel, 1024 prompt / 128 output tokens) when the suite has it: the card's headline
  figure is measured, never predicted.
- the first point of a kind that says it must be measured (``Kind.measured_when``): a probe of the KV
  cache's capacity, when the server does not declare it (the fit does not model the capacity: it reads it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from cardgen.analysis.analyse import HEADLINE_POINT
from cardgen.kinds import GENERATION, INGESTION, KINDS, gives, kind_of, of_kind
from cardgen.points import Point
from cardgen.schemas.calibration import IdentifyPoint

DECODE_OUTPUT = 128
MIN_DECODE_OUTPUT = 64
BATCH_PARALLEL = 16
CONTEXT_PARALLEL = 4
PROBE_PREFIX = "calibrate-"  # the name of a point the suite does not have, measured to identify the server


@dataclass(frozen=True)
class Chosen:
    point: Point
    why: str
    in_suite: bool = True

    def described(self) -> IdentifyPoint:
        return IdentifyPoint(name=self.point.name, why=self.why, in_suite=self.in_suite)


def _decode_output(outputs: Sequence[int]) -> int:
    long_enough = [o for o in outputs if o >= MIN_DECODE_OUTPUT]
    if not long_enough:
        return max(outputs)
    return min(long_enough, key=lambda o: (abs(math.log(o / DECODE_OUTPUT)), o))


def _below(counts: Sequence[int], limit: int) -> int | None:
    """The largest count up to ``limit`` that is not the largest of all (a spot check's), else None."""
    top = max(counts)
    eligible = [c for c in counts if c <= limit and c < top]
    return max(eligible) if eligible else None


def probe_ingest(points: Sequence[Point], max_model_len: int) -> Point | None:
    """A short ingestion sweep for a suite that has none: 8 prompt lengths from 16 tokens to 4,000 (or half the
    served context), one output token, made by an installed kind that gives the ingestion headline (None where none is installed)."""
    sweep = next((k for k in KINDS.values() if INGESTION in k.headlines and k.with_lengths is not None), None)
    if sweep is None or sweep.with_lengths is None:
        return None
    base = points[0]
    top = max(32, min(4000, max_model_len // 2))
    lengths = tuple(sorted({round(16 + (top - 16) * i / 7) for i in range(8)}))
    return Point(name=f"{PROBE_PREFIX}ingest", group=f"{PROBE_PREFIX}ingest", endpoint=base.endpoint,
                 timeout_s=base.timeout_s, output_tokens=1, params=sweep.with_lengths(None, lengths))


def choose(points: Sequence[Point], *, kv_declared: bool, max_model_len: int) -> list[Chosen]:
    """The points to measure first (see the module docstring), in suite order (a probe first)."""
    chosen: dict[str, Chosen] = {}
    ingest = next((p for p in points if p.measures_prefill), None)
    why_ingest = ("prompt ingestion: TTFT against prompt tokens; its slope is the compute rate, its intercept the "
                  "fixed cost of a step and one read of the weights")
    probe = None
    if ingest is not None:
        chosen[ingest.name] = Chosen(ingest, why_ingest)
    elif points and (made := probe_ingest(points, max_model_len)) is not None:
        probe = Chosen(made, why_ingest + " (a sweep the suite does not have)", in_suite=False)
    closed = [p for p in points if gives(p, GENERATION) and p.parallel]
    if closed:
        out = _decode_output(sorted({p.output_tokens for p in closed}))
        with_out = [p for p in closed if p.output_tokens == out]
        prompts = sorted({p.prompt_tokens for p in with_out})

        def pick(prompt: int, parallel: int | None, why: str) -> None:
            match = next((p for p in with_out if p.prompt_tokens == prompt and p.parallel == parallel), None)
            if match is not None and match.name not in chosen:
                chosen[match.name] = Chosen(match, why)

        def counts(prompt: int) -> list[int]:
            return sorted(p.parallel or 1 for p in with_out if p.prompt_tokens == prompt)

        short, long = prompts[0], prompts[-1]
        pick(short, counts(short)[0], "decode alone: each step reads the weights once for one sequence (the memory "
             "bandwidth and the step overhead)")
        pick(short, _below(counts(short), BATCH_PARALLEL), "decode batched: the step grows with its sequences (the "
             "per-sequence overhead, apart from the bandwidth)")
        if long != short:
            pick(long, _below(counts(long), CONTEXT_PARALLEL), "decode over long contexts: each step also reads every "
                 "sequence's KV cache (the bandwidth, apart from the step overhead), and prefills interrupt decodes")
    headline = next((p for p in closed if p.parallel == HEADLINE_POINT["parallel"]
                     and p.prompt_tokens == HEADLINE_POINT["prompt_tokens"]
                     and p.output_tokens == HEADLINE_POINT["output_tokens"]), None)
    if headline is not None and headline.name not in chosen:
        chosen[headline.name] = Chosen(headline, "the card's headline point: measured, never predicted")
    for name in dict.fromkeys(p.kind for p in points):  # each kind's first point, where its kind says to measure it
        why = kind_of(name).measured_when(kv_declared)
        first = of_kind(name, points)[0]
        if why is not None and first.name not in chosen:
            chosen[first.name] = Chosen(first, why)
    order = {p.name: i for i, p in enumerate(points)}
    picked = sorted(chosen.values(), key=lambda c: order[c.point.name])
    return ([probe] if probe is not None else []) + picked
