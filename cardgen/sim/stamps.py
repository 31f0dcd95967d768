"""The stamp log (``--stamp-log``): one JSON line per generation request once it is over, with the time each of
its chunks was written; the reference that client-side timings are checked against."""

from __future__ import annotations

import asyncio
import json
from collections import deque
from pathlib import Path
from typing import Any

from cardgen.sim.live import Live
from cardgen.sim.scheduler import Seq, SeqStatus


class StampLog:
    """The ``--stamp-log`` file. ``add`` only queues the record: encoding a long ``times`` list costs ~0.1 ms,
    too much inside a step's emission loop; :meth:`drain` encodes the queue one record per event-loop turn."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._fh = self.path.open("a", encoding="utf-8")
        self._pending: deque[dict[str, Any]] = deque()

    def add(self, record: dict[str, Any]) -> None:
        self._pending.append(record)

    @staticmethod
    def _line(record: dict[str, Any]) -> str:
        return json.dumps(record, separators=(",", ":")) + "\n"

    async def drain(self) -> None:
        """Encode and write what is queued, yielding to the event loop between records."""
        lines = []
        try:
            while self._pending:
                lines.append(self._line(self._pending.popleft()))
                await asyncio.sleep(0)
        finally:  # also when cancelled at shutdown: nothing encoded is lost
            if lines:
                self._fh.write("".join(lines))
                self._fh.flush()

    def close(self) -> None:
        lines = [self._line(r) for r in self._pending]
        self._pending.clear()
        self._fh.write("".join(lines))
        self._fh.close()



def stamp_record(live: Live, seq: Seq | None, *, aborted: bool = False) -> dict[str, Any]:
    """The stamp log's line of a request that is over (see :mod:`cardgen.sim.server` for the fields)."""
    record: dict[str, Any] = {
        "id": live.id,
        "index": live.index,
        "arrived": live.arrived,
        "times": live.times,
        "prompt_tokens": live.params.prompt_tokens,
        "output_tokens": len(live.times) + live.extra_tokens,
        **({"probe": True} if live.probe else {}),
        "finish_reason": seq.finish_reason
        if seq is not None and seq.status == SeqStatus.FINISHED
        else None,
    }
    if live.fault is not None:
        record["fault"] = live.fault
    if aborted:
        record["aborted"] = True
    return record
