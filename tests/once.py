"""A costly session fixture made once for the whole test run, not once per pytest-xdist worker: the first worker
makes it under a file lock and pickles it beside what it wrote, the others read it back (the pattern
pytest-xdist's documentation gives for a session fixture that must run once). Its files are shared: the tests that
take such a fixture only read them."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from filelock import FileLock

T = TypeVar("T")


def made_once(name: str, tmp_path_factory: pytest.TempPathFactory, worker_id: str, make: Callable[[Path], T]) -> T:
    """``make(folder)`` once per test run (once per process without xdist), in a folder every worker sees."""
    if worker_id == "master":  # no xdist
        return make(tmp_path_factory.mktemp(name))
    root = tmp_path_factory.getbasetemp().parent / name  # the workers' common base
    with FileLock(f"{root}.lock"):
        saved = root / "made.pickle"
        if saved.is_file():
            return pickle.loads(saved.read_bytes())
        root.mkdir(parents=True, exist_ok=True)
        made = make(root)
        saved.write_bytes(pickle.dumps(made))
        return made
