"""The controller: one sequence of a run's points for every interpreter.

It runs the points one after another on an :class:`Interpreter` (the load engine in real time, or the
virtual-time driver) and says how each ended, as ``run.json`` records it (:class:`PointOutcome`):

- every point gets a :class:`~cardgen.kinds.program.Judge` that takes its records from every process as
  they end; a closed loop's judge finds it precise, and the interpreter then tells every process to stop;
- why a point stopped is what its processes said (the first, in :data:`STOP_ORDER`, that any said), in the
  judge's words where it has them;
- a closed-loop point saturated the server (:func:`cardgen.saturation.point_saturation`) when the server's
  readings during it or its median speed say so; the larger counts of its prompt/output pair
  (:func:`skips_after_saturation`) are then not run, unless ``run_saturated``;
- a point is run as its ``attempts`` entry says (``cardgen resume`` reruns a cut-off point as attempt 1, 2 ...);
- a point that was cut off ends the sequence: it is reported ``interrupted``, no later point follows.

The controller never reads a clock: the interpreter says when each point started and ended, on its own clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from cardgen.errors import one_line
from cardgen.kinds import judge_for, kind_of
from cardgen.kinds.program import Judge, Said
from cardgen.points import Point
from cardgen.saturation import Reading, closed_load_seen, point_saturation, skip_words
from cardgen.schemas.run import PointOutcome
from cardgen.stops import (
    STOP_COMPLETE,
    STOP_INTERRUPTED,
    STOP_MAX_DURATION,
    STOP_MAX_REQUESTS,
    STOP_MINIMUM,
    STOP_PRECISION,
    STOP_SATURATED,
    STOP_SKIPPED,
)

# the reason a point stopped when its processes say different things: the first of these that any says (a
# process that had nothing to do says "complete")
STOP_ORDER = (STOP_INTERRUPTED, STOP_SATURATED, STOP_MAX_DURATION, STOP_MAX_REQUESTS, STOP_PRECISION, STOP_MINIMUM,
              STOP_COMPLETE)


@dataclass(frozen=True, kw_only=True)
class Ran:
    """A point as an interpreter ran it: when (its clock's Unix seconds), what each process said, and why it was
    cut off (None: it ended)."""

    started_unix: float
    ended_unix: float
    said: Sequence[Said] = ()
    cut_off: str | None = None


class Interpreter(Protocol):
    """What runs the points' programs: sends their requests, tells them what happened, feeds the judge."""

    def run_point(self, point: Point, *, attempt: int, judge: Judge, started: Callable[[float], None]) -> Ran:
        """Run ``point`` to its end (or until cut off): every process's program, each record to ``judge``
        (whose verdict stops every process); ``started(unix)`` once the point starts."""
        ...

    def readings(self, started: float, ended: float) -> Sequence[Reading]:
        """The server's gauges as read from ``started`` to ``ended`` (and the last reading before)."""
        ...


@dataclass
class Sequenced:
    """How the points went: every point of the plan that ended, in order (run, skipped, or the one cut off)."""

    points: list[PointOutcome] = field(default_factory=list)
    cut_off: bool = False


def stops_at_saturation(point: Point) -> bool:
    """Whether ``point``'s saturating the server skips the larger counts of its pair (its kind watches saturation
    and says so of the point)."""
    kind = kind_of(point)
    return kind.watch_saturation and kind.skip_after_saturation(point)


def skips_after_saturation(point: Point, later: Point) -> bool:
    """Whether ``later`` is not run once ``point`` saturated the server (when ``point`` stops at saturation): a
    point of the same kind, suite entry and prompt/output pair with more parallel users, which would measure only
    queueing."""
    return (stops_at_saturation(point) and kind_of(later) is kind_of(point) and point.group == later.group
            and point.endpoint == later.endpoint and point.prompt_tokens == later.prompt_tokens
            and point.output_tokens == later.output_tokens and (later.parallel or 1) > (point.parallel or 1))


def said_stop(said: Sequence[Said]) -> Said | None:
    """The point's stop from what its processes said: the first in :data:`STOP_ORDER`, with words if any."""
    told = [s for s in said if s.stop is not None]
    return min(told, key=lambda s: (STOP_ORDER.index(s.stop) if s.stop in STOP_ORDER else len(STOP_ORDER),
                                    s.detail is None), default=None)


def run_points(points: Sequence[Point], interpreter: Interpreter, *, attempts: Mapping[str, int] | None = None,
               run_saturated: bool = False, on_start: Callable[[Point, PointOutcome], None] | None = None,
               on_end: Callable[[Point, PointOutcome], None] | None = None) -> Sequenced:
    """Run ``points`` in order on ``interpreter``; ``on_start`` / ``on_end`` hear of every point as it starts
    and ends (skipped and cut-off points included)."""
    attempts = attempts or {}
    result = Sequenced()
    skipped: dict[str, str] = {}

    def ended(point: Point, outcome: PointOutcome) -> None:
        result.points.append(outcome)
        if on_end is not None:
            on_end(point, outcome)

    for i, point in enumerate(points):
        attempt = attempts.get(point.name, 0)
        if point.name in skipped:
            ended(point, PointOutcome(name=point.name, kind=point.kind, stop=STOP_SKIPPED, detail=skipped[point.name],
                                      attempt=attempt))
            continue
        judge = judge_for(point)
        begun = PointOutcome(name=point.name, kind=point.kind, attempt=attempt)

        def started(unix: float, point: Point = point) -> None:
            nonlocal begun
            begun = begun.model_copy(update={"started_unix": unix})
            if on_start is not None:
                on_start(point, begun)

        try:
            ran = interpreter.run_point(point, attempt=attempt, judge=judge, started=started)
        except BaseException as exc:
            ended(point, begun.model_copy(update={"requests": judge.requests, "stop": STOP_INTERRUPTED,
                                                  "detail": one_line(exc)}))
            raise
        if ran.cut_off is not None:
            result.cut_off = True
            ended(point, begun.model_copy(update={"started_unix": ran.started_unix, "requests": judge.requests,
                                                  "stop": STOP_INTERRUPTED, "detail": ran.cut_off}))
            return result
        outcome = point_outcome(point, judge, ran, begun, interpreter)
        if outcome.saturation and stops_at_saturation(point) and not run_saturated:
            first = not any(skips_after_saturation(earlier, point) for earlier in points[:i])
            why = skip_words(point.parallel or 1, outcome.saturation, first=first)
            for later in points[i + 1:]:
                if skips_after_saturation(point, later):
                    skipped.setdefault(later.name, why)
        ended(point, outcome)
    return result


def point_outcome(point: Point, judge: Judge, ran: Ran, begun: PointOutcome,
                  interpreter: Interpreter) -> PointOutcome:
    """How a point that ran ended: why it stopped, in words, its records, and (closed loop) its saturation,
    said beside the stop, which stays why the point stopped sending."""
    said = said_stop(ran.said)
    stop = said.stop if said is not None and said.stop is not None else STOP_COMPLETE
    detail = judge.detail(stop, said.detail if said is not None else None)
    saturation = None
    if kind_of(point).watch_saturation:
        seen = closed_load_seen(interpreter.readings(ran.started_unix, ran.ended_unix), started=ran.started_unix,
                                ended=ran.ended_unix, first_round_end=judge.first_round_end,
                                median_speed_tok_s=judge.median_speed_tok_s())
        saturation = point_saturation(seen, by_design=kind_of(point).by_design)
    return begun.model_copy(update={"started_unix": ran.started_unix, "ended_unix": ran.ended_unix,
                                    "requests": judge.requests, "stop": stop, "detail": detail,
                                    "saturation": saturation})
