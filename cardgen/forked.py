"""Work spread over forked processes: one function mapped over items on every core, in order (the site's pages,
a card's figures). Forked, so the function reaches what the parent set up before (a site plan, drawing functions)
without pickling it; only the items and the results cross."""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def cores() -> int:
    """The cores this process may run on (its CPU affinity where the system says it, else every core)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def can_fork() -> bool:
    """This system starts processes by forking (a forked one reaches what its parent set up, unpickled)."""
    return "fork" in multiprocessing.get_all_start_methods()


def forked_map(fn: Callable[[T], R], items: Sequence[T], *, workers: int | None = None, min_items: int = 2,
               meanwhile: Callable[[], object] | None = None) -> list[R]:
    """``[fn(item) for item in items]`` on ``workers`` forked processes (default: :func:`cores`), in order; in this
    process where fork is not available, one worker is asked for, or there are fewer than ``min_items`` (too
    little to be worth starting processes for). ``meanwhile()`` runs in this process while they work (after the
    items where this process does them itself)."""
    workers = workers or cores()
    if workers < 2 or len(items) < max(min_items, 2) or not can_fork():
        out = [fn(item) for item in items]
        if meanwhile is not None:
            meanwhile()
        return out
    _settle_greenlets()
    with ProcessPoolExecutor(max_workers=min(workers, len(items)), mp_context=multiprocessing.get_context("fork")) \
            as pool:
        results = pool.map(fn, items, chunksize=max(1, len(items) // (workers * 8)))
        if meanwhile is not None:
            meanwhile()
        return list(results)


def _settle_greenlets() -> None:
    """Under gevent's monkey patching (a measured run's process), let the greenlets that are due run before forking:
    a thread started and not yet run (matplotlib's font-cache Timer, the first time it builds its cache on a machine)
    would otherwise run in every child, where ``threading`` no longer knows it, and print a traceback there."""
    if "gevent" not in sys.modules:
        return
    from gevent import idle, monkey  # noqa: PLC0415  only where gevent is loaded already (a measured run)

    if monkey.is_module_patched("threading"):
        idle()
