"""Work spread over forked processes: one function mapped over items on every core, in order (the site's pages,
a card's figures), or one function computed beside this process's own work (:func:`meanwhile`: a part of a
card's analysis). Forked, so the function reaches what the parent set up before (a site plan, drawing functions,
a run's frame) without pickling it; only the items and the results cross."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def cores() -> int:
    """The cores this process may run on (its CPU affinity where the system says it, else every core)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def forked_map(fn: Callable[[T], R], items: Sequence[T], *, workers: int | None = None, min_items: int = 2,
               meanwhile: Callable[[], object] | None = None) -> list[R]:
    """``[fn(item) for item in items]`` on ``workers`` forked processes (default: :func:`cores`), in order; in this
    process where fork is not available, one worker is asked for, or there are fewer than ``min_items`` (too
    little to be worth starting processes for). ``meanwhile()`` runs in this process while they work (after the
    items where this process does them itself)."""
    workers = workers or cores()
    if workers < 2 or len(items) < max(min_items, 2) or "fork" not in multiprocessing.get_all_start_methods():
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


class Meanwhile(Generic[R]):
    """``fn()`` computed in a forked process while this one goes on (:func:`meanwhile`): :meth:`result` waits for
    it. Where no second process is worth starting it is computed here, when first asked for."""

    def __init__(self, fn: Callable[[], R]) -> None:
        self._fn = fn
        self._pid, self._fd = 0, -1
        if cores() >= 2 and "fork" in multiprocessing.get_all_start_methods():
            _settle_greenlets()
            read_end, write_end = os.pipe()
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:  # the child: the result (or what it raised) through the pipe, then gone (os._exit)
                os.close(read_end)
                _hand_over(fn, write_end)
            os.close(write_end)
            self._pid, self._fd = pid, read_end

    def result(self) -> R:
        """What ``fn()`` returned (what it raised is raised here). A child that ended without an answer (killed)
        leaves it to this process to compute."""
        if not self._pid:
            return self._fn()
        chunks = []
        while piece := os.read(self._fd, 1 << 20):
            chunks.append(piece)
        os.close(self._fd)
        os.waitpid(self._pid, 0)
        self._pid = 0
        if not chunks:
            return self._fn()
        returned, what = pickle.loads(b"".join(chunks))
        if not returned:
            raise what
        return what  # type: ignore[no-any-return]  # what fn returned, through pickle


def meanwhile(fn: Callable[[], R]) -> Meanwhile[R]:
    """``fn()`` started in a forked process (it reaches what this process set up, unpickled; only its result
    crosses), for this one to do other work meanwhile and take it with :meth:`Meanwhile.result`."""
    return Meanwhile(fn)


def _hand_over(fn: Callable[[], object], fd: int) -> None:
    """The child's side of :class:`Meanwhile`: never returns."""
    try:
        payload = pickle.dumps((True, fn()))
    except BaseException as exc:
        try:
            payload = pickle.dumps((False, exc))
        except Exception:
            payload = b""
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view):]
    except OSError:
        pass
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
