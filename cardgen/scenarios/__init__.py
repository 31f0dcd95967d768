"""Scenario programs: every scenario kind written once, with no clock and no socket, and the controller that
sequences a run's points. The load engine (:mod:`cardgen.load`) and the virtual-time driver
(:mod:`cardgen.sim.drive`) interpret the same programs; see :mod:`cardgen.scenarios.program` for the language.

    program.py      the commands (Send, Watch, EndWatch), the events, Program and Judge
    closed.py ...   one module per kind: closed, openloop, waves, ingest, batch, prefix, chat, slosearch
    kinds.py        each kind's program and judge by name
    controller.py   the points in order: outcomes, stop reasons, skipping after saturation, attempts
    runner.py       one process's share of a point between its program and an interpreter (the shared runner)
"""

from cardgen.scenarios.controller import Interpreter, Ran, Said, Sequenced, run_points, skips_after_saturation
from cardgen.scenarios.kinds import judge_for, program_for, runs_on
from cardgen.scenarios.program import Command, EndWatch, Judge, Program, Send, Verdict, Watch, record_fields
from cardgen.scenarios.runner import IO, Share, WatchState

__all__ = ["IO", "Command", "EndWatch", "Interpreter", "Judge", "Program", "Ran", "Said", "Send", "Sequenced",
           "Share", "Verdict", "Watch", "WatchState", "judge_for", "program_for", "record_fields", "run_points",
           "runs_on", "skips_after_saturation"]
