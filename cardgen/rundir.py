"""The run directory: the one owner of a run's files, their names, how they are written and how they are read.

Stages talk through these files: load writes ``run.json``, ``requests.jsonl``, ``server_metrics.jsonl`` and
``loadgen.jsonl``; analysis writes ``summary.json`` and ``tables/`` (and ``bootstrap.json``, each figure's bootstrap
distribution, for comparisons); figures go to ``figures/``; the card is ``README.md``. :class:`RunDir` is how
every stage, the site and the hub reach them, because:

- a JSON or text file is replaced whole or not at all (a temporary file in the same directory, fsync,
  ``os.replace``): a crash mid-write leaves the previous version, and a reader running at the same time (the
  site, a render during the load) never sees half a file;
- a file written by a newer cardgen fails in one line that says to upgrade, instead of loading half-understood,
  and a missing or garbled file fails in one line that names it (:class:`~cardgen.errors.RunFileError`);
- ``kill -9`` leaves ``run.json`` saying ``running`` forever: the reader, not the dead writer, has to notice
  (:func:`effective_status`).

The schemas themselves are in :mod:`cardgen.schemas`.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import gc
import json
import os
import re
import socket
import tempfile
import time
import unicodedata
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import psutil
from pydantic import BaseModel, ValidationError

from cardgen.errors import CardgenError, NewerSchemaError, RunFileError, UsageError
from cardgen.schemas.bootstrap import BOOTSTRAP_SCHEMA_VERSION, BootstrapDigests
from cardgen.schemas.records import MetricSample, RecordSharer, RequestRecord, ScrapeSharer, decode_line
from cardgen.schemas.run import COMPLETE, DIED, INTERRUPTED, RUN_SCHEMA_VERSION, RUNNING, STALE, RunInfo
from cardgen.schemas.summary import SUMMARY_SCHEMA_VERSION, Summary

RUN_JSON = "run.json"
REQUESTS_JSONL = "requests.jsonl"
SERVER_METRICS_JSONL = "server_metrics.jsonl"
LOADGEN_JSONL = "loadgen.jsonl"
GPU_METRICS_JSONL = "gpu_metrics.jsonl"
SERVER_LOG = "server.log"
WORKER_LOG = "worker-{name}.log"  # a local load worker's own output (its errors, its traceback)
SUMMARY_JSON = "summary.json"
BOOTSTRAP_JSON = "bootstrap.json"
TABLES_DIR = "tables"
FIGURES_DIR = "figures"
CARD_MD = "README.md"
PREDICTED_JSONL = "predicted.jsonl"  # a calibrated run's predicted requests (the fitted server, virtual time)
PREDICTED_METRICS_JSONL = "predicted_metrics.jsonl"  # ... and that server's /metrics

STAMP = re.compile(r"^(\d{8})T(\d{6})Z$")  # a run directory named by utc_stamp
# A "running" run written on another host whose writer has not saved run.json for this long reads "stale". The
# writer saves on every change of state; a load stage that refreshes heartbeat_unix more often than this keeps a
# long quiet run from looking stale.
STALE_AFTER_S = 600.0
# How much later than its last sign of life a process may seem to have started and still be the writer (process
# start times are rounded to clock ticks and derived from the boot time).
_START_SLACK_S = 1.0

_SLUG_BAD = re.compile(r"[^a-z0-9._-]+")
M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


def slugify(name: str, *, max_len: int = 80) -> str:
    """A file-system safe, lower-case slug for any model or GPU name (``org/Model:v1`` -> ``org--model-v1``).

    Never empty, never ``.`` or ``..``, never longer than ``max_len``.
    """
    text = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii").lower()
    text = text.replace("/", "--")
    text = _SLUG_BAD.sub("-", text).strip("-.")
    text = re.sub(r"-{3,}", "--", text)[:max_len].strip("-.")
    return text or "model"


def utc_stamp(when: _dt.datetime | None = None) -> str:
    """A sortable UTC timestamp usable as a directory name: ``20261121T195700Z``."""
    when = when or _dt.datetime.now(_dt.UTC)
    return when.astimezone(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")


def default_run_dir(model: str, *, root: Path = Path("runs"), when: _dt.datetime | None = None) -> Path:
    """``runs/<model-slug>/<UTC timestamp>/``: not created here."""
    return root / slugify(model) / utc_stamp(when)


# --- writing -----------------------------------------------------------------------------------------------


def write_text_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so that a crash leaves either the old file or the new one, never half of
    one, and no temporary file behind. The parent directory is created when missing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    """Make the rename itself durable; not every file system lets a directory be opened for that."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _json_text(data: BaseModel | Mapping[str, Any]) -> str:
    """How cardgen writes a JSON document: two-space indent, keys in model order, ending with a newline."""
    if isinstance(data, BaseModel):
        data = data.model_dump(mode="json", by_alias=True)
    return json.dumps(data, indent=2, default=str) + "\n"


# --- reading -----------------------------------------------------------------------------------------------


def read_jsonl(path: Path, model: type[M] | None, *, torn: dict[str, int] | None = None) -> Iterator[Any]:
    """Yield ``model`` objects (plain dicts with ``None``) from a JSON-lines file. A torn last line (a crash
    mid-write) is left out, and its length in bytes is put in ``torn`` under the file's name: a reader says
    what it left out (:func:`torn_line_warning`)."""
    for data in read_jsonl_with(path, decode_line, torn=torn):
        yield data if model is None else model.model_validate(data)


def read_jsonl_with(path: Path, decode: Callable[[bytes], T], *, torn: dict[str, int] | None = None) -> Iterator[T]:
    """Yield each line of a JSON-lines file as ``decode`` reads it (its bytes; :class:`json.JSONDecodeError` where
    it is not JSON). A torn last line is left out, as :func:`read_jsonl` leaves it."""
    path = Path(path)
    with path.open("rb") as fh:
        for line, near_end in _pieces(fh):
            if not line.strip():
                continue
            try:
                yield decode(line)
            except json.JSONDecodeError:
                if near_end:  # only the last line can be torn
                    if torn is not None:
                        torn[path.name] = len(line)
                    continue
                raise


def _pieces(fh: Iterable[bytes]) -> Iterator[tuple[bytes, bool]]:
    """The file's bytes split at each newline, read a line at a time (a large file is never held whole), each
    piece with whether it is one of the last two (the last line, or the empty piece after it)."""
    ahead: deque[bytes] = deque()
    ended = True  # the text so far ends with a newline (an empty text too): an empty piece follows
    for raw in fh:
        ended = raw.endswith(b"\n")
        ahead.append(raw[:-1] if ended else raw)
        if len(ahead) > 2:
            yield ahead.popleft(), False
    if ended:
        ahead.append(b"")
    while len(ahead) > 2:
        yield ahead.popleft(), False
    for piece in ahead:
        yield piece, True


@contextlib.contextmanager
def _no_collection() -> Iterator[None]:
    """No cyclic garbage collection while a long file is read into objects that hold no cycles: each collection
    would walk every object read so far (a fifth of a long run's reading time)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextlib.contextmanager
def _read_errors(path: Path) -> Iterator[None]:
    """A JSON-lines file's reading errors as one-line :class:`RunFileError` s."""
    try:
        yield
    except json.JSONDecodeError as exc:
        raise RunFileError(f"{path} line {_first_bad_line(path)}: not valid JSON ({exc.msg})", path=path) from None
    except ValidationError as exc:
        raise RunFileError(f"{path}: a record does not fit the schema ({_first_error(exc)})", path=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _unreadable(path, exc) from None


def torn_line_warning(name: str, n_bytes: int) -> str:
    """What a run's card says about a JSON-lines file whose torn last line was left out."""
    return f"{name} ended in a line cut short ({n_bytes} bytes): left out"


def _first_bad_line(path: Path) -> int:
    for number, line in enumerate(path.read_text("utf-8").split("\n"), start=1):
        try:
            if line.strip():
                json.loads(line)
        except json.JSONDecodeError:
            return number
    return 0


def _unreadable(path: Path, exc: OSError | UnicodeDecodeError) -> RunFileError:
    reason = "not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else exc.strerror or type(exc).__name__
    return RunFileError(f"cannot read {path}: {reason}", path=path)


def _first_error(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "document"
    return f"{where}: {first['msg']}"


# --- is the writer still there? ----------------------------------------------------------------------------


def _writer_alive(pid: int, last_seen_unix: float) -> bool:
    """Whether process ``pid`` of this host is still the one that wrote at ``last_seen_unix``: a process with
    that pid that started later is another one that was given a recycled pid."""

    if pid == os.getpid():
        return True
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:  # exited, not yet reaped by its parent
            return False
        started = proc.create_time()
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:  # it exists and is not ours to inspect: assume it is the writer
        return True
    return started <= last_seen_unix + _START_SLACK_S


def effective_status(info: RunInfo, *, now: float | None = None, host: str | None = None) -> str:
    """``info.status`` as it stands now. A run that says ``running``:

    - written on this host: ``died`` when its writer (``pid``) is gone, or the pid now belongs to a process that
      started after the writer's last save;
    - written on another host: ``stale`` when ``heartbeat_unix`` is more than :data:`STALE_AFTER_S` old;
    - written by a cardgen that did not record its writer: ``running`` (nothing to check).
    """
    if info.status != RUNNING:
        return info.status
    host = socket.gethostname() if host is None else host
    last_seen = info.heartbeat_unix if info.heartbeat_unix is not None else info.started_unix
    if info.hostname == host and info.pid is not None:
        return RUNNING if _writer_alive(info.pid, last_seen) else DIED
    now = time.time() if now is None else now
    if info.heartbeat_unix is not None and now - info.heartbeat_unix > STALE_AFTER_S:
        return STALE
    return RUNNING


# --- the run directory -------------------------------------------------------------------------------------


class RunDir:
    """One run directory: the path of each file, atomic writes, and loading with schema-version checks.

    Loading raises :class:`~cardgen.errors.RunFileError` (a :class:`~cardgen.errors.RenderError`) with one line
    naming the file when it is missing, garbled or does not fit its schema, and
    :class:`~cardgen.errors.NewerSchemaError` when a newer cardgen wrote it.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        #: the JSON-lines files :meth:`load_jsonl` read whose torn last line it left out: name -> bytes
        self.torn: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    # the files

    @property
    def run_json(self) -> Path:
        return self.path / RUN_JSON

    @property
    def requests_jsonl(self) -> Path:
        return self.path / REQUESTS_JSONL

    @property
    def server_metrics_jsonl(self) -> Path:
        return self.path / SERVER_METRICS_JSONL

    @property
    def loadgen_jsonl(self) -> Path:
        return self.path / LOADGEN_JSONL

    @property
    def gpu_metrics_jsonl(self) -> Path:
        return self.path / GPU_METRICS_JSONL

    def worker_log(self, name: str) -> Path:
        return self.path / WORKER_LOG.format(name=name)

    @property
    def summary_json(self) -> Path:
        return self.path / SUMMARY_JSON

    @property
    def tables_dir(self) -> Path:
        return self.path / TABLES_DIR

    @property
    def card_md(self) -> Path:
        return self.path / CARD_MD

    def files(self, sub: str = "") -> list[str]:
        """Files under ``sub`` (``""``: the whole run) as sorted run-relative POSIX paths.

        Hidden files (a write in progress among them) and symbolic links that lead out of the run directory are
        left out: never copied or uploaded.
        """
        root = self.path.resolve()
        base = self.path / sub
        if not base.is_dir():
            return []
        linked: dict[Path, bool] = {self.path: False}

        def through_link(path: Path) -> bool:  # the path, or a folder between the run directory and it, is a link
            if path not in linked:
                linked[path] = path.is_symlink() or through_link(path.parent)
            return linked[path]

        found = []
        for path in base.rglob("*"):
            rel = path.relative_to(self.path)
            if (
                path.is_file()
                and not any(p.startswith(".") for p in rel.parts)
                and (not through_link(path) or path.resolve().is_relative_to(root))  # only a link can lead out
            ):
                found.append(rel.as_posix())
        return sorted(found)

    # writing

    def write_text(self, name: str, text: str) -> Path:
        """Replace the file ``name`` (run-relative, e.g. ``README.md`` or ``tables/x.csv``) atomically."""
        path = self.path / name
        write_text_atomic(path, text)
        return path

    def write_json(self, name: str, data: BaseModel | Mapping[str, Any]) -> Path:
        """Replace the JSON file ``name`` atomically with a model or a mapping (two-space indent, model field order)."""
        return self.write_text(name, _json_text(data))

    def save_run_info(self, info: RunInfo) -> Path:
        """Write ``run.json``. While the run is ``running`` this process signs it: ``pid``, ``hostname`` and
        ``heartbeat_unix`` are set on ``info`` (so saving again is the heartbeat)."""
        if info.status == RUNNING:
            info.pid, info.hostname, info.heartbeat_unix = os.getpid(), socket.gethostname(), time.time()
        return self.write_json(RUN_JSON, info)

    def save_summary(self, summary: Summary) -> Path:
        """Write ``summary.json`` (its own stable text: :meth:`Summary.to_json`)."""
        return self.write_text(SUMMARY_JSON, summary.to_json())

    # reading

    def load_run_info(self, *, as_written: bool = False) -> RunInfo:
        """``run.json``, version-checked. ``status`` is the :func:`effective_status` (a ``running`` run whose
        writer was killed reads ``died``) unless ``as_written``; the file itself is never changed here."""
        if not self.path.is_dir():
            raise RunFileError(f"run directory {self.path} does not exist", path=self.path)
        info = self._load(RUN_JSON, RunInfo, known=RUN_SCHEMA_VERSION, absent="not a cardgen run directory")
        if not as_written:
            status = effective_status(info)
            if status != info.status:
                info = info.model_copy(update={"status": status})
        return info

    def load_summary(self) -> Summary:
        """``summary.json``, version-checked."""
        return self._load(SUMMARY_JSON, Summary, known=SUMMARY_SCHEMA_VERSION,
                          absent=f"analyse the run with 'cardgen render {self.path}'")

    def load_bootstrap(self) -> BootstrapDigests:
        """``bootstrap.json`` (each figure's bootstrap digest, for comparisons), version-checked."""
        return self._load(BOOTSTRAP_JSON, BootstrapDigests, known=BOOTSTRAP_SCHEMA_VERSION,
                          absent=f"render the run again with 'cardgen render {self.path}'")

    def load_card(self) -> str:
        """The card's Markdown (``README.md``)."""
        path = self.card_md
        if not path.is_file():
            raise RunFileError(f"{self.path} has no {CARD_MD} (the card): render it with 'cardgen render "
                               f"{self.path}'", path=path)
        try:
            return path.read_text("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise _unreadable(path, exc) from None

    def load_jsonl(self, name: str, model: type[M] | None = None) -> list[Any]:
        """Every line of the JSON-lines file ``name`` as ``model`` (a plain dict with ``None``); a torn last
        line is left out and counted in :attr:`torn` (see :func:`read_jsonl`). Its version is ``run.json``'s,
        checked by :meth:`load_run_info`."""
        path = self.path / name
        with _read_errors(path), _no_collection():
            return self._load_jsonl(path, model)

    def stream_records(self, name: str) -> Iterator[RequestRecord]:
        """The records of the JSON-lines file ``name`` as :meth:`load_jsonl` reads them (shared, a torn last line
        counted in :attr:`torn`, the same errors), one at a time as they are read: what reads a long run's records
        this way holds only those it keeps (the analysis makes each a row of its frame and lets it go)."""
        path = self.path / name
        keep = RecordSharer().share
        with _read_errors(path), _no_collection():
            for rec in read_jsonl(path, RequestRecord, torn=self.torn):
                yield keep(rec)

    def _load_jsonl(self, path: Path, model: type[M] | None) -> list[Any]:
        """:meth:`load_jsonl`'s reading, its errors not yet put in words."""
        if model is MetricSample:  # a long run's scrapes: what each shares with the last, read and held once
            return list(read_jsonl_with(path, ScrapeSharer().read_line, torn=self.torn))
        if model is RequestRecord:  # a long run's records: each one's chunk times in one array
            keep = RecordSharer().share
            return [keep(rec) for rec in read_jsonl(path, model, torn=self.torn)]
        return list(read_jsonl(path, model, torn=self.torn))

    def _load(self, name: str, model: type[M], *, known: int, absent: str) -> M:
        path = self.path / name
        if not path.is_file():
            raise RunFileError(f"{self.path} has no {name}: {absent}", path=path)
        try:
            data = json.loads(path.read_text("utf-8"))
        except json.JSONDecodeError as exc:
            raise RunFileError(f"{path} is not readable JSON (line {exc.lineno} column {exc.colno}: {exc.msg})",
                               path=path) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise _unreadable(path, exc) from None
        if not isinstance(data, dict):
            raise RunFileError(f"{path} is not a JSON object", path=path)
        version = data.get("schema_version", known)
        if not isinstance(version, int) or isinstance(version, bool):
            raise RunFileError(f"{path}: schema_version is not a whole number ({version!r})", path=path)
        if version > known:
            raise NewerSchemaError(path, found=version, known=known)
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            raise RunFileError(f"{path} does not fit schema {known} ({_first_error(exc)})", path=path) from None


# --- a run directory for a new run ------------------------------------------------------------------------


def check_run_dir(run_dir: Path) -> None:
    """A one-line UsageError, before any server is probed, when ``run_dir`` holds a run already or can never
    become a directory (a file is in the way). Missing parents are fine: the run creates them."""
    files = RunDir(run_dir)
    if files.requests_jsonl.exists() or files.run_json.exists():
        raise UsageError(f"{run_dir} {_run_there(files)}")
    for path in (run_dir, *run_dir.parents):
        if path.exists() or path.is_symlink():  # a dangling link is in the way too
            if not path.is_dir():
                raise UsageError(f"cannot make the run directory {run_dir}: {path} is not a directory")
            return


def _run_there(files: RunDir) -> str:
    """What to tell a person about the run already in a directory: its effective status, and what to do."""
    try:
        info = files.load_run_info()
    except CardgenError:
        return "already holds a run: choose another --out"
    if info.status == RUNNING:
        return f"already holds a run that is still running (pid {info.pid} on {info.hostname}): choose another --out"
    if info.status == COMPLETE:
        return "already holds a complete run: choose another --out"
    return f"already holds a run that {status_words(info.status)}: continue it with 'cardgen resume {files.path}', or choose another --out"


def status_words(status: str) -> str:
    """What happened to a run that did not end complete, to follow "a run that": died, failed..."""
    return {INTERRUPTED: "was interrupted", STALE: "has not been heard of for a while"}.get(status, status)


def make_run_dir(run_dir: Path) -> None:
    """Create the run directory and its missing parents; a one-line UsageError when that cannot be done."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot make the run directory {run_dir}: {exc.strerror or exc}") from None


def run_dirs(model: str, gpus: Sequence[str], *, out_dir: Path | None, runs_root: Path) -> list[Path]:
    """One run directory per GPU: ``--out`` (one folder per GPU inside it when there are several), or
    ``runs/<model>/<UTC time>[-<gpu>]/``; a one-line UsageError when one holds a run already."""
    if len(gpus) == 1:
        dirs = [out_dir or default_run_dir(model, root=runs_root)]
    elif out_dir is not None:
        dirs = [out_dir / slugify(Path(g).stem if g.endswith((".yaml", ".yml")) else g) for g in gpus]
    else:
        base = default_run_dir(model, root=runs_root)
        dirs = [base.with_name(f"{base.name}-{slugify(Path(g).stem if g.endswith(('.yaml', '.yml')) else g)}")
                for g in gpus]
    for run_dir in dirs:
        check_run_dir(run_dir)
    return dirs


def log_tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a log file ("" when there is none)."""
    try:
        with Path(path).open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
