"""Waves: that many requests sent at once, again and again, to find the wave that saturates the server (its
KV cache, as the saturation rule reads it: ``cardgen.saturation.watched_saturated``).

``search: bisect`` doubles the wave from 1 until one saturates, then bisects (:class:`WaveSearch`);
``search: step`` sends 1, 1 + step, 1 + 2 step ... up to ``max_wave``, and stops at the first wave that
saturated when ``stop_at_saturation``. The server is watched during every wave when the search needs it;
a wave ends when its last request does, and the next one starts then.
"""

from __future__ import annotations

from cardgen.kinds.program import Command, EndWatch, Program, Said, Send, Verdict, Watch
from cardgen.kinds.view import PointView
from cardgen.kinds.waves.schema import WavesParams
from cardgen.outcome import Outcome
from cardgen.stops import STOP_COMPLETE, STOP_SATURATED


class WaveSearch:
    """The sizes of growing waves that find the smallest wave that saturates the server. Sizes double from 1
    until one saturates (or ``max_wave`` is reached), then bisect between the largest size that did not
    saturate and the smallest that did, until they are ``resolution`` requests apart (1 by default: the KV
    capacity is then bracketed within one request's tokens).

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


class WavesProgram(Program):
    kind = "waves"

    def __init__(self, point: PointView, *, index: int = 0, parts: int = 1) -> None:
        super().__init__(point, index=index, parts=parts)
        self.params = params = point.params_as(WavesParams)
        self.search = (WaveSearch(max_wave=params.max_wave, resolution=params.resolution)
                       if params.search == "bisect" else None)
        self.steps = iter(self.wave_sizes())
        self.watching = self.search is not None or params.stop_at_saturation
        self.sizes: list[int] = []  # every wave sent, in order
        self.calm = 0  # the largest wave seen not to saturate (step)
        self.first_saturated: int | None = None  # the first wave seen to saturate
        self.readable = True  # the server could be read while watched
        self._left = 0  # requests of the wave under way still running

    def said(self) -> Said:
        return Said(stop=self.stop, detail=self.detail, sizes=tuple(self.sizes),
                    saturated=f"wave of {self.first_saturated}" if self.first_saturated is not None else None)

    def wave_sizes(self) -> list[int]:
        """``search: step``: the size of each wave, in order (the run may stop early at saturation)."""
        return list(range(1, self.params.max_wave + 1, self.params.step))

    def start(self) -> list[Command]:
        return self._next_wave()

    def ended(self, send: Send, outcome: Outcome, now: float) -> list[Command]:
        self._left -= 1
        if self._left:
            return []
        if self.watching:
            return [EndWatch()]
        return self._after_wave(saturated=False)

    def watched(self, verdict: Verdict, now: float) -> list[Command]:
        self.readable = self.readable and verdict.readable
        return self._after_wave(saturated=verdict.saturated)

    def _after_wave(self, *, saturated: bool) -> list[Command]:
        size = self.sizes[-1]
        if saturated and self.first_saturated is None:
            self.first_saturated = size
        if self.search is not None:
            self.search.report(size, saturated)
        elif saturated and self.params.stop_at_saturation:
            return self.finish(STOP_SATURATED, f"wave of {size}")
        elif not saturated:
            self.calm = size
        return self._next_wave()

    def _next_wave(self) -> list[Command]:
        size = self.search.next_size() if self.search is not None else next(self.steps, None)
        if size is None:
            return self._done()
        self.sizes.append(size)
        self._left = size
        sends: list[Command] = [self.send(extra={"wave": size}, parallel=size) for _ in range(size)]
        return [Watch(), *sends] if self.watching else sends

    def _done(self) -> list[Command]:
        search = self.search
        if search is not None and search.bracketed:
            return self.finish(STOP_SATURATED, f"between waves of {search.low} and {search.high}")
        largest = search.low if search is not None else self.calm
        if not self.watching:
            detail = "saturation not watched"
        elif not self.readable:
            detail = "saturation unknown: the server's /metrics did not answer"
        else:
            detail = f"no wave up to {largest} saturated the server"
        return self.finish(STOP_COMPLETE, detail)
