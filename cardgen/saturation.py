"""When the server is saturated: the one rule the load runner, the virtual-time driver and the card share.

A closed-loop point saturates the server when, during the point, the KV cache is (nearly) full, a request
was preempted, requests were left waiting (in at least half of the server's readings, and in two of them at
least: all users' prompts arriving in the same instant wait a step or two for the per-step token budget, and
one reading of a short point can catch a request between two steps, neither of which is saturation), or the
median request's speed from start fell below the speed a user still accepts; requests left waiting are no sign
where the point's kind makes the queue large on purpose (:attr:`cardgen.kinds.Kind.by_design`). The larger
parallel counts of the same prompt/output pair then measure only queueing, so a suite with ``stop_at_saturation``
does not run them (the card lists them as not run).

A watched stretch of a point (a program's ``Watch`` .. ``EndWatch``: a group of requests sent at once, say)
saturates the server when a request was preempted, or requests waited while the KV cache was nearly full: waiting
alone may be ``max_num_seqs``, not the cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MAX_KV_USAGE = 0.95  # the analysis' default capacity bound (AnalysisOptions.max_kv_usage)
MIN_SPEED_TOK_S = 20.0  # the analysis' default slowest acceptable speed (AnalysisOptions.min_speed_tok_s)
PERSISTENT_WAITING = 0.5  # requests waiting in at least this share of readings are "left waiting"
MIN_WAITING_READINGS = 2  # ... and in at least this many: one reading is a request caught between two steps
# requests that queue while the KV cache is less full than this wait for something other than the cache
WATCHED_FULL_USAGE = 0.9


@dataclass(frozen=True, kw_only=True)
class LoadSeen:
    """What the server's gauges and the point's requests showed while the point ran (None: not known)."""

    kv_usage_max: float | None = None
    preemptions: float | None = None  # the increase of the server's preemption counter
    waiting_max: float | None = None
    waiting_fraction: float | None = None  # the share of readings with a request waiting (None: count waiting_max)
    waiting_readings: int | None = None  # how many readings saw a request waiting
    median_speed_tok_s: float | None = None


def slow_only(saturation: str | None) -> bool:
    """Whether :func:`point_saturation`'s words say only that the median request was slow: nothing was full,
    preempted or waiting."""
    return saturation is not None and saturation.startswith("median speed") and ";" not in saturation


def saturation_words(parallel: int, saturation: str, *, first: bool) -> str:
    """What a closed-loop point that :func:`point_saturation` flagged means: the server saturated at ``parallel``;
    or, when the only reason is speed at the pair's smallest count (``first``), that the server is slow per
    request, which is not saturation."""
    if first and slow_only(saturation):
        speed = saturation.split(" below ")[0]
        return (f"below {MIN_SPEED_TOK_S:g} tok/s per request already at {parallel} parallel ({speed}): the server is "
                "slow per request, not saturated")
    return f"the server saturated at {parallel} parallel ({saturation})"


def skip_words(parallel: int, saturation: str, *, first: bool) -> str:
    """Why the larger counts of a pair are not run after the point at ``parallel`` (:func:`saturation_words`)."""
    words = saturation_words(parallel, saturation, first=first)
    if first and slow_only(saturation):
        return f"not run: {words} (skipped for that reason; --run-saturated runs them)"
    return f"not run: {words}"


@dataclass(frozen=True)
class Reading:
    """How loaded the server was at one reading of its gauges (None: not exposed)."""

    t: float
    usage: float | None  # KV cache, 0..1
    waiting: float | None  # requests waiting
    preemptions: float | None  # the preemption counter (cumulative)


def closed_load_seen(readings: Sequence[Reading], *, started: float, ended: float, first_round_end: float | None,
                     median_speed_tok_s: float | None) -> LoadSeen:
    """What the server showed during a closed-loop point (readings from ``started`` to ``ended``): the most KV
    usage, the increase of the preemption counter, and how often requests waited after the first round ended
    (``first_round_end``: the ramp's prefills queue by construction), with the median speed from start."""
    inside = [r for r in readings if started <= r.t <= ended]
    before = [r for r in readings if r.t < started]
    usage = [r.usage for r in inside if r.usage is not None]
    preemptions = None
    counters = [r.preemptions for r in inside if r.preemptions is not None]
    if counters:
        base = before[-1].preemptions if before and before[-1].preemptions is not None else counters[0]
        preemptions = max(counters[-1] - base, 0.0)
    waiting_max = waiting_fraction = waiting_readings = None
    if first_round_end is not None:
        after = [r.waiting for r in inside if r.t >= first_round_end and r.waiting is not None]
        if after:
            waiting_max = max(after)
            waiting_readings = sum(1 for w in after if w > 0)
            waiting_fraction = waiting_readings / len(after)
    return LoadSeen(kv_usage_max=max(usage) if usage else None, preemptions=preemptions, waiting_max=waiting_max,
                    waiting_fraction=waiting_fraction, waiting_readings=waiting_readings,
                    median_speed_tok_s=median_speed_tok_s)


def point_saturation(seen: LoadSeen, *, max_kv_usage: float = MAX_KV_USAGE, min_speed_tok_s: float = MIN_SPEED_TOK_S,
                     by_design: frozenset[str] = frozenset()) -> str | None:
    """Why a closed-loop point saturated the server, in words; None when it did not (or nothing is known).
    ``by_design``: what the point's kind makes large on purpose (its ``Kind.by_design``): with ``"queue"``,
    requests left waiting are its load, not a sign."""
    reasons = []
    if seen.kv_usage_max is not None and seen.kv_usage_max >= max_kv_usage:
        reasons.append(f"KV cache {seen.kv_usage_max:.0%} full")
    if seen.preemptions:
        reasons.append(f"{seen.preemptions:g} preemptions")
    persistent = seen.waiting_fraction is None or (seen.waiting_fraction >= PERSISTENT_WAITING
                                                   and (seen.waiting_readings or 0) >= MIN_WAITING_READINGS)
    if seen.waiting_max and persistent and "queue" not in by_design:
        share = "" if seen.waiting_fraction is None else f" in {seen.waiting_fraction:.0%} of readings"
        reasons.append(f"up to {seen.waiting_max:g} requests waiting{share}")
    if seen.median_speed_tok_s is not None and seen.median_speed_tok_s < min_speed_tok_s:
        reasons.append(f"median speed {seen.median_speed_tok_s:.1f} tok/s below {min_speed_tok_s:g}")
    return "; ".join(reasons) or None


def watched_saturated(*, preempted: bool, waiting: float | None, kv_usage: float | None,
                      queued_for_kv: bool = False, slot_bound: bool = False) -> bool:
    """Whether one reading while the server is watched shows saturation (see the module's docstring).
    ``queued_for_kv`` is a driver that knows directly that a request waited for KV blocks (the virtual server);
    ``slot_bound`` a server that runs a fixed number of requests at once and says nothing of its KV usage
    (llama.cpp's slots): a request waiting there waits for a slot, and more requests would only queue longer."""
    if preempted or queued_for_kv:
        return True
    if slot_bound and kv_usage is None:
        return bool(waiting)
    return bool(waiting) and kv_usage is not None and kv_usage >= WATCHED_FULL_USAGE
