"""A measured point in words, as several tables print it: the precision it reached, why it stopped, which
requests its figures come from."""

from __future__ import annotations

from collections.abc import Sequence

from cardgen import numbers as fmt
from cardgen.kinds import kind_of
from cardgen.saturation import saturation_words, skip_words
from cardgen.schemas.summary import ScenarioSummary


def precision_text(x: ScenarioSummary) -> str:
    """The precision a point reached, e.g. ``±1.8 % / ±2.4 %`` (closed loop: speed from start / TTFT),
    ``±0.9 % (slope)``, ``±0.5 % (mean decode)``; with its target when it had one."""
    kind = kind_of(x)
    reached = [getattr(x.precision, f) for f in kind.precision] if x.precision is not None else []
    text = (" / ".join(fmt.half_width(r) for r in reached) + kind.precision_note
            if any(r is not None for r in reached) else fmt.DASH)
    if x.target_ci is not None:
        text += f"; target {fmt.half_width(x.target_ci)}"
    return text


def load_text(x: ScenarioSummary) -> str:
    """A point's load in words: ``10 parallel``, ``2 req/s``, ``all at once``, ``up to 32 at once``, ``one at a
    time`` (:attr:`cardgen.kinds.Kind.load_words`)."""
    rate = "all at once" if x.all_at_once else "trace replay" if x.replay else f"{x.rate_label} req/s"
    return kind_of(x).load_words.format(parallel=x.parallel, rate=rate)


def _saturated_by(x: ScenarioSummary, scenarios: Sequence[ScenarioSummary]) -> ScenarioSummary | None:
    """The point of the same kind, suite entry and pair, with fewer users, that saturated the server (a kind that
    watches saturation: ``Kind.watch_saturation``)."""
    smaller = [o for o in scenarios if kind_of(o).watch_saturation and kind_of(o) is kind_of(x) and o.saturation
               and o.group == x.group
               and (o.prompt_tokens, o.output_tokens) == (x.prompt_tokens, x.output_tokens)
               and (o.parallel or 0) < (x.parallel or 0)]
    return min(smaller, key=lambda o: o.parallel or 0) if smaller else None


def _first_of_pair(x: ScenarioSummary, scenarios: Sequence[ScenarioSummary]) -> bool:
    """Whether no point of the same kind, entry and pair with fewer users ran before ``x``."""
    return not any(kind_of(o) is kind_of(x) and o.requests and o.group == x.group and (o.parallel or 0) < (x.parallel or 0)
                   and (o.prompt_tokens, o.output_tokens) == (x.prompt_tokens, x.output_tokens) for o in scenarios)


def stop_text(x: ScenarioSummary, scenarios: Sequence[ScenarioSummary] = ()) -> str:
    """Why a point stopped, in words: run.json's reason and detail. A skipped point: "not run: the server
    saturated at N parallel (why)" (or was slow per request already at its smallest count:
    :func:`cardgen.saturation.skip_words`); a point never reached: "not run"."""
    if x.requests == 0 and x.stop in (None, "skipped"):
        by = _saturated_by(x, scenarios) if x.stop else None
        if by is not None and by.saturation:
            return skip_words(by.parallel or 1, by.saturation, first=_first_of_pair(by, scenarios))
        detail = (x.stop_detail or "").removeprefix("not run: ")
        return f"not run: {detail}" if detail else "not run"
    text = x.stop or fmt.DASH
    if x.stop_detail and x.stop_detail != x.stop:
        text += f": {x.stop_detail}"
    if x.saturation and x.saturation not in text:
        words = saturation_words(x.parallel or 1, x.saturation, first=_first_of_pair(x, scenarios))
        text += f"; {words}" if "not saturated" in words else f"; saturated the server ({x.saturation})"
    return text


def steady_text(x: ScenarioSummary) -> str:
    """The requests a closed-loop point's figures come from: its steady ones, or all when it was too short."""
    if x.steady_state is None:
        return fmt.DASH
    return str(x.steady_requests) if x.steady_state else "too short: all"


def ramp_drain_text(x: ScenarioSummary) -> str:
    """How many requests a closed-loop point left out as ramp and drain (scenario table)."""
    if x.steady_state is None:
        return fmt.DASH
    return str(x.ramp_drain_requests) if x.steady_state else "0 (too short)"


def basis_mark(x: ScenarioSummary) -> str:
    """`` (predicted)`` after a calibrated run's predicted point (cardgen.calibrated); nothing for a measured one."""
    return " (predicted)" if x.basis == "predicted" else ""
