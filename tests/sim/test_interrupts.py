"""A Ctrl-C a modelled run takes between two events of its clock (:mod:`cardgen.sim.interrupts`): never inside a
line being made, where pydantic-core would turn it into an internal error (the failure CI once saw: a build's
Ctrl-C that landed in a record's field serializer ended with exit 70 and run.json "running")."""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Iterator

import numpy as np
import pytest
from pydantic_core import PydanticSerializationError

from cardgen.cli import kinds, model
from cardgen.cli.main import main
from cardgen.rundir import REQUESTS_JSONL
from cardgen.schemas.records import RequestRecord
from cardgen.sim import interrupts, modelled

SUITE = """name: short
scenarios:
  - {kind: closed, name: short, prompt_tokens: 32, output_tokens: 16, parallel: [8], min_requests: 400,
     max_requests: 400}
"""


@pytest.fixture
def terminal() -> Iterator[None]:
    """SIGINT as a terminal's process has it (a test process in the background of a shell inherits it ignored)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


class _Ringing(np.ndarray):
    """Chunk times whose writing sends this process a Ctrl-C: its handler runs inside the record's field
    serializer, which pydantic-core called."""

    def tolist(self) -> list[float]:  # type: ignore[override]
        os.kill(os.getpid(), signal.SIGINT)
        return [float(x) for x in np.asarray(self)]


def _ringing(times: list[float]) -> _Ringing:
    return np.asarray(times, dtype=float).view(_Ringing)


def _ringing_record() -> RequestRecord:
    """A record whose line, written, rings Ctrl-C inside its field serializer."""
    record = RequestRecord(scenario="p", kind="closed", prompt_tokens_target=8, output_tokens_target=4, sent_at=0.0,
                           end_at=0.5, output_tokens=2, chunk_times=[0.1, 0.2])
    record.chunk_times = _ringing([0.1, 0.2])
    return record


def test_a_ctrl_c_in_a_serializer_is_an_internal_error_where_python_takes_it(terminal):
    """Why the run needs its safe points: Python's own handler raises where the signal lands."""
    record = _ringing_record()
    with pytest.raises(PydanticSerializationError, match="KeyboardInterrupt"):
        record.model_dump_json()
    with pytest.raises(KeyboardInterrupt), interrupts.at_safe_points():
        line = record.model_dump_json()  # whole: the Ctrl-C is noted, raised as the safe points end
        assert json.loads(line)["chunk_times"] == [0.1, 0.2] and interrupts.HEARD.noted
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_ctrl_c_is_raised_where_the_run_takes_it_and_at_the_end_at_the_latest(terminal):
    with interrupts.at_safe_points():
        os.kill(os.getpid(), signal.SIGINT)
        assert interrupts.HEARD.noted
        with pytest.raises(KeyboardInterrupt):
            interrupts.HEARD.raise_noted()
        interrupts.HEARD.raise_noted()  # once
    with pytest.raises(KeyboardInterrupt), interrupts.at_safe_points(), interrupts.at_safe_points():  # nested
        os.kill(os.getpid(), signal.SIGINT)
    with pytest.raises(ValueError, match="own"), interrupts.at_safe_points():  # what is on its way out stays
        os.kill(os.getpid(), signal.SIGINT)
        raise ValueError("its own")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_ignored_ctrl_c_or_a_handler_of_the_callers_own_is_left_as_it_is():
    heard = []
    for handler in (signal.SIG_IGN, lambda signum, frame: heard.append(signum)):
        before = signal.signal(signal.SIGINT, handler)
        try:
            with interrupts.at_safe_points():
                assert signal.getsignal(signal.SIGINT) is handler
                os.kill(os.getpid(), signal.SIGINT)
        finally:
            signal.signal(signal.SIGINT, before)
    assert heard == [signal.SIGINT]
    outside = []
    thread = threading.Thread(target=lambda: outside.append(_entered()))
    thread.start()
    thread.join()
    assert outside == [True]  # no handler can be set there: nothing changes


def _entered() -> bool:
    with interrupts.at_safe_points():
        return True


@pytest.mark.parametrize("two", [False, True], ids=["one process", "two processes"])
def test_a_ctrl_c_while_a_record_is_written_ends_the_build_as_an_interrupted_run(tmp_path, monkeypatch, capsys,
                                                                                 terminal, two):
    """The 50th record's line rings: the build ends as Ctrl-C ends it (exit 130, run.json "interrupted", every
    request it counts a whole line, that one included), in one process and in the forked run of two."""
    monkeypatch.setattr(model.beside, "usable", lambda: two)
    real, seen = modelled._Streamed.request, [0]

    def request(self: modelled._Streamed, driven) -> None:  # the run's own record, as it is written
        seen[0] += 1
        if seen[0] == 50:
            driven.record.chunk_times = _ringing(list(driven.record.chunk_times))
        real(self, driven)

    monkeypatch.setattr(modelled._Streamed, "request", request)
    (tmp_path / "short.yaml").write_text(SUITE)
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_:
        main(["build", "CodeLlama-7b", "--gpu", "A100-80GB", "--suite", str(tmp_path / "short.yaml"), "--out",
              str(out), "--quiet", "--no-card"])
    err = capsys.readouterr().err
    assert exit_.value.code == 130 and "cardgen: interrupted" in err and "internal error" not in err, err
    info = json.loads((out / "run.json").read_text())
    lines = (out / REQUESTS_JSONL).read_bytes().split(b"\n")
    records = [RequestRecord.model_validate_json(x) for x in lines[:-1]]
    assert lines[-1] == b"" and info["status"] == "interrupted"
    assert 50 <= info["requests_total"] == len(records) < 400
    assert len({r.response_id for r in records}) == len(records)



def test_a_ctrl_c_a_serializer_turned_into_an_error_ends_any_command_as_interrupted(monkeypatch, capsys, terminal):
    """Outside a run (a card being rendered), Python's handler stays: a Ctrl-C that lands in a serializer is said
    as what it was, exit 130, never an internal error."""
    record = _ringing_record()
    monkeypatch.setattr(kinds.kinds, "callback", lambda **_: record.model_dump_json())
    with pytest.raises(SystemExit) as exit_:
        main(["kinds"])
    err = capsys.readouterr().err
    assert exit_.value.code == 130 and err.strip() == "cardgen: interrupted", err
