"""The scenario runner: what runs every kind's program, with no clock and no socket, and sequences a run's points.
The load engine (:mod:`cardgen.load`) and the virtual-time driver (:mod:`cardgen.sim.drive`) interpret the same
programs (each kind's own, in its folder of :mod:`cardgen.kinds`, in the language of
:mod:`cardgen.kinds.program`).

    controller.py   the points in order: outcomes, stop reasons, skipping after saturation, attempts
    runner.py       one process's share of a point between its program and an interpreter (the shared runner)
    resume.py       which points a resumed run still runs
"""

from cardgen.scenarios.controller import Interpreter, Ran, Sequenced, run_points, skips_after_saturation
from cardgen.scenarios.runner import IO, Share, WatchState

__all__ = ["IO", "Interpreter", "Ran", "Sequenced", "Share", "WatchState", "run_points", "skips_after_saturation"]
