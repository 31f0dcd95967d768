"""The one writer of a run: ``run.json`` and ``requests.jsonl`` (with the scrapes and load-generator samples
beside them) are written here, for the load engine (real time), the virtual-time driver and a calibrated run
alike.

    RunWriter.begin(run_dir, info)            a new run: its directory and its first run.json ("running")
    RunWriter.resume(run_dir, info, plan)     a run continued: torn tails set aside, what was resumed said
    writer.open(attempts)                     a session's Recorder, with what earlier sessions left counted
    writer.append(records=, scrapes=, ...)    raw lines, through the Recorder
    writer.put_points(*outcomes)              a point's outcome replaces its entry in run.json's points
    writer.save()                             run.json as it stands (the load stage's heartbeat saves a copy)
    writer.end(status, ended_unix=)           the tallies, the status, the final run.json
    RunWriter.write_whole(...)                a run computed whole, written at once
    RunWriter.amend(run_dir)                  a run that has ended, to add to (its price)

Why one: each of these steps has a rule that is easy to get subtly wrong in a copy. A resumed run's tallies
must be those of the whole run, superseded records apart; a torn last line must be set aside before anything
is appended after it; a point's entry must be replaced, not duplicated, when it starts, ends or runs again.
Written once, both clocks keep them alike, and a run directory reads the same whoever wrote it.

Resume's file work is here too (:func:`check_resumable`, :func:`mark_died`, :func:`suite_of`,
:func:`plan_resume`): which run may be continued reads run.json and the clock and may mark it died, so it
cannot live among the clock-free scenario rules (:mod:`cardgen.scenarios.resume` decides only what runs).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from pydantic import ValidationError

from cardgen.errors import UsageError
from cardgen.points import Point
from cardgen.recorder import Lines, Recorder, set_torn_tail_aside
from cardgen.rundir import RunDir, effective_status, make_run_dir, status_words
from cardgen.runinfo import utc_text
from cardgen.scenarios.resume import ResumePlan, refusal, resume_plan
from cardgen.schemas.records import LoadgenSample, MetricSample, RequestRecord
from cardgen.schemas.run import DIED, RUNNING, STALE, PointOutcome, RunInfo, record_counts
from cardgen.suite import Suite


class RunWriter:
    """The writer of one run directory: :attr:`info` is its run.json as the run fills it, saved by
    :meth:`save`; :attr:`recorder` appends its raw lines while a session is open (:meth:`open`)."""

    def __init__(self, run_dir: Path, info: RunInfo, *, continued: bool = False) -> None:
        """A writer of ``run_dir`` whose run.json is ``info``; nothing is written yet (see :meth:`begin`).
        ``continued``: the files hold earlier sessions of the run already."""
        self.files = RunDir(run_dir)
        self.info = info
        self._recorder: Recorder | None = None
        self._continued = continued

    def __repr__(self) -> str:
        return f"RunWriter({str(self.files.path)!r})"

    # -- a run begins, or goes on ------------------------------------------------------------------------------

    @classmethod
    def begin(cls, run_dir: Path, info: RunInfo) -> RunWriter:
        """A new run: create ``run_dir`` (and its parents) and write its first run.json."""
        make_run_dir(Path(run_dir))
        writer = cls(run_dir, info)
        writer.save()
        return writer

    @classmethod
    def resume(cls, run_dir: Path, info: RunInfo, plan: ResumePlan, *, when: float,
               warnings: Iterable[str] = ()) -> RunWriter:
        """Continue the run in ``run_dir`` whose run.json is ``info`` (:func:`check_resumable`'s, with its
        effective status) as ``plan`` says: run.json lists the plan's points and says ``running`` again, signed by
        this process, with warnings that say what was resumed at ``when`` (then ``warnings``). A torn last line of
        a raw file (a kill mid-write) is moved aside first, so that what is appended starts on a line of its own."""
        before = info.status
        info = info.model_copy(deep=True)
        info.points = list(plan.outcomes)
        info.status, info.ended_unix, info.ended_at = RUNNING, None, None
        if before == STALE:
            info.warnings.append(f"resumed a run on another host ({info.hostname}) that had not been heard of "
                                 f"since {utc_text(info.heartbeat_unix or info.started_unix)}: its process was "
                                 "taken for dead")
        files = RunDir(run_dir)
        for path in (files.requests_jsonl, files.loadgen_jsonl, files.server_metrics_jsonl, files.gpu_metrics_jsonl):
            moved = set_torn_tail_aside(path)
            if moved:
                info.warnings.append(f"{path.name} ended in a line cut short ({moved} bytes, a write the crash "
                                     f"interrupted): moved to {path.name}.torn before appending")
        info.warnings.append(_resumed_words(plan, status=before, when=utc_text(when)))
        info.warnings.extend(warnings)
        writer = cls(run_dir, info, continued=True)
        writer.save()
        return writer

    @classmethod
    def amend(cls, run_dir: Path) -> RunWriter:
        """The run in ``run_dir`` as its run.json was written, to change and :meth:`save` (no session)."""
        files = RunDir(run_dir)
        return cls(files.path, files.load_run_info(as_written=True), continued=True)

    @classmethod
    def write_whole(cls, run_dir: Path, info: RunInfo, records: Iterable[RequestRecord],
                    scrapes: Iterable[MetricSample] = ()) -> Path:
        """A run computed whole (in virtual time, all at once), written as the load stage writes one: its records
        and scrapes appended, then ``info`` as its run.json, as given (its tallies are the caller's)."""
        make_run_dir(Path(run_dir))
        writer = cls(run_dir, info)
        writer.open({})
        writer.append(records=records, scrapes=scrapes)
        writer.close()
        writer.save()
        return writer.files.path

    # -- a session: the raw lines --------------------------------------------------------------------------------

    def open(self, attempts: Mapping[str, int], *, lines: Lines | None = None) -> Recorder:
        """Open a session: the :class:`Recorder` that appends this session's lines (or gives them to ``lines``,
        which writes them). When the files hold earlier sessions (a resumed run, a calibration's next phase) it
        first counts what they left, so that its tallies are the whole run's: a record counts when its attempt is
        the one ``attempts`` gives its point, the others are superseded (kept, never counted)."""
        if self._recorder is not None and not self._recorder.closed:
            raise RuntimeError("a session of this run is open already")
        recorder = Recorder(self.files.path, lines=lines)
        if self._continued:
            files = self.files
            records = files.load_jsonl(files.requests_jsonl.name, RequestRecord) if files.requests_jsonl.exists() else []
            samples = files.load_jsonl(files.loadgen_jsonl.name, LoadgenSample) if files.loadgen_jsonl.exists() else []
            counts = dict(attempts)
            recorder.count_earlier(records, samples, counts=lambda rec: record_counts(counts, rec.scenario, rec.attempt))
        self._recorder, self._continued = recorder, True
        return recorder

    @property
    def recorder(self) -> Recorder:
        """The session's recorder (the last one, once closed: its tallies are what is on disk)."""
        if self._recorder is None:
            raise RuntimeError("no session of this run was opened")
        return self._recorder

    def append(self, *, records: Iterable[RequestRecord] = (), scrapes: Iterable[MetricSample] = (),
               loadgen: Iterable[LoadgenSample] = ()) -> None:
        """Append request records, scrapes of the server's ``/metrics`` and load-generator samples, each
        flushed before this returns."""
        recorder = self.recorder
        for rec in records:
            recorder.record(rec)
        for sample in scrapes:
            recorder.scrape(sample)
        for reading in loadgen:
            recorder.loadgen(reading)

    def close(self) -> None:
        """Close the session's files (again: nothing); raises when the last flush fails."""
        if self._recorder is not None:
            self._recorder.close()

    # -- run.json ------------------------------------------------------------------------------------------------

    def put_points(self, *outcomes: PointOutcome, save: bool = True) -> None:
        """run.json's ``points``: each outcome (a point started, ended, skipped or left out) replaces its point's
        entry, or is appended; then run.json is saved, unless ``save`` is false (a heartbeat saves it soon), once
        the lines recorded so far are on disk (a point run.json says has ended has its records there)."""
        names = [p.name for p in self.info.points]
        for outcome in outcomes:
            if outcome.name in names:
                self.info.points[names.index(outcome.name)] = outcome
            else:
                self.info.points.append(outcome)
                names.append(outcome.name)
        if save:
            if self._recorder is not None:
                self._recorder.sync()
            self.save()

    def save(self, snapshot: RunInfo | None = None) -> Path:
        """Write run.json: :attr:`info`, or a ``snapshot`` of it taken earlier (the load stage's heartbeat saves
        a copy from another thread, so that an fsync never stalls the event loop). While the run is ``running``
        this process signs it (:meth:`RunDir.save_run_info`), so saving again is the heartbeat."""
        return self.files.save_run_info(self.info if snapshot is None else snapshot)

    def end(self, status: str, *, ended_unix: float) -> RunInfo:
        """The run (or this session of it) is over: its files closed, then run.json with its status, its end and
        the tallies of the whole run. Returns :attr:`info`."""
        self.close()
        self.recorder.tally.end(self.info, ended_unix=ended_unix, status=status)
        self.save()
        return self.info


def _resumed_words(plan: ResumePlan, *, status: str, when: str) -> str:
    """What run.json says of a resumption: when, after what, and what runs again."""
    again = "; ".join(f"{o.name} runs again as attempt {o.attempt} (the cut-off attempt's records are kept, "
                      "superseded)" for o in plan.rerun)
    return (f"resumed with cardgen resume at {when} after the run {status_words(status)}: {plan.done} of "
            f"{len(plan.outcomes)} points had ended and were not sent again" + (f"; {again}" if again else ""))


# --- which run may be continued, and how ---------------------------------------------------------------------


def mark_died(run_dir: Path) -> RunInfo:
    """Persist what :meth:`RunDir.load_run_info` reports: a ``running`` run whose writer on this host is gone
    becomes ``died`` in ``run.json``, with a warning saying so. For a command that resumes or cleans up runs;
    any other run is left as it is. Returns ``run.json`` as it now is on disk."""
    files = RunDir(run_dir)
    info = files.load_run_info(as_written=True)
    if info.status == RUNNING and effective_status(info) == DIED:
        info.status = DIED
        when = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
        info.warnings.append(f"the process measuring this run (pid {info.pid} on {info.hostname}) ended "
                             f"without recording an end (killed?); marked died at {when}")
        RunWriter(files.path, info).save()
    return info


def check_resumable(run_dir: Path) -> RunInfo:
    """run.json of a run ``cardgen resume`` may continue; a one-line UsageError for one it may not (complete,
    still running, or written before runs recorded their points). A ``running`` run whose writer is gone is
    marked ``died`` on disk first (:func:`mark_died`). Returns run.json with its effective status."""
    info = mark_died(run_dir)
    status = effective_status(info)
    why = refusal(info, status)
    if why == "running":
        raise UsageError(f"{run_dir} is still running (pid {info.pid} on {info.hostname}): let it end, or stop it "
                         "before resuming it")
    if why == "complete":
        raise UsageError(f"{run_dir} is complete: nothing to resume (its card: cardgen render {run_dir})")
    if why == "unrecorded":
        raise UsageError(f"{run_dir} was written by a cardgen that did not record which points finished: it "
                         "cannot be resumed; measure again with cardgen build")
    return info.model_copy(update={"status": status})


def suite_of(info: RunInfo) -> Suite:
    """The suite a run was measured with, from run.json's ``suite_spec``."""
    try:
        return Suite.model_validate(info.suite_spec)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "suite"
        raise UsageError(f"run.json's suite_spec is not a suite this cardgen reads ({where}: {first['msg']}): "
                         "resume it with the cardgen that started it") from None


def plan_resume(info: RunInfo, points: Sequence[Point]) -> ResumePlan:
    """:func:`~cardgen.scenarios.resume.resume_plan`, with a one-line UsageError when run.json names a point this
    cardgen does not plan (before anything is written)."""
    plan = resume_plan(info, points)
    if plan.unknown:
        names = ", ".join(plan.unknown[:3]) + (" ..." if len(plan.unknown) > 3 else "")
        raise UsageError(f"run.json names points this cardgen does not plan for the run's suite ({names}): resume "
                         "it with the cardgen that started it")
    return plan
